//! The line an error names is the line of the file, in CRLF files too, for every reader built
//! on the shared CSV reader (item-feature tables, Instacart items and baskets, temperature
//! cities and readings). The csv crate's own line count put a CRLF file's every record, and a
//! record after a blank line, one line early. Every one of these readers, like the data CSV
//! of `efa train`, refuses blank lines, naming the first.

use crate::common;

use common::{assert_at, scratch::scratch, write};
use efa_data::instacart::{load_baskets, load_items};
use efa_data::item_csv::read_item_csv;
use efa_data::temperature::{load_cities, load_temperature_table};
use efa_data::user_csv::read_user_csv;

/// `text` with every `\n` written as `\r\n`.
fn crlf(text: &str) -> String {
    text.replace('\n', "\r\n")
}

#[test]
fn errors_name_the_file_line_in_crlf_files_and_at_blank_lines() {
    let d = scratch("efa-data-csv-lines");
    // (header and good rows, the bad row, its field and message): the bad row is the last.
    let items = "item,latitude,longitude\n1,40.3,-101.9\n";
    let cities = "state,city,latitude,longitude\nAlabama,Birmingham,33.5,-86.8\n";
    let basket_items = "item_id,instacart_product_id,name\n1,21903,Spinach\n";
    for (tag, edit) in [
        ("lf", (|t: &str| t.to_string()) as fn(&str) -> String),
        ("crlf", |t: &str| crlf(t)),
        ("blank", |t: &str| t.replacen('\n', "\n\n", 2)),
        ("crlf-blank", |t: &str| crlf(&t.replacen('\n', "\n\n\n", 2))),
    ] {
        // The bad row's line (3), its field and message; with blank lines, the first (line 2)
        // is refused before any row is read.
        let at = |field, needle| {
            if tag.contains("blank") {
                (2, "", "empty line")
            } else {
                (3, field, needle)
            }
        };
        let p = write(
            &d,
            &format!("items-{tag}.csv"),
            edit(&format!("{items}2,41.4,abc\n")),
        );
        let (line, field, needle) = at("longitude", "cannot parse");
        assert_at(read_item_csv(&p), &p, line, field, needle);
        let short = write(
            &d,
            &format!("short-{tag}.csv"),
            edit(&format!("{items}2,41.4\n")),
        );
        let (line, field, needle) = at("longitude", "found 2");
        assert_at(read_item_csv(&short), &short, line, field, needle);
        let p = write(
            &d,
            &format!("cities-{tag}.csv"),
            edit(&format!("{cities}Iowa,Des Moines,abc,-93.6\n")),
        );
        let (line, field, needle) = at("latitude", "cannot parse");
        assert_at(load_cities(&p), &p, line, field, needle);
        let p = write(
            &d,
            &format!("basket-items-{tag}.csv"),
            edit(&format!("{basket_items}3,30391,Cucumber\n")),
        );
        let (line, field, needle) = at("item_id", "expected item id 2");
        assert_at(load_items(&p), &p, line, field, needle);
        let c = write(&d, &format!("c-{tag}.csv"), cities);
        let t = write(
            &d,
            &format!("t-{tag}.csv"),
            edit("state,city,year,month,day,avg_temp_f\nAlabama,Birmingham,2010,10,1,71.0\nAlabama,Birmingham,2010,10,2,warm\n"),
        );
        let (line, field, needle) = at("avg_temp_f", "cannot parse");
        assert_at(load_temperature_table(&t, &c), &t, line, field, needle);
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

/// `t` with `insert` after its second line.
fn after_line_2(t: &str, insert: &str) -> String {
    let k = t.match_indices('\n').nth(1).unwrap().0 + 1;
    format!("{}{insert}{}", &t[..k], &t[k..])
}

/// A change to a file's text.
type Edit = fn(&str) -> String;

/// The ways a blank line sits in a file of a header and two records, each with the line the
/// error names: between the records, whitespace only, an empty line at the end (a second
/// newline), whitespace after the final newline, and several blank lines (the first named).
const BLANKS: [(&str, Edit, usize); 5] = [
    ("middle", |t| after_line_2(t, "\n"), 3),
    ("spaces", |t| after_line_2(t, " \t \n"), 3),
    ("end", |t| format!("{t}\n"), 4),
    ("end-spaces", |t| format!("{t}  "), 4),
    ("two", |t| after_line_2(t, "\n\n"), 3),
];

#[test]
fn paper_loaders_refuse_blank_lines_as_the_data_csv_does() {
    // Instacart's items and baskets and the temperature cities and readings skipped blank
    // lines without a word (the csv crate drops them); the data CSV and item tables refuse
    // them, naming the line. A single final newline, or none, is not a blank line.
    let d = scratch("efa-data-paper-blank");
    let items = "item_id,instacart_product_id,name\n1,21903,Spinach\n2,30391,Cucumber\n";
    let baskets = "order_id,product_id,rank\n878,2,1\n878,1,2\n";
    let cities = "state,city,latitude,longitude\nAlabama,Birmingham,33.5,-86.8\n\
                  Iowa,Des Moines,41.6,-93.6\n";
    let temps = "state,city,year,month,day,avg_temp_f\nAlabama,Birmingham,2010,10,1,71.0\n\
                 Iowa,Des Moines,2010,10,1,55.5\n";
    let good_cities = write(&d, "good-cities.csv", cities);
    for (eol, edit) in [
        ("lf", (|t: &str| t.to_string()) as fn(&str) -> String),
        ("crlf", |t: &str| crlf(t)),
    ] {
        // The files as they are, and without their final newline, read in full.
        for (end, cut) in [("nl", 0), ("no-nl", edit("\n").len())] {
            let name = |f: &str| format!("{f}-{eol}-{end}.csv");
            let whole = |t: &str| {
                let t = edit(t);
                t[..t.len() - cut].to_string()
            };
            let p = write(&d, &name("items"), whole(items));
            assert_eq!(load_items(&p).unwrap()[1].name, "Cucumber");
            let p = write(&d, &name("baskets"), whole(baskets));
            assert_eq!(load_baskets(&p, 2).unwrap().baskets, vec![vec![2, 1]]);
            let c = write(&d, &name("cities"), whole(cities));
            assert_eq!(load_cities(&c).unwrap()[1].longitude, -93.6);
            let t = write(&d, &name("temps"), whole(temps));
            assert_eq!(load_temperature_table(&t, &c).unwrap().rows, 2);
        }
        for (tag, blank, line) in BLANKS {
            let name = |f: &str| format!("{f}-{tag}-{eol}.csv");
            let p = write(&d, &name("items"), edit(&blank(items)));
            // In the data CSV's words.
            let m = load_items(&p).unwrap_err().to_string();
            assert!(
                m.ends_with(&format!(":{line}: field ``: empty line")),
                "{m}"
            );
            assert_at(load_items(&p), &p, line, "", "empty line");
            let p = write(&d, &name("baskets"), edit(&blank(baskets)));
            assert_at(load_baskets(&p, 2), &p, line, "", "empty line");
            let p = write(&d, &name("cities"), edit(&blank(cities)));
            assert_at(load_cities(&p), &p, line, "", "empty line");
            let p = write(&d, &name("temps"), edit(&blank(temps)));
            let r = load_temperature_table(&p, &good_cities);
            assert_at(r, &p, line, "", "empty line");
        }
        // A blank first line leaves the file without a header.
        let p = write(
            &d,
            &format!("items-first-{eol}.csv"),
            edit(&format!("\n{items}")),
        );
        assert_at(load_items(&p), &p, 1, "header", "empty file");
        let p = write(
            &d,
            &format!("temps-first-{eol}.csv"),
            edit(&format!("\n{temps}")),
        );
        let r = load_temperature_table(&p, &good_cities);
        assert_at(r, &p, 1, "header", "empty file");
    }
    // Blank lines inside a quoted field are text, not lines.
    let p = write(
        &d,
        "items-quoted.csv",
        "item_id,instacart_product_id,name\n1,21903,\"Baby\n\nSpinach\"\n2,30391,Cucumber\n",
    );
    assert_eq!(load_items(&p).unwrap()[0].name, "Baby\n\nSpinach");
}
