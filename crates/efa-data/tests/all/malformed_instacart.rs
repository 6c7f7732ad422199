//! Malformed Instacart files: every error names the file and, where there is one, the line and
//! field, including the checks across items.csv and the two basket files.

use crate::common;

use common::{assert_at, scratch::scratch, write};
use efa_data::instacart::*;
use std::path::Path;

const ITEMS: &str = "item_id,instacart_product_id,name\n1,100,Spinach\n2,200,Banana\n3,300,Milk\n";
const HEAD: &str = "order_id,product_id,rank\n";
/// Four training baskets (enough for a 75/25 split) and one test basket.
const TRAIN: &str = "1,1,1\n1,2,2\n2,2,1\n3,3,1\n4,1,1\n";
const TEST: &str = "9,3,1\n9,1,2\n";

/// Writes the three files into `d` (subdirectory `name`), with the given bodies.
fn dir(d: &Path, name: &str, items: &str, train: &str, test: &str) -> std::path::PathBuf {
    let d = d.join(name);
    std::fs::create_dir_all(&d).unwrap();
    write(&d, "items.csv", items);
    write(&d, "baskets_train.csv", format!("{HEAD}{train}"));
    write(&d, "baskets_test.csv", format!("{HEAD}{test}"));
    d
}

#[test]
fn cross_file_errors_name_both_files() {
    let s = scratch("efa-data-ic-cross");
    let ok = load_instacart(&dir(&s, "ok", ITEMS, TRAIN, TEST)).unwrap();
    assert_eq!((ok.train.baskets.len(), ok.val.baskets.len()), (3, 1));
    // An item id that items.csv does not have: baskets file, line, field, and items.csv named.
    let d = dir(&s, "item", ITEMS, TRAIN, "9,3,1\n9,4,2\n");
    let r = load_instacart(&d);
    let msg = r.as_ref().map(|_| ()).unwrap_err().to_string();
    assert!(
        msg.contains(&d.join("items.csv").display().to_string()),
        "{msg}"
    );
    assert_at(
        r,
        &d.join("baskets_test.csv"),
        3,
        "product_id",
        "not an item of",
    );
    // An order in both basket files: the test file's line, and the training file's.
    let d = dir(&s, "overlap", ITEMS, TRAIN, "9,3,1\n3,1,1\n");
    let r = load_instacart(&d);
    let msg = r.as_ref().map(|_| ()).unwrap_err().to_string();
    assert!(
        msg.contains(&format!("{}:5", d.join("baskets_train.csv").display())),
        "{msg}"
    );
    assert_at(
        r,
        &d.join("baskets_test.csv"),
        3,
        "order_id",
        "also a training basket",
    );
    // A training file with one basket cannot be split.
    let d = dir(&s, "one", ITEMS, "1,1,1\n1,2,2\n", TEST);
    assert_at(
        load_instacart(&d),
        &d.join("baskets_train.csv"),
        0,
        "",
        "1 baskets cannot be split",
    );
    // An empty items.csv, and an empty basket file.
    let d = dir(
        &s,
        "noitems",
        "item_id,instacart_product_id,name\n",
        TRAIN,
        TEST,
    );
    assert_at(
        load_instacart(&d),
        &d.join("items.csv"),
        0,
        "",
        "no data rows",
    );
    let d = dir(&s, "notest", ITEMS, TRAIN, "");
    assert_at(
        load_instacart(&d),
        &d.join("baskets_test.csv"),
        0,
        "",
        "no data rows",
    );
}

#[test]
fn basket_rows_name_line_and_field() {
    let s = scratch("efa-data-ic-baskets");
    let cases = [
        (
            "5,1,1\n5,1,2\n",
            3,
            "product_id",
            "already holds item 1 (line 2)",
        ),
        ("5,1,1\n5,2,0\n", 3, "rank", "ranks start at 1"),
        (
            "5,1,1\n5,2,1\n",
            3,
            "rank",
            "rank 1 repeated (first at line 2)",
        ),
        ("5,1,1\n5,2,3\n", 3, "rank", "rank 2 is missing"),
        ("5,1,1\n5,0,2\n", 3, "product_id", "outside 1..=3"),
        ("5,1,1\n5,2,2,9\n", 3, "rank", "found 4"),
        ("5,1,1\n-5,2,2\n", 3, "order_id", "cannot parse"),
        ("5,1,1\n5,2.0,2\n", 3, "product_id", "cannot parse"),
    ];
    for (k, (body, line, field, needle)) in cases.iter().enumerate() {
        let p = write(&s, &format!("b{k}.csv"), format!("{HEAD}{body}"));
        assert_at(load_baskets(&p, 3), &p, *line, field, needle);
    }
}

#[test]
fn item_rows_name_line_and_field() {
    let s = scratch("efa-data-ic-items");
    let head = "item_id,instacart_product_id,name\n1,100,Spinach\n";
    let cases = [
        (
            "2,100,Banana",
            "instacart_product_id",
            "already item at line 2",
        ),
        ("3,200,Banana", "item_id", "expected item id 2"),
        ("2,-200,Banana", "instacart_product_id", "cannot parse"),
        ("2,200", "name", "found 2"),
    ];
    for (k, (row, field, needle)) in cases.iter().enumerate() {
        let p = write(&s, &format!("i{k}.csv"), format!("{head}{row}\n"));
        assert_at(load_items(&p), &p, 3, field, needle);
    }
    let p = write(
        &s,
        "utf8.csv",
        b"item_id,instacart_product_id,name\n1,100,Spin\xffach\n".as_slice(),
    );
    assert_at(load_items(&p), &p, 2, "name", "utf-8");
}
