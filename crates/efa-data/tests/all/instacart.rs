//! Instacart check values (docs/paper.md §5.2) and malformed-input errors.

use efa_data::instacart::*;
use std::path::PathBuf;

#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn instacart_split_check_values() {
    let dir = efa_testkit::paper_file("instacart");
    let d = load_instacart(&dir).unwrap();
    assert_eq!(d.items.len(), 63);
    assert_eq!(
        (d.items[0].product_id, d.items[0].name.as_str()),
        (21903, "Organic Baby Spinach")
    );
    assert_eq!(
        (
            d.train.baskets.len(),
            d.val.baskets.len(),
            d.test.baskets.len()
        ),
        (18_585, 6_196, 1_433)
    );
    assert_eq!(
        &d.val.order_ids[..5],
        &[1536267, 585862, 2769093, 3386284, 2840290]
    );
    assert_eq!(
        (d.train.n_samples(), d.val.n_samples(), d.test.n_samples()),
        (206_450, 68_895, 16_066)
    );
    assert_eq!(d.max_len, 24);
    for b in [&d.train, &d.val, &d.test] {
        assert!(b.min_len() >= 10 && b.max_len() <= 24);
    }
    assert_eq!(d.train.rows + d.val.rows, 275_345);
    // §5.2: train_context_input[2] = [55, 54, MASK, 20, 4, 1, 29, 21, 11, 8, 23] with target
    // item 12: the third per-position sample of the first train basket is position 2.
    assert_eq!(
        &d.train.baskets[0][..11],
        &[55, 54, 12, 20, 4, 1, 29, 21, 11, 8, 23]
    );
    let efa = efa_data::item_efa_samples(&d.train.baskets, 63, 24).unwrap();
    assert_eq!(efa.len(), 206_450);
    let mut want = vec![55, 54, 64, 20, 4, 1, 29, 21, 11, 8, 23];
    want.extend_from_slice(&d.train.baskets[0][11..]);
    want.resize(24, 0);
    assert_eq!(
        (&efa[2].tokens, efa[2].masked_idx, efa[2].target),
        (&want, 2, 11)
    );
    let fb = efa_data::item_fm_bi_samples(&d.train.baskets, 63, 24).unwrap();
    assert_eq!(fb[2].context.len(), 23);
    assert_eq!(&fb[2].context[..3], &[55, 54, 20]);
    let fu = efa_data::item_fm_uni_samples(&d.train.baskets, 63, 24).unwrap();
    assert_eq!(&fu[2].context[..4], &[55, 54, 64, 0]);
    assert_eq!(fu[0].context[0], 64);
    assert!(efa_data::item_efa_samples(&[vec![64]], 63, 24).is_err());
    assert!(efa_data::item_efa_samples(&[vec![1; 25]], 63, 24).is_err());
}

#[test]
fn fixtures_parse_and_errors_name_line_and_field() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/instacart");
    let items = load_items(&dir.join("items.csv")).unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(items[2].name, "Half & Half, \"organic\"");
    let b = load_baskets(&dir.join("baskets.csv"), 3).unwrap();
    assert_eq!(b.order_ids, vec![5, 9]);
    assert_eq!(b.baskets, vec![vec![3, 1], vec![2, 1, 3]]);
    assert_eq!(b.rows, 5);
    let err = |f: &str| load_baskets(&dir.join(f), 3).unwrap_err().to_string();
    let e = err("baskets_bad_item.csv");
    assert!(
        e.contains("baskets_bad_item.csv:3: field `product_id` = \"7\""),
        "{e}"
    );
    let e = err("baskets_bad_rank.csv");
    assert!(
        e.contains("baskets_bad_rank.csv:") && e.contains("field `rank`") && e.contains("order 5"),
        "{e}"
    );
    let e = err("baskets_bad_header.csv");
    assert!(e.contains(":1: field `header`"), "{e}");
    let e = err("baskets_short.csv");
    assert!(
        e.contains("baskets_short.csv:4: field `rank`") && e.contains("expected 3 fields"),
        "{e}"
    );
    let e = err("baskets_bad_order.csv");
    assert!(
        e.contains("baskets_bad_order.csv:2: field `order_id` = \"abc\""),
        "{e}"
    );
}
