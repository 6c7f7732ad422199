//! The `efa train` CSV layout: columns by name, RFC 4180 quoting, line numbers that count
//! every line (blank lines are errors, not skipped), values finite in f32, and errors naming
//! file, line and field.

use efa_data::user_csv::read_user_csv;
use std::path::PathBuf;

use efa_testkit::scratch;

fn write(dir: &std::path::Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn columns_by_name_quoting_and_line_numbers() {
    let dir = scratch::scratch("efa-user-csv");
    // Columns in another order; a quoted id holding a comma, a quote and a newline (so the
    // record spans lines 2–3); CRLF line ends.
    let text = "value,item,order,seq\r\n1.5,2,10,\"a,\"\"x\"\"\ny\"\r\n0,3,5,\"a,\"\"x\"\"\ny\"\r\n2,1,1,b\r\n2,4,0,b\r\n";
    let p = write(&dir, "ok.csv", text);
    let t = read_user_csv(&p).unwrap();
    assert_eq!(t.sequences.len(), 2);
    let a = &t.sequences[0];
    assert_eq!(a.id, "a,\"x\"\ny");
    // Sorted by order; lines count the embedded newlines: the records start at lines 2, 4,
    // 6 and 7.
    let rows: Vec<(i64, usize, f64, usize)> = a
        .rows
        .iter()
        .map(|r| (r.order, r.item, r.value, r.line))
        .collect();
    assert_eq!(rows, vec![(5, 3, 0.0, 4), (10, 2, 1.5, 2)]);
    let b: Vec<usize> = t.sequences[1].rows.iter().map(|r| r.line).collect();
    assert_eq!(b, vec![7, 6]);
    assert_eq!(t.rows(), 4);
}

#[test]
fn errors_name_file_line_and_field() {
    let dir = scratch::scratch("efa-user-csv-bad");
    let head = "seq,order,item,value\n";
    let cases: &[(&str, String, &str)] = &[
        // A blank line after a record whose quoted id spans two lines: the blank is line 4.
        (
            "blank",
            format!("{head}\"a\nb\",1,2,1\n\n\"a\nb\",2,2,1\n"),
            ":4: field ``: empty line",
        ),
        (
            "ws_line",
            format!("{head}a,1,2,1\n  \t\na,2,2,1\n"),
            ":3: field ``: empty line",
        ),
        (
            "blank_header",
            format!("\n{head}a,1,2,1\n"),
            ":1: field `header`: empty file",
        ),
        (
            "f32",
            format!("{head}a,1,2,1\na,2,2,1e39\n"),
            ":3: field `value` = \"1e39\": 1e39 is finite in f64 but overflows f32",
        ),
        (
            "nan",
            format!("{head}a,1,2,nan\n"),
            ":2: field `value` = \"nan\": NaN and infinite values are not allowed",
        ),
        (
            "dup_col",
            "seq,order,item,value,seq\n".to_string(),
            ":1: field `seq` = \"seq\": duplicate column",
        ),
        (
            "dup_key",
            format!("{head}a,1,2,1\na,1,3,1\n"),
            ":3: field `order` = \"1\": duplicate key (seq `a`, order 1), first at line 2",
        ),
        (
            "item_frac",
            format!("{head}a,1,2.5,1\n"),
            ":2: field `item` = \"2.5\": not a non-negative integer",
        ),
        (
            "fields",
            format!("{head}a,1,2,1,9\n"),
            ":2: field `` = \"a,1,2,1,9\": 5 fields, the header has 4",
        ),
    ];
    for (name, text, want) in cases {
        let p = write(&dir, &format!("{name}.csv"), text);
        let e = read_user_csv(&p).unwrap_err().to_string();
        let want = format!("{}{want}", p.display());
        assert!(e.starts_with(&want), "{name}: {e}\nwant prefix {want}");
    }
    // Invalid UTF-8 names its line.
    let p = dir.join("utf8.csv");
    std::fs::write(&p, b"seq,order,item,value\na,1,2,1\n\xff,2,2,1\n").unwrap();
    let e = read_user_csv(&p).unwrap_err().to_string();
    assert!(e.contains(":3:") && e.contains("not valid UTF-8"), "{e}");
}
