//! Reading a user CSV against a configuration: every row checked (item range, family, value
//! support, value-table rows, lags, targets, item features), each failure naming the file,
//! line and field.

use super::{Direction, UserConfig};
use efa_data::item_csv::ItemTable;
use efa_data::user_csv::{read_user_csv, UserRow, UserSequence};
use efa_data::{written, DataError};
use efa_expfam::{ExpfamError, Family};
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
/// Every failure is a [`DataError::Parse`] naming the file, line and field (quoted as written
/// in the file: [`efa_data::written`]); rows are checked in file order.
pub fn read_csv_with(
    path: &Path,
    cfg: &UserConfig,
    items: Option<&ItemTable>,
) -> Result<UserData, DataError> {
    let table = read_user_csv(path)?;
    let checks = Checks::new(path, cfg, items);
    let mut by_line: Vec<(usize, &UserRow)> = table
        .sequences
        .iter()
        .flat_map(|s| s.rows.iter().enumerate())
        .collect();
    by_line.sort_by_key(|(_, r)| r.line);
    for &(pos, r) in &by_line {
        checks.row(pos, r)?;
    }
    let sequences = table
        .sequences
        .iter()
        .map(|s| checks.sequence(s))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(UserData {
        file: path.to_path_buf(),
        sequences,
    })
}

/// What the rows and sequences of a file are checked against: the configuration, the
/// item-feature table and the limits drawn from them.
struct Checks<'a> {
    /// The file read.
    path: &'a Path,
    /// The configuration.
    cfg: &'a UserConfig,
    /// The item-feature table, if any.
    items: Option<&'a ItemTable>,
    /// Item rows of the model.
    n_items: usize,
    /// The first valid item id (row 0 is padding for discrete inputs).
    first_item: usize,
    /// Rows of the EFA value table, if any.
    value_rows: Option<usize>,
    /// Rows of the lag embedding, if any.
    lag_rows: Option<usize>,
    /// Unidirectional sequences.
    uni: bool,
    /// A factor model.
    fm: bool,
}

impl<'a> Checks<'a> {
    /// The checks of `cfg` (and `items`) for the file `path`.
    fn new(path: &'a Path, cfg: &'a UserConfig, items: Option<&'a ItemTable>) -> Self {
        Self {
            path,
            cfg,
            items,
            n_items: cfg.items(),
            first_item: cfg.first_item(),
            value_rows: match &cfg.model {
                ModelConfig::Efa(c) => c.values.as_ref().map(|v| v.rows),
                _ => None,
            },
            lag_rows: cfg.lag_rows(),
            uni: cfg.direction == Direction::Uni,
            fm: matches!(cfg.model, ModelConfig::Fm(_)),
        }
    }

    /// A parse error of the file at `line`.
    fn err(&self, line: usize, field: &str, value: &str, why: String) -> DataError {
        DataError::parse(self.path, line, field, value, why)
    }

    /// Checks the row `r`, at position `pos` of its sequence (sorted by `order`).
    fn row(&self, pos: usize, r: &UserRow) -> Result<(), DataError> {
        let (cfg, n_items, first_item) = (self.cfg, self.n_items, self.first_item);
        let err =
            |line: usize, field: &str, value: &str, why: String| self.err(line, field, value, why);
        // The fields as written, read back from the file only for a message.
        let n = r.line;
        let fi = || written::integer(self.path, n, "item", r.item);
        let fv = || written::real(self.path, n, "value", r.value);
        let fl = || written::integer(self.path, n, "lag", r.lag);
        if r.item < first_item || r.item >= n_items {
            let why = match first_item {
                0 => format!("item id out of range 0..={} (the model has {n_items} item rows)", n_items - 1),
                _ => format!("item id out of range 1..={} (the model has {n_items} item rows, row 0 is padding)", n_items - 1),
            };
            return Err(err(n, "item", &fi(), why));
        }
        let Some((_, spec)) = cfg.family.of(r.item) else {
            return Err(err(
                n,
                "item",
                &fi(),
                format!(
                    "item {} has no family: the [[family]] ranges are {}",
                    r.item,
                    cfg.family.describe()
                ),
            ));
        };
        if let Err(why) = self.support(spec.family(), r) {
            return Err(err(n, "value", &fv(), why));
        }
        if let Some(rows) = self.value_rows {
            if r.value.fract() != 0.0 || r.value < 0.0 || r.value > (rows - 3) as f64 {
                return Err(err(n, "value", &fv(), format!("the value table (model.efa.values.rows = {rows}) needs an integer in 0..={}", rows - 3)));
            }
        }
        if r.lag > 0 {
            match self.lag_rows {
                Some(l) if r.lag < l => {}
                Some(l) => return Err(err(n, "lag", &fl(), format!("lag {} but the lag embedding has {l} rows (model.efa.continuous.lag_rows: lags 0..={})", r.lag, l - 1))),
                None => return Err(err(n, "lag", &fl(), "a lag row needs a lag embedding (model.efa.continuous.lag_rows)".into())),
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
        if let Some(t) = self.items {
            if cfg.is_continuous() && t.get(r.item).is_none() {
                return Err(err(
                    n,
                    "item",
                    &fi(),
                    format!(
                        "item {} has no row in the item-feature table {}",
                        r.item,
                        t.file.display()
                    ),
                ));
            }
        }
        if r.target == Some(true) && self.uni && pos == 0 && self.fm {
            return Err(err(
                n,
                "target",
                "1",
                "the first row of a sequence has no context for a unidirectional factor model"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Checks that the value of `r` is in the support of its family `family`, as read (f64)
    /// and as training sees it: rounded to f32, the training dtype, where a value just inside
    /// a bound (a beta's 0.9999999999, a gamma's 1e-50) can land on it or beyond. Returns why
    /// not.
    fn support(&self, family: Family, r: &UserRow) -> Result<(), String> {
        let why = |e: ExpfamError| match e {
            ExpfamError::Support {
                family, expected, ..
            } if self.cfg.family.is_mixed() => format!(
                "outside the support of {family} ({expected}), the family of item {}",
                r.item
            ),
            ExpfamError::Support {
                family, expected, ..
            } => format!("outside the support of {family} ({expected})"),
            other => other.to_string(),
        };
        family.check_obs(&[r.value], 0).map_err(why)?;
        let in_f32 = r.value as f32;
        family
            .check_obs(&[in_f32], 0)
            .map_err(|e| format!("rounds to {in_f32} in f32 (the training dtype), {}", why(e)))
    }

    /// The rows of the sequence `s` (its rows checked one by one already), after checking its
    /// length and that it has a target.
    fn sequence(&self, s: &UserSequence) -> Result<Vec<Row>, DataError> {
        let first = s.rows.iter().map(|r| r.line).min().unwrap_or(1);
        self.check_length(s, first)?;
        let rows = self.rows(s);
        if !rows.iter().any(|r| r.target) {
            return Err(self.no_target(s, &rows, first));
        }
        Ok(rows)
    }

    /// Checks that the sequence `s` (first line `first`) has enough rows to be a sample and
    /// no more than the model's positions.
    fn check_length(&self, s: &UserSequence, first: usize) -> Result<(), DataError> {
        let (cfg, fm) = (self.cfg, self.fm);
        // One row is a sample only as an EFA target marked explicitly: its context is its own
        // item with the [MASK] value (the paper's first unidirectional sample).
        let lone_target = !fm && s.rows.len() == 1 && s.rows[0].target == Some(true);
        if s.rows.len() < 2 && !lone_target {
            return Err(self.err(
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
                return Err(self.err(
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
        Ok(())
    }

    /// The rows of the sequence `s`, each with its family and whether it is a target (the
    /// `target` column, else every lag-0 row but a unidirectional sequence's first).
    fn rows(&self, s: &UserSequence) -> Vec<Row> {
        let (cfg, uni) = (self.cfg, self.uni);
        s.rows
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
            .collect()
    }

    /// The error of the sequence `s` (first line `first`) whose `rows` have no target.
    fn no_target(&self, s: &UserSequence, rows: &[Row], first: usize) -> DataError {
        let lag_only = rows.iter().all(|r| r.lag > 0);
        let (field, why) = if lag_only {
            let lag = rows
                .iter()
                .min_by_key(|r| r.line)
                .map_or(String::new(), |r| {
                    written::integer(self.path, r.line, "lag", r.lag)
                });
            (
                ("lag", lag),
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
        self.err(first, field.0, &field.1, why)
    }
}
