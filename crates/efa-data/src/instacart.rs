//! Instacart baskets (PAPER §5): `items.csv` and `baskets_{train,test}.csv`.

use crate::error::parse_field;
use crate::rng::train_test_split;
use crate::DataError;
use std::collections::BTreeMap;
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

fn reader(path: &Path) -> Result<csv::Reader<std::fs::File>, DataError> {
    let f = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    Ok(csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(f))
}

/// Reads the header and checks it equals `want`.
fn check_header(
    path: &Path,
    r: &mut csv::Reader<std::fs::File>,
    want: &[&str],
) -> Result<(), DataError> {
    let h = r
        .headers()
        .map_err(|e| DataError::parse(path, 1, "header", "", e.to_string()))?;
    let got: Vec<&str> = h.iter().map(str::trim).collect();
    if got != want {
        return Err(DataError::parse(
            path,
            1,
            "header",
            &h.iter().collect::<Vec<_>>().join(","),
            format!("expected {}", want.join(",")),
        ));
    }
    Ok(())
}

/// Iterates data records as `(line, fields)`, failing on a wrong field count.
fn records(
    path: &Path,
    r: &mut csv::Reader<std::fs::File>,
    names: &[&str],
) -> Result<Vec<(usize, Vec<String>)>, DataError> {
    let mut out = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| {
            let line = e.position().map(|p| p.line() as usize).unwrap_or(0);
            DataError::parse(path, line, "line", "", e.to_string())
        })?;
        let line = rec.position().map(|p| p.line() as usize).unwrap_or(0);
        if rec.len() != names.len() {
            let field = names.get(rec.len()).copied().unwrap_or("line");
            return Err(DataError::parse(
                path,
                line,
                field,
                &rec.iter().collect::<Vec<_>>().join(","),
                format!("expected {} fields, found {}", names.len(), rec.len()),
            ));
        }
        out.push((line, rec.iter().map(str::to_string).collect()));
    }
    Ok(out)
}

/// Reads `items.csv`. Ids must be exactly 1..=n in file order.
pub fn load_items(path: &Path) -> Result<Vec<Item>, DataError> {
    let names = ["item_id", "instacart_product_id", "name"];
    let mut r = reader(path)?;
    check_header(path, &mut r, &names)?;
    let mut items = Vec::new();
    for (line, f) in records(path, &mut r, &names)? {
        let id: usize = parse_field(path, line, names[0], &f[0])?;
        if id != items.len() + 1 {
            return Err(DataError::parse(
                path,
                line,
                names[0],
                &f[0],
                format!("expected item id {}", items.len() + 1),
            ));
        }
        items.push(Item {
            id,
            product_id: parse_field(path, line, names[1], &f[1])?,
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

/// Reads `order_id,product_id,rank`. Each item id must be in 1..=`n_items`; within an order
/// the ranks must be exactly 1..=len (a duplicate or gap is an error naming its line).
pub fn load_baskets(path: &Path, n_items: usize) -> Result<Baskets, DataError> {
    let names = ["order_id", "product_id", "rank"];
    let mut r = reader(path)?;
    check_header(path, &mut r, &names)?;
    let recs = records(path, &mut r, &names)?;
    let rows = recs.len();
    let mut orders: BTreeMap<u64, Vec<(usize, usize, usize)>> = BTreeMap::new();
    for (line, f) in recs {
        let order: u64 = parse_field(path, line, names[0], &f[0])?;
        let item: usize = parse_field(path, line, names[1], &f[1])?;
        if item == 0 || item > n_items {
            return Err(DataError::parse(
                path,
                line,
                names[1],
                &f[1],
                format!("item id outside 1..={n_items}"),
            ));
        }
        let rank: usize = parse_field(path, line, names[2], &f[2])?;
        orders.entry(order).or_default().push((rank, item, line));
    }
    let mut out = Baskets {
        order_ids: Vec::new(),
        baskets: Vec::new(),
        rows,
    };
    for (order, mut v) in orders {
        v.sort_by_key(|x| (x.0, x.2));
        for (k, &(rank, _, line)) in v.iter().enumerate() {
            if rank != k + 1 {
                return Err(DataError::parse(
                    path,
                    line,
                    names[2],
                    &rank.to_string(),
                    format!("order {order}: ranks are not 1..={}", v.len()),
                ));
            }
        }
        out.order_ids.push(order);
        out.baskets.push(v.into_iter().map(|x| x.1).collect());
    }
    Ok(out)
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

/// Loads `items.csv`, `baskets_train.csv`, `baskets_test.csv` from `dir` and splits.
pub fn load_instacart(dir: &Path) -> Result<InstacartData, DataError> {
    let items = load_items(&dir.join("items.csv"))?;
    let all = load_baskets(&dir.join("baskets_train.csv"), items.len())?;
    let test = load_baskets(&dir.join("baskets_test.csv"), items.len())?;
    let (tr, va) = train_test_split(all.baskets.len(), 42)?;
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
