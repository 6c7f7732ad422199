//! Instacart baskets (docs/paper.md §5): `items.csv` and `baskets_{train,test}.csv`.

use crate::csvfile::read_records;
use crate::error::parse_field;
use crate::rng::train_test_split;
use crate::DataError;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// One item of `items.csv` (`item_id,instacart_product_id,name`).
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// Mapped id 1..=63.
    pub id: usize,
    /// Original Instacart product id.
    pub product_id: u64,
    /// Product name.
    pub name: String,
}

/// Reads `items.csv` (`item_id,instacart_product_id,name`). Item ids must be exactly 1..=n in
/// file order, product ids distinct, and the file must list at least one item; every error
/// names the file, line and field.
pub fn load_items(path: &Path) -> Result<Vec<Item>, DataError> {
    let names = ["item_id", "instacart_product_id", "name"];
    let mut items: Vec<Item> = Vec::new();
    let mut products: HashMap<u64, usize> = HashMap::new();
    for (line, f) in read_records(path, &names)? {
        let id: usize = parse_field(path, line, names[0], &f[0])?;
        if id != items.len() + 1 {
            return Err(DataError::parse(
                path,
                line,
                names[0],
                &f[0],
                format!(
                    "expected item id {} (ids are 1..=n in file order)",
                    items.len() + 1
                ),
            ));
        }
        let product_id: u64 = parse_field(path, line, names[1], &f[1])?;
        if let Some(first) = products.insert(product_id, line) {
            return Err(DataError::parse(
                path,
                line,
                names[1],
                &f[1],
                format!("product {product_id} is already item at line {first}"),
            ));
        }
        items.push(Item {
            id,
            product_id,
            name: f[2].clone(),
        });
    }
    Ok(items)
}

/// Baskets of one file: item lists in rank order, orders sorted by id.
#[derive(Clone, Debug, PartialEq)]
pub struct Baskets {
    /// Order ids ascending.
    pub order_ids: Vec<u64>,
    /// Item ids (1..=n_items) per order, in rank order.
    pub baskets: Vec<Vec<usize>>,
    /// Data rows read.
    pub rows: usize,
}

impl Baskets {
    /// Number of per-position samples (sum of basket lengths).
    pub fn n_samples(&self) -> usize {
        self.baskets.iter().map(Vec::len).sum()
    }
    /// Longest basket.
    pub fn max_len(&self) -> usize {
        self.baskets.iter().map(Vec::len).max().unwrap_or(0)
    }
    /// Shortest basket.
    pub fn min_len(&self) -> usize {
        self.baskets.iter().map(Vec::len).min().unwrap_or(0)
    }
    /// The baskets at `idx`, in that order.
    pub fn select(&self, idx: &[usize]) -> Baskets {
        Baskets {
            order_ids: idx.iter().map(|&i| self.order_ids[i]).collect(),
            baskets: idx.iter().map(|&i| self.baskets[i].clone()).collect(),
            rows: idx.iter().map(|&i| self.baskets[i].len()).sum(),
        }
    }
}

/// Reads `order_id,product_id,rank` (`product_id` holds the item id of `items.csv`).
///
/// Each item id must be in 1..=`n_items`, an item appears at most once per order, and within
/// an order the ranks must be exactly 1..=len; the file must hold at least one row. Every
/// error names the file, line and field.
pub fn load_baskets(path: &Path, n_items: usize) -> Result<Baskets, DataError> {
    read_baskets(path, n_items, None).map(|(b, _)| b)
}

/// [`load_baskets`], with item ids checked against `items_file` (named in the error) and the
/// first line of each order returned (parallel to `order_ids`).
fn read_baskets(
    path: &Path,
    n_items: usize,
    items_file: Option<&Path>,
) -> Result<(Baskets, Vec<usize>), DataError> {
    let names = ["order_id", "product_id", "rank"];
    let recs = read_records(path, &names)?;
    let rows = recs.len();
    // order → (rank, item, line) in file order
    let mut orders: BTreeMap<u64, Vec<(usize, usize, usize)>> = BTreeMap::new();
    let mut seen: HashMap<(u64, usize), usize> = HashMap::new();
    for (line, f) in recs {
        let order: u64 = parse_field(path, line, names[0], &f[0])?;
        let item: usize = parse_field(path, line, names[1], &f[1])?;
        if item == 0 || item > n_items {
            let whose = match items_file {
                Some(items) => format!("not an item of {} (ids 1..={n_items})", items.display()),
                None => format!("item id outside 1..={n_items}"),
            };
            return Err(DataError::parse(path, line, names[1], &f[1], whose));
        }
        let rank: usize = parse_field(path, line, names[2], &f[2])?;
        if rank == 0 {
            return Err(DataError::parse(
                path,
                line,
                names[2],
                &f[2],
                "ranks start at 1",
            ));
        }
        if let Some(first) = seen.insert((order, item), line) {
            return Err(DataError::parse(
                path,
                line,
                names[1],
                &f[1],
                format!("order {order} already holds item {item} (line {first})"),
            ));
        }
        orders.entry(order).or_default().push((rank, item, line));
    }
    let mut out = Baskets {
        order_ids: Vec::new(),
        baskets: Vec::new(),
        rows,
    };
    let mut first_lines = Vec::with_capacity(orders.len());
    for (order, mut v) in orders {
        first_lines.push(v[0].2);
        v.sort_by_key(|x| (x.0, x.2));
        for (k, &(rank, _, line)) in v.iter().enumerate() {
            if rank != k + 1 {
                let why = if k > 0 && rank == k {
                    format!(
                        "order {order}: rank {rank} repeated (first at line {})",
                        v[k - 1].2
                    )
                } else {
                    format!(
                        "order {order}: ranks must be 1..={} without gaps, and rank {} is missing",
                        v.len(),
                        k + 1
                    )
                };
                return Err(DataError::parse(
                    path,
                    line,
                    names[2],
                    &rank.to_string(),
                    why,
                ));
            }
        }
        out.order_ids.push(order);
        out.baskets.push(v.into_iter().map(|x| x.1).collect());
    }
    Ok((out, first_lines))
}

/// The Instacart experiment's data: items, train / val (whole baskets,
/// `train_test_split(0.25, 42)` in split order) and test baskets.
#[derive(Clone, Debug)]
pub struct InstacartData {
    /// Items 1..=63.
    pub items: Vec<Item>,
    /// Training baskets (18,585 in the paper).
    pub train: Baskets,
    /// Validation baskets (6,196).
    pub val: Baskets,
    /// Test baskets (1,433).
    pub test: Baskets,
    /// Longest basket over all three splits (24).
    pub max_len: usize,
}

/// Loads `items.csv`, `baskets_train.csv`, `baskets_test.csv` from `dir` and splits. Besides
/// the checks of [`load_items`] and [`load_baskets`] (item ids against `items.csv`), an order
/// in both basket files is an error naming both files and lines, and so is a training file
/// too small to split (fewer than 2 baskets).
pub fn load_instacart(dir: &Path) -> Result<InstacartData, DataError> {
    let items_file = dir.join("items.csv");
    let (train_file, test_file) = (dir.join("baskets_train.csv"), dir.join("baskets_test.csv"));
    let items = load_items(&items_file)?;
    let (all, all_lines) = read_baskets(&train_file, items.len(), Some(&items_file))?;
    let (test, test_lines) = read_baskets(&test_file, items.len(), Some(&items_file))?;
    for (k, order) in test.order_ids.iter().enumerate() {
        if let Ok(j) = all.order_ids.binary_search(order) {
            return Err(DataError::parse(
                &test_file,
                test_lines[k],
                "order_id",
                &order.to_string(),
                format!(
                    "order {order} is also a training basket ({}:{})",
                    train_file.display(),
                    all_lines[j]
                ),
            ));
        }
    }
    let (tr, va) = train_test_split(all.baskets.len(), 42).map_err(|e| {
        DataError::in_file(
            &train_file,
            format!(
                "{} baskets cannot be split into train and validation ({e})",
                all.baskets.len()
            ),
        )
    })?;
    let (train, val) = (all.select(&tr), all.select(&va));
    let max_len = train.max_len().max(val.max_len()).max(test.max_len());
    Ok(InstacartData {
        items,
        train,
        val,
        test,
        max_len,
    })
}
