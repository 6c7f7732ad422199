//! A field quoted as written, read back by its line for a message raised after the file was
//! read: the line numbers agree with the readers' (LF and CRLF files, quoted fields spanning
//! lines), and a file changed or gone since gives the number parsed, in its shortest form.

use crate::common;

use common::{scratch::scratch, write};
use efa_data::item_csv::read_item_csv;
use efa_data::user_csv::{read_user_csv, UserRow};
use efa_data::written;

#[test]
fn a_field_read_back_by_its_line_is_the_text_the_reader_parsed_there() {
    let d = scratch("efa-data-written");
    // Line 3 continues the quoted `seq` of line 2; fields are trimmed and may be quoted.
    let text = "seq,order,item,value,lag\n\"a\nb\",1,+0099,1e-50,01\n\"x\"\"y\",2, 007 ,4.05e1,0\n\
                c,3,5,\"1.0e1\",2\n";
    let want = [
        (2, "+0099", "1e-50", "01"),
        (4, "007", "4.05e1", "0"),
        (5, "5", "1.0e1", "2"),
    ];
    for (tag, text) in [
        ("lf", text.to_string()),
        ("crlf", text.replace('\n', "\r\n")),
    ] {
        let p = write(&d, &format!("rows-{tag}.csv"), &text);
        let table = read_user_csv(&p).unwrap();
        let mut rows: Vec<&UserRow> = table.sequences.iter().flat_map(|s| &s.rows).collect();
        rows.sort_by_key(|r| r.line);
        assert_eq!(rows.len(), want.len(), "{tag}");
        for (r, (line, item, value, lag)) in rows.into_iter().zip(want) {
            assert_eq!(r.line, line, "{tag}");
            assert_eq!(written::integer(&p, r.line, "item", r.item), item, "{tag}");
            assert_eq!(written::real(&p, r.line, "value", r.value), value, "{tag}");
            assert_eq!(written::integer(&p, r.line, "lag", r.lag), lag, "{tag}");
        }
        // No record starts on line 3 (inside a quoted field), on line 6 (past the end) or
        // on the header's line; no column is named `weight`.
        for (line, column) in [(3, "item"), (6, "item"), (1, "item"), (2, "weight")] {
            assert_eq!(
                written::field(&p, line, column, |_| true),
                None,
                "{tag} {line}"
            );
        }
        // The file changed since it was read: the numbers parsed, in their shortest form.
        std::fs::write(&p, text.replace("+0099", "98").replace("4.05e1", "40")).unwrap();
        assert_eq!(written::integer(&p, 2, "item", 99), "99", "{tag}");
        assert_eq!(written::real(&p, 4, "value", 40.5), "40.5", "{tag}");
        assert_eq!(written::real(&p, 2, "value", 1e-50), "1e-50", "{tag}");
    }
    // An item-feature table: its feature columns by name.
    let p = write(
        &d,
        "items.csv",
        "item,latitude,longitude\r\n0099, 4.05e1 ,-1E2\r\n",
    );
    let t = read_item_csv(&p).unwrap();
    let r = &t.rows[0];
    assert_eq!(written::integer(&p, r.line, "item", r.item), "0099");
    assert_eq!(
        written::real(&p, r.line, "latitude", r.features[0]),
        "4.05e1"
    );
    assert_eq!(
        written::real(&p, r.line, "longitude", r.features[1]),
        "-1E2"
    );
    // No file (rows made in code): the numbers' own forms.
    let gone = d.join("gone.csv");
    assert_eq!(written::integer(&gone, 2, "item", 99), "99");
    assert_eq!(written::real(&gone, 2, "value", 1e38), "1e38");
}

#[test]
fn the_shortest_form_of_a_number_is_its_decimal_unless_that_is_long() {
    for (x, shown) in [
        (40.5, "40.5"),
        (10.0, "10"),
        (0.1, "0.1"),
        (-2.25e-7, "-0.000000225"),
        (1e-50, "1e-50"),
        (-1e-50, "-1e-50"),
        (1e20, "1e20"),
        (1.5e38, "1.5e38"),
        (123456.789, "123456.789"),
    ] {
        assert_eq!(written::shortest(x), shown);
    }
}
