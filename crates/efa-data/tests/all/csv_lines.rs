//! The line an error names is the line of the file, in CRLF files and after blank lines too,
//! for every reader built on the shared CSV reader (item-feature tables, Instacart items,
//! temperature cities and readings). The csv crate's own line count put a CRLF file's every
//! record, and a record after a blank line, one line early. Item-feature tables, like the
//! data CSV of `efa train`, refuse blank lines.

use crate::common;

use common::{assert_at, scratch::scratch, write};
use efa_data::instacart::load_items;
use efa_data::item_csv::read_item_csv;
use efa_data::temperature::{load_cities, load_temperature_table};
use efa_data::user_csv::read_user_csv;

/// `text` with every `\n` written as `\r\n`.
fn crlf(text: &str) -> String {
    text.replace('\n', "\r\n")
}

#[test]
fn errors_name_the_file_line_in_crlf_files_and_after_blank_lines() {
    let d = scratch("efa-data-csv-lines");
    // (header and good rows, the bad row, its field and message): the bad row is the last.
    let items = "item,latitude,longitude\n1,40.3,-101.9\n";
    let cities = "state,city,latitude,longitude\nAlabama,Birmingham,33.5,-86.8\n";
    let basket_items = "item_id,instacart_product_id,name\n1,21903,Spinach\n";
    for (tag, edit, line) in [
        ("lf", (|t: &str| t.to_string()) as fn(&str) -> String, 3),
        ("crlf", |t: &str| crlf(t), 3),
        ("blank", |t: &str| t.replacen('\n', "\n\n", 2), 5),
        (
            "crlf-blank",
            |t: &str| crlf(&t.replacen('\n', "\n\n\n", 2)),
            7,
        ),
    ] {
        let p = write(
            &d,
            &format!("items-{tag}.csv"),
            edit(&format!("{items}2,41.4,abc\n")),
        );
        let short = write(
            &d,
            &format!("short-{tag}.csv"),
            edit(&format!("{items}2,41.4\n")),
        );
        if tag.contains("blank") {
            // An item table refuses blank lines (the first is line 2), as the data CSV does.
            assert_at(read_item_csv(&p), &p, 2, "", "empty line");
            assert_at(read_item_csv(&short), &short, 2, "", "empty line");
        } else {
            assert_at(read_item_csv(&p), &p, line, "longitude", "cannot parse");
            assert_at(read_item_csv(&short), &short, line, "longitude", "found 2");
        }
        let p = write(
            &d,
            &format!("cities-{tag}.csv"),
            edit(&format!("{cities}Iowa,Des Moines,abc,-93.6\n")),
        );
        assert_at(load_cities(&p), &p, line, "latitude", "cannot parse");
        let p = write(
            &d,
            &format!("basket-items-{tag}.csv"),
            edit(&format!("{basket_items}3,30391,Cucumber\n")),
        );
        assert_at(load_items(&p), &p, line, "item_id", "expected item id 2");
        let c = write(&d, &format!("c-{tag}.csv"), cities);
        let t = write(
            &d,
            &format!("t-{tag}.csv"),
            edit("state,city,year,month,day,avg_temp_f\nAlabama,Birmingham,2010,10,1,71.0\nAlabama,Birmingham,2010,10,2,warm\n"),
        );
        assert_at(
            load_temperature_table(&t, &c),
            &t,
            line,
            "avg_temp_f",
            "cannot parse",
        );
    }
}

#[test]
fn item_tables_refuse_blank_lines_as_the_data_csv_does() {
    // The csv crate skips blank lines; the data CSV refuses them (no line of a user's file is
    // silently ignored), and an item-feature table skipped them without a word.
    let d = scratch("efa-data-item-blank");
    let data = "seq,order,item,value\na,1,1,0.5\n";
    for (tag, items, line) in [
        ("middle", "item,a\n1,0.5\n\n2,1.5\n", 3),
        ("spaces", "item,a\n1,0.5\n \t \n2,1.5\n", 3),
        ("end", "item,a\n1,0.5\n2,1.5\n\n", 4),
        ("two", "item,a\n1,0.5\n2,1.5\n\n\n3,2.5\n", 4),
    ] {
        for (eol, edit) in [
            ("lf", (|t: &str| t.to_string()) as fn(&str) -> String),
            ("crlf", |t: &str| crlf(t)),
        ] {
            let p = write(&d, &format!("items-{tag}-{eol}.csv"), edit(items));
            assert_at(read_item_csv(&p), &p, line, "", "empty line");
            // The same file's data-CSV counterpart (the data header, the same blank line)
            // is refused in the same words.
            let body = edit(items).replacen(&edit("item,a\n"), &edit(data), 1);
            let q = write(&d, &format!("data-{tag}-{eol}.csv"), body);
            let (e, f) = (
                read_item_csv(&p).unwrap_err().to_string(),
                read_user_csv(&q).unwrap_err().to_string(),
            );
            let tail = |m: &str, path: &std::path::Path| {
                m.strip_prefix(&path.display().to_string())
                    .unwrap()
                    .to_string()
            };
            assert_eq!(
                tail(&e, &p),
                format!(":{line}: field ``: empty line"),
                "{e}"
            );
            assert_eq!(
                tail(&f, &q),
                format!(":{}: field ``: empty line", line + 1),
                "{f}"
            );
        }
    }
    // A blank first line leaves the file without a header.
    let p = write(&d, "items-header.csv", "\nitem,a\n1,0.5\n");
    assert_at(read_item_csv(&p), &p, 1, "header", "empty file");
    // Blank lines inside a quoted header name are text, not lines.
    let p = write(&d, "items-quoted.csv", "item,\"a\n\nb\"\n1,0.5\n");
    let t = read_item_csv(&p).unwrap();
    assert_eq!((t.features[0].as_str(), t.rows[0].line), ("a\n\nb", 4));
}
