//! The item-feature table of `efa train --items` (your own data): one row of numeric features
//! per item, e.g. the latitude and longitude of a sensor.
//!
//! A header `item,<feature>,…` (the first column is `item`, at least one feature column,
//! names non-empty and distinct), then one record per item: `item` a non-negative integer
//! (continuous inputs have no padding row: item 0 is an item like any other), listed once;
//! every feature a number finite in f64 and in the f32 training dtype ([`crate::parse_real`]).
//! Blank lines are errors, not skipped, as in the data CSV ([`crate::user_csv`]). Every error
//! names the file, the line and the column.

use crate::csvfile::{first_blank_line, records_of};
use crate::{parse_real, written, DataError};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One item's features.
#[derive(Clone, Debug, PartialEq)]
pub struct ItemRow {
    /// Item id.
    pub item: usize,
    /// Features, in the header's column order.
    pub features: Vec<f64>,
    /// Line in the file (header = line 1).
    pub line: usize,
}

/// A parsed item-feature table.
#[derive(Clone, Debug, PartialEq)]
pub struct ItemTable {
    /// The file read.
    pub file: PathBuf,
    /// The feature column names (the header after `item`).
    pub features: Vec<String>,
    /// The rows, in file order.
    pub rows: Vec<ItemRow>,
}

impl ItemTable {
    /// The row of `item`, if listed.
    pub fn get(&self, item: usize) -> Option<&ItemRow> {
        self.rows.iter().find(|r| r.item == item)
    }

    /// The feature table of a model with `items` item rows: every item not listed is zeros
    /// (a data row of such an item is refused where the data are read). An item id `≥ items`
    /// is an error naming the file, line and field `item`, quoted as written.
    pub fn table(&self, items: usize) -> Result<Vec<Vec<f64>>, DataError> {
        let mut out = vec![vec![0.0; self.features.len()]; items];
        for r in &self.rows {
            if r.item >= items {
                return Err(DataError::parse(
                    &self.file,
                    r.line,
                    "item",
                    &written::integer(&self.file, r.line, "item", r.item),
                    format!(
                        "item id outside 0..={} (the model has {items} item rows)",
                        items.saturating_sub(1)
                    ),
                ));
            }
            out[r.item].clone_from(&r.features);
        }
        Ok(out)
    }
}

/// Reads an item-feature table (layout in the module docs).
pub fn read_item_csv(path: &Path) -> Result<ItemTable, DataError> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    // Blank lines are errors, as in the data CSV: the csv crate would skip them silently.
    match first_blank_line(&bytes) {
        Some(1) => {
            return Err(DataError::parse(
                path,
                1,
                "header",
                "",
                "empty file: expected `item` followed by at least one feature column (e.g. \
                 item,latitude,longitude)",
            ))
        }
        Some(line) => return Err(DataError::parse(path, line, "", "", "empty line")),
        None => {}
    }
    let mut r = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(bytes.as_slice());
    let header: Vec<String> = r
        .headers()
        .map_err(|e| DataError::parse(path, 1, "header", "", e.to_string()))?
        .iter()
        .map(|s| s.trim().to_string())
        .collect();
    let shown = header.join(",");
    if header.first().map(String::as_str) != Some("item") || header.len() < 2 {
        return Err(DataError::parse(
            path,
            1,
            "header",
            &shown,
            "expected `item` followed by at least one feature column (e.g. \
             item,latitude,longitude)",
        ));
    }
    for (k, name) in header.iter().enumerate().skip(1) {
        if name.is_empty() || header[..k].contains(name) {
            return Err(DataError::parse(
                path,
                1,
                name,
                &shown,
                "feature columns need distinct, non-empty names",
            ));
        }
    }
    let names: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut rows: Vec<ItemRow> = Vec::new();
    let mut seen: HashMap<usize, usize> = HashMap::new();
    for (line, f) in records_of(path, &bytes, &names)? {
        let item: usize = match f[0].parse() {
            Ok(i) => i,
            Err(_) => {
                return Err(DataError::parse(
                    path,
                    line,
                    "item",
                    &f[0],
                    "not a non-negative integer item id",
                ))
            }
        };
        if let Some(first) = seen.insert(item, line) {
            return Err(DataError::parse(
                path,
                line,
                "item",
                &f[0],
                format!("item {item} is already listed at line {first}"),
            ));
        }
        let features = (1..f.len())
            .map(|k| parse_real(path, line, names[k], &f[k]))
            .collect::<Result<Vec<_>, _>>()?;
        rows.push(ItemRow {
            item,
            features,
            line,
        });
    }
    Ok(ItemTable {
        file: path.to_path_buf(),
        features: header[1..].to_vec(),
        rows,
    })
}
