//! Reading a user CSV against a configuration: every row checked (item range, family, value
//! support, value-table rows, lags, targets, item features), each failure naming the file,
//! line and field.

use super::{SeqDirection, UserConfig};
use efa_data::item_csv::ItemTable;
use efa_data::user_csv::{read_user_csv, UserRow};
use efa_data::DataError;
use efa_expfam::ExpfamError;
use efa_model::ModelConfig;
use std::path::{Path, PathBuf};

pub use efa_data::user_csv::COLUMNS;

/// One CSV row, with its 1-based line number.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Sequence id.
    pub seq: String,
    /// Order key.
    pub order: i64,
    /// Item id.
    pub item: usize,
    /// Observed value.
    pub value: f64,
    /// Line in the file (header = line 1).
    pub line: usize,
    /// Lag (0 = the target's own time).
    pub lag: usize,
    /// Whether the row is a target (see [`crate::userdata`]).
    pub target: bool,
    /// Index of the row's family among the configured ones (0 with one `[family]`).
    pub family: usize,
}

/// A parsed CSV file: sequences in order of first appearance, rows sorted by `order`.
#[derive(Clone, Debug)]
pub struct UserData {
    /// The file read.
    pub file: PathBuf,
    /// The sequences.
    pub sequences: Vec<Vec<Row>>,
}

impl UserData {
    /// Number of target rows (= samples).
    pub fn targets(&self) -> usize {
        self.sequences
            .iter()
            .map(|s| s.iter().filter(|r| r.target).count())
            .sum()
    }
}

/// [`read_csv_with`] without an item-feature table.
pub fn read_csv(path: &Path, cfg: &UserConfig) -> Result<UserData, DataError> {
    read_csv_with(path, cfg, None)
}

/// Reads a CSV file (layout in [`crate::userdata`]) and checks it against the configuration
/// (and, for continuous inputs, the item-feature table `items` the model's site table came
/// from): item ids in the model's range, each item with a family, values in its family's
/// support (and integer rows of a value table), lags below the lag embedding's rows and never
/// on a target, items listed in the feature table, at least two rows (or, for EFA models, one
/// row marked a target) and a target per sequence (lag rows need lag-0 rows), and no sequence longer than the model's positions.
/// Every failure is a [`DataError::Parse`] naming the file, line and field; rows are checked
/// in file order.
pub fn read_csv_with(
    path: &Path,
    cfg: &UserConfig,
    items: Option<&ItemTable>,
) -> Result<UserData, DataError> {
    let table = read_user_csv(path)?;
    let err = |line: usize, field: &str, value: &str, why: String| {
        DataError::parse(path, line, field, value, why)
    };
    let n_items = cfg.items();
    let first_item = cfg.first_item();
    let value_rows = match &cfg.model {
        ModelConfig::Efa(c) => c.values.as_ref().map(|v| v.rows),
        _ => None,
    };
    let lag_rows = cfg.lag_rows();
    let uni = cfg.direction == SeqDirection::Uni;
    let fm = matches!(cfg.model, ModelConfig::Fm(_));
    let mut by_line: Vec<(&str, usize, &UserRow)> = table
        .sequences
        .iter()
        .flat_map(|s| {
            s.rows
                .iter()
                .enumerate()
                .map(move |(p, r)| (s.id.as_str(), p, r))
        })
        .collect();
    by_line.sort_by_key(|(_, _, r)| r.line);
    for &(_, pos, r) in &by_line {
        let (n, fi, fv) = (r.line, r.item.to_string(), r.value.to_string());
        if r.item < first_item || r.item >= n_items {
            let why = match first_item {
                0 => format!("item id out of range 0..={} (the model has {n_items} item rows)", n_items - 1),
                _ => format!("item id out of range 1..={} (the model has {n_items} item rows, row 0 is padding)", n_items - 1),
            };
            return Err(err(n, "item", &fi, why));
        }
        let Some((_, spec)) = cfg.family.of(r.item) else {
            return Err(err(
                n,
                "item",
                &fi,
                format!(
                    "item {} has no family: the [[family]] ranges are {}",
                    r.item,
                    cfg.family.describe()
                ),
            ));
        };
        if let Err(e) = spec.family().check_obs(&[r.value], 0) {
            let why = match e {
                ExpfamError::Support {
                    family, expected, ..
                } if cfg.family.is_mixed() => format!(
                    "outside the support of {family} ({expected}), the family of item {}",
                    r.item
                ),
                ExpfamError::Support {
                    family, expected, ..
                } => format!("outside the support of {family} ({expected})"),
                other => other.to_string(),
            };
            return Err(err(n, "value", &fv, why));
        }
        if let Some(rows) = value_rows {
            if r.value.fract() != 0.0 || r.value < 0.0 || r.value > (rows - 3) as f64 {
                return Err(err(n, "value", &fv, format!("the value table (model.efa.values.rows = {rows}) needs an integer in 0..={}", rows - 3)));
            }
        }
        if r.lag > 0 {
            match lag_rows {
                Some(l) if r.lag < l => {}
                Some(l) => return Err(err(n, "lag", &r.lag.to_string(), format!("lag {} but the lag embedding has {l} rows (model.efa.continuous.lag_rows: lags 0..={})", r.lag, l - 1))),
                None => return Err(err(n, "lag", &r.lag.to_string(), "a lag row needs a lag embedding (model.efa.continuous.lag_rows)".into())),
            }
            if r.target == Some(true) {
                return Err(err(
                    n,
                    "target",
                    "1",
                    format!("a lag row (lag {}) is context only, never a target", r.lag),
                ));
            }
        }
        if let Some(t) = items {
            if cfg.is_continuous() && t.get(r.item).is_none() {
                return Err(err(
                    n,
                    "item",
                    &fi,
                    format!(
                        "item {} has no row in the item-feature table {}",
                        r.item,
                        t.file.display()
                    ),
                ));
            }
        }
        if r.target == Some(true) && uni && pos == 0 && fm {
            return Err(err(
                n,
                "target",
                "1",
                "the first row of a sequence has no context for a unidirectional factor model"
                    .into(),
            ));
        }
    }
    let mut sequences = Vec::with_capacity(table.sequences.len());
    for s in &table.sequences {
        let first = s.rows.iter().map(|r| r.line).min().unwrap_or(1);
        // One row is a sample only as an EFA target marked explicitly: its context is its own
        // item with the [MASK] value (the paper's first unidirectional sample).
        let lone_target = !fm && s.rows.len() == 1 && s.rows[0].target == Some(true);
        if s.rows.len() < 2 && !lone_target {
            return Err(err(
                first,
                "seq",
                &s.id,
                format!(
                    "sequence `{}` has 1 row; at least 2 are needed (a target and its context){}",
                    s.id,
                    if fm {
                        ""
                    } else {
                        ", or a `target` column marking the row (an EFA target whose context \
                         is its own item)"
                    }
                ),
            ));
        }
        if let ModelConfig::Efa(c) = &cfg.model {
            if let Some(p) = c.positions.as_ref().filter(|p| s.rows.len() > p.max_len) {
                return Err(err(
                    first,
                    "seq",
                    &s.id,
                    format!(
                        "sequence `{}` has {} rows but model.efa.positions.max_len is {}",
                        s.id,
                        s.rows.len(),
                        p.max_len
                    ),
                ));
            }
        }
        let rows: Vec<Row> = s
            .rows
            .iter()
            .enumerate()
            .map(|(p, r)| Row {
                seq: s.id.clone(),
                order: r.order,
                item: r.item,
                value: r.value,
                line: r.line,
                lag: r.lag,
                target: match r.target {
                    Some(t) => t,
                    None => r.lag == 0 && !(uni && p == 0),
                },
                family: cfg.family.of(r.item).map_or(0, |(k, _)| k),
            })
            .collect();
        if !rows.iter().any(|r| r.target) {
            let lag_only = rows.iter().all(|r| r.lag > 0);
            let (field, why) = if lag_only {
                let lag = rows.iter().min_by_key(|r| r.line).map_or(0, |r| r.lag);
                (
                    ("lag", lag.to_string()),
                    format!(
                        "sequence `{}` has only lag rows (lag > 0); its lag-0 rows (the targets \
                         and their own time) are missing",
                        s.id
                    ),
                )
            } else {
                (
                    ("target", "0".to_string()),
                    format!("sequence `{}` has no target row", s.id),
                )
            };
            return Err(err(first, field.0, &field.1, why));
        }
        sequences.push(rows);
    }
    Ok(UserData {
        file: path.to_path_buf(),
        sequences,
    })
}
