//! Malformed `u.data` files: every error names the file, the 1-based line and the column.

use crate::common;

use common::{assert_at, scratch::scratch, write};
use efa_data::movielens::load_u_data;

/// Two good lines (real MovieLens rows), then `bad` as line 3.
fn with_line_3(dir: &std::path::Path, name: &str, bad: &str) -> std::path::PathBuf {
    write(
        dir,
        name,
        format!("196\t242\t3\t881250949\n186\t302\t3\t891717742\n{bad}\n"),
    )
}

#[test]
fn out_of_range_and_non_integer_fields() {
    let d = scratch("efa-data-ml-range");
    // (line 3, column, message fragment)
    let cases = [
        ("22\t377\t0\t878887116", "rating", "1..=5"),
        ("22\t377\t6\t878887116", "rating", "1..=5"),
        ("22\t377\t-1\t878887116", "rating", "1..=5"),
        ("22\t377\t3.5\t878887116", "rating", "cannot parse"),
        ("22\t377\t\t878887116", "rating", "cannot parse"),
        ("0\t377\t1\t878887116", "user_id", "0 is not an id"),
        ("22\t0\t1\t878887116", "item_id", "0 is not an id"),
        ("2.5\t377\t1\t878887116", "user_id", "cannot parse"),
        ("-4\t377\t1\t878887116", "user_id", "cannot parse"),
        ("22\tabc\t1\t878887116", "item_id", "cannot parse"),
        ("22\t377\t1\t-878887116", "timestamp", "cannot parse"),
        ("22\t377\t1\t8.7e8", "timestamp", "cannot parse"),
    ];
    for (k, (bad, field, needle)) in cases.iter().enumerate() {
        let p = with_line_3(&d, &format!("u{k}.data"), bad);
        assert_at(load_u_data(&p), &p, 3, field, needle);
    }
}

#[test]
fn swapped_columns_are_caught_by_range() {
    let d = scratch("efa-data-ml-swap");
    // The real row `22 377 1 878887116` with two columns traded.
    let cases = [
        // rating <-> timestamp: a 9-digit rating
        ("22\t377\t878887116\t1", "rating", "Unix timestamp"),
        // item <-> rating: an item id as rating
        ("22\t1\t377\t878887116", "rating", "swapped"),
        // user <-> timestamp: a timestamp-sized user id, a tiny timestamp
        ("878887116\t377\t1\t22", "user_id", "swapped"),
        // item <-> timestamp
        ("22\t878887116\t1\t377", "item_id", "swapped"),
    ];
    for (k, (bad, field, needle)) in cases.iter().enumerate() {
        let p = with_line_3(&d, &format!("s{k}.data"), bad);
        assert_at(load_u_data(&p), &p, 3, field, needle);
    }
    // Large ids with a Unix-time timestamp are ids, not a swap; small timestamps with small
    // ids are accepted as they are (the rule only compares the two).
    let p = write(&d, "ok.data", "200000000\t377\t1\t878887116\n1\t2\t3\t4\n");
    let raw = load_u_data(&p).unwrap();
    assert_eq!((raw.rows[0].user, raw.rows[1].timestamp), (200_000_000, 4));
}

#[test]
fn wrong_field_counts_name_the_missing_or_last_column() {
    let d = scratch("efa-data-ml-count");
    let cases = [
        ("22\t377\t1", "timestamp", "found 3"),
        ("22\t377", "rating", "found 2"),
        ("22,377,1,878887116", "item_id", "found 1"),
        ("22\t377\t1\t878887116\t5", "timestamp", "found 5"),
        ("22\t377\t1\t878887116\t", "timestamp", "found 5"),
    ];
    for (k, (bad, field, needle)) in cases.iter().enumerate() {
        let p = with_line_3(&d, &format!("c{k}.data"), bad);
        assert_at(load_u_data(&p), &p, 3, field, needle);
    }
}

#[test]
fn duplicate_ratings_empty_files_and_bad_bytes() {
    let d = scratch("efa-data-ml-dup");
    let p = with_line_3(&d, "dup.data", "196\t242\t5\t881250950");
    assert_at(load_u_data(&p), &p, 3, "item_id", "at line 1");
    let p = write(&d, "empty.data", "");
    assert_at(load_u_data(&p), &p, 0, "", "no ratings (the file is empty)");
    let p = write(
        &d,
        "bytes.data",
        b"196\t242\t3\t881250949\n1\t2\t\xff\t3\n".as_slice(),
    );
    assert_at(load_u_data(&p), &p, 2, "", "UTF-8");
    // CRLF endings are fine (blank lines are not: see below).
    let p = write(
        &d,
        "crlf.data",
        "196\t242\t3\t881250949\r\n186\t302\t3\t891717742\r\n",
    );
    assert_eq!(load_u_data(&p).unwrap().rows.len(), 2);
}

#[test]
fn blank_lines_are_errors_naming_the_line() {
    // u.data's blank lines were skipped (and counted); like the data CSV, the paper's other
    // files and item tables, a blank line is now an error naming it. A single final newline,
    // or none, is not a blank line.
    let d = scratch("efa-data-ml-blank");
    let (a, b) = ("196\t242\t3\t881250949", "186\t302\t3\t891717742");
    for (eol, nl) in [("lf", "\n"), ("crlf", "\r\n")] {
        for (end, text) in [
            ("nl", format!("{a}{nl}{b}{nl}")),
            ("no-nl", format!("{a}{nl}{b}")),
        ] {
            let p = write(&d, &format!("ok-{eol}-{end}.data"), text);
            assert_eq!(load_u_data(&p).unwrap().rows[1].item, 302);
        }
        for (tag, text, line) in [
            ("middle", format!("{a}{nl}{nl}{b}{nl}"), 2),
            ("spaces", format!("{a}{nl} \t {nl}{b}{nl}"), 2),
            ("first", format!("{nl}{a}{nl}{b}{nl}"), 1),
            ("end", format!("{a}{nl}{b}{nl}{nl}"), 3),
            ("end-spaces", format!("{a}{nl}{b}{nl}  "), 3),
            ("only", format!("{nl}{nl}  {nl}"), 1),
        ] {
            let p = write(&d, &format!("{tag}-{eol}.data"), text);
            let m = load_u_data(&p).unwrap_err().to_string();
            assert_eq!(m, format!("{}:{line}: field ``: empty line", p.display()));
        }
    }
}
