//! The line an error names is the line of the file, in CRLF files and after blank lines too,
//! for every reader built on the shared CSV reader (item-feature tables, Instacart items,
//! temperature cities and readings). The csv crate's own line count put a CRLF file's every
//! record, and a record after a blank line, one line early.

use crate::common;

use common::{assert_at, scratch::scratch, write};
use efa_data::instacart::load_items;
use efa_data::item_csv::read_item_csv;
use efa_data::temperature::{load_cities, load_temperature_table};

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
        assert_at(read_item_csv(&p), &p, line, "longitude", "cannot parse");
        let p = write(
            &d,
            &format!("short-{tag}.csv"),
            edit(&format!("{items}2,41.4\n")),
        );
        assert_at(read_item_csv(&p), &p, line, "longitude", "found 2");
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
