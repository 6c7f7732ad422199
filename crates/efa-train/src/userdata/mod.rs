//! Bring-your-own-data training: the TOML run configuration of `efa train` and a CSV of
//! sequences of (item, value) pairs turned into model samples.
//!
//! # CSV layout
//!
//! A header line naming exactly the four columns `seq`, `order`, `item`, `value` (any order,
//! no quoting), then one row per observation:
//! * `seq`: sequence id (any non-empty text);
//! * `order`: integer position key inside the sequence (rows are sorted by it; a repeated
//!   `(seq, order)` pair is an error);
//! * `item`: integer item id in `1..items` (`items` from the model config; 0 is padding);
//! * `value`: the observed value, finite and inside the support of the configured family
//!   (categorical: a class index `0..k`). For an EFA model with a value table
//!   (`model.efa.values`), context values are embedded by row `value + 1`, so they must be
//!   integers in `0..=rows − 3` (row 0 is padding, row `rows − 1` is the `[MASK]` row).
//!
//! Each sequence needs at least 2 rows. Every row of a sequence is a target once:
//! bidirectionally (pseudo-likelihood) with all other rows as context, unidirectionally
//! (`direction = "uni"`) with the rows before it as context (so the first row is never a target).

mod set;

pub use set::UserSet;

use crate::memory::{check_memory, Job, MemoryEstimate};
use crate::recipe::TrainConfig;
use crate::TrainError;
use efa_data::DataError;
use efa_expfam::{ExpfamError, Family};
use efa_model::batch::Samples;
use efa_model::fm::FmConfig;
use efa_model::ModelConfig;
use efa_nn::params::ParamCount;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The exponential family of the value column (the families with a scalar observation).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
/// (Field-less families are empty struct variants so that stray keys are rejected too.)
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FamilySpec {
    /// N(μ, s2) with known s2 (η width 1).
    GaussianKnownVar {
        /// Known variance.
        s2: f64,
    },
    /// N(μ, σ²) with both learned (η width 2).
    Gaussian {},
    /// 0/1 values.
    Bernoulli {},
    /// Counts 0..=n.
    Binomial {
        /// Trials.
        n: u64,
    },
    /// Counts.
    Poisson {},
    /// Class index 0..k (η width k).
    Categorical {
        /// Classes.
        k: usize,
    },
    /// Positive reals (η width 2).
    Gamma {},
    /// Positive reals.
    Exponential {},
    /// Values in (0, 1) (η width 2).
    Beta {},
    /// Counts, with r failures.
    NegativeBinomial {
        /// Failures r > 0.
        r: f64,
    },
}

impl FamilySpec {
    /// The efa-expfam family.
    pub fn family(&self) -> Family {
        match *self {
            FamilySpec::GaussianKnownVar { s2 } => Family::GaussianKnownVar { s2 },
            FamilySpec::Gaussian {} => Family::Gaussian,
            FamilySpec::Bernoulli {} => Family::Bernoulli,
            FamilySpec::Binomial { n } => Family::Binomial { n },
            FamilySpec::Poisson {} => Family::Poisson,
            FamilySpec::Categorical { k } => Family::Categorical { k },
            FamilySpec::Gamma {} => Family::Gamma,
            FamilySpec::Exponential {} => Family::Exponential,
            FamilySpec::Beta {} => Family::Beta,
            FamilySpec::NegativeBinomial { r } => Family::NegativeBinomial { r },
        }
    }
}

/// Which rows are context for a target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SeqDirection {
    /// Every other row of the sequence.
    #[default]
    Bi,
    /// The rows before the target.
    Uni,
}

/// The TOML configuration of `efa train` (unknown keys are errors).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// `[model.efa]` or `[model.fm]` (FM: `kind = "rating"` only).
    pub model: ModelConfig,
    /// `[family]` with `kind = "poisson"` etc.
    pub family: FamilySpec,
    /// `"bi"` (default) or `"uni"`.
    #[serde(default)]
    pub direction: SeqDirection,
    /// `[train]`: lr, batch_size, max_epochs, patience, seed (shuffles), eval_batch.
    pub train: TrainConfig,
    /// Seed of the parameter initialisation.
    #[serde(default)]
    pub init_seed: u64,
}

impl UserConfig {
    /// Parses and validates a TOML text read from `path` (named in every error); returns the
    /// configuration and its model's parameter count ([`UserConfig::validate`]).
    pub fn from_toml(text: &str, path: &Path) -> Result<(Self, ParamCount), TrainError> {
        let cfg: UserConfig = toml::from_str(text).map_err(|e| TrainError::Parse {
            file: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let params = cfg.validate().map_err(|e| e.in_file(path))?;
        Ok((cfg, params))
    }

    /// Checks shapes and settings, naming the offending field: the model's sizes
    /// ([`ModelConfig::validate`]), the family's parameters (no degenerate family: at least
    /// 2 categorical classes and 1 binomial trial), the training settings
    /// ([`TrainConfig::validate`]), and the memory of the smallest job the configuration can
    /// run (one sample as long as the model's positions allow, one thread;
    /// [`crate::memory`]) against the available memory. Returns the model's parameter count.
    pub fn validate(&self) -> Result<ParamCount, TrainError> {
        let bad = |field: &str, reason: String| Err(TrainError::config(field, reason));
        let params = self.model.validate()?;
        self.validate_family()?;
        let family = self.family.family();
        match &self.model {
            ModelConfig::Efa(c) => {
                if c.out_dim != family.eta_dim() {
                    return bad(
                        "model.efa.out_dim",
                        format!(
                            "{} but family `{}` needs {} natural parameter(s)",
                            c.out_dim,
                            family.name(),
                            family.eta_dim()
                        ),
                    );
                }
                if c.continuous.is_some() {
                    return bad(
                        "model.efa.continuous",
                        "is not supported for CSV data".into(),
                    );
                }
                if let Some(v) = &c.values {
                    if v.rows < 3 {
                        return bad(
                            "model.efa.values.rows",
                            format!("{} must be at least 3 (padding, a value, [MASK])", v.rows),
                        );
                    }
                }
                if c.items < 2 {
                    return bad(
                        "model.efa.items",
                        format!(
                            "{} must be at least 2 (padding row 0 and one item)",
                            c.items
                        ),
                    );
                }
            }
            ModelConfig::Fm(FmConfig::Rating { items, .. }) => {
                if family.eta_dim() != 1 {
                    return bad(
                        "family",
                        format!(
                            "`{}` needs {} natural parameters but the rating FM outputs 1",
                            family.name(),
                            family.eta_dim()
                        ),
                    );
                }
                if *items < 2 {
                    return bad(
                        "model.fm.items",
                        format!("{items} must be at least 2 (padding row 0 and one item)"),
                    );
                }
            }
            ModelConfig::Fm(FmConfig::Item { .. }) => {
                return bad(
                    "model.fm.kind",
                    "only `rating` factor models train on CSV data".into(),
                );
            }
        }
        self.train.validate()?;
        let (longest, origin) = match &self.model {
            ModelConfig::Efa(c) => match &c.positions {
                Some(p) => (
                    p.max_len,
                    format!(
                        "one sample as long as field `model.efa.positions.max_len` = {} allows",
                        p.max_len
                    ),
                ),
                None => (2, "one sample of 2 rows".to_string()),
            },
            ModelConfig::Fm(_) => (1, "one sample of 2 rows".to_string()),
        };
        let job = Job::new(&self.train, 1, longest, 1);
        check_memory(&self.model, &params, &job, &origin)?;
        Ok(params)
    }

    /// The family's parameters, each error naming `family.<field>`: a finite positive `s2`
    /// and `r`, at least 2 categorical classes `k` and at least 1 binomial trial `n` (with
    /// one class or no trial every value has probability 1: nothing to learn).
    fn validate_family(&self) -> Result<(), TrainError> {
        let bad =
            |field: &str, why: String| Err(TrainError::config(format!("family.{field}"), why));
        match self.family {
            FamilySpec::GaussianKnownVar { s2 } if !(s2 > 0.0 && s2.is_finite()) => {
                bad("s2", format!("{s2} must be a finite positive variance"))
            }
            FamilySpec::NegativeBinomial { r } if !(r > 0.0 && r.is_finite()) => bad(
                "r",
                format!("{r} must be a finite positive number of failures"),
            ),
            FamilySpec::Categorical { k } if k < 2 => bad(
                "k",
                format!(
                    "{k} classes; at least 2 are needed (with fewer every value has \
                     probability 1)"
                ),
            ),
            FamilySpec::Binomial { n: 0 } => bad(
                "n",
                "0 trials; at least 1 is needed (with none every value is 0 with probability 1)"
                    .into(),
            ),
            _ => match self.family.family().validate() {
                Ok(()) => Ok(()),
                Err(e) => Err(TrainError::config("family", e.to_string())),
            },
        }
    }

    /// Rows of the item table (`items` of the model).
    pub fn items(&self) -> usize {
        match &self.model {
            ModelConfig::Efa(c) => c.items,
            ModelConfig::Fm(FmConfig::Rating { items, .. }) => *items,
            ModelConfig::Fm(FmConfig::Item { tokens, .. }) => *tokens,
        }
    }
}

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
}

/// A parsed CSV file: sequences in order of first appearance, rows sorted by `order`.
#[derive(Clone, Debug)]
pub struct UserData {
    /// The file read.
    pub file: PathBuf,
    /// The sequences.
    pub sequences: Vec<Vec<Row>>,
}

pub use efa_data::user_csv::COLUMNS;

/// Reads a CSV file (layout in [`efa_data::user_csv`]) and checks it against the
/// configuration: item ids in the model's range, values in the family's support (and integer
/// rows of a value table), at least two rows per sequence, and no sequence longer than the
/// model's positions. Every failure is a [`DataError::Parse`] naming the file, line and
/// field; rows are checked in file order.
pub fn read_csv(path: &Path, cfg: &UserConfig) -> Result<UserData, DataError> {
    let table = efa_data::user_csv::read_user_csv(path)?;
    let err = |line: usize, field: &str, value: &str, why: String| {
        DataError::parse(path, line, field, value, why)
    };
    let family = cfg.family.family();
    let items = cfg.items();
    let value_rows = match &cfg.model {
        ModelConfig::Efa(c) => c.values.as_ref().map(|v| v.rows),
        _ => None,
    };
    let mut by_line: Vec<(&str, &efa_data::user_csv::UserRow)> = table
        .sequences
        .iter()
        .flat_map(|s| s.rows.iter().map(move |r| (s.id.as_str(), r)))
        .collect();
    by_line.sort_by_key(|(_, r)| r.line);
    for (_, r) in &by_line {
        let (n, fi, fv) = (r.line, r.item.to_string(), r.value.to_string());
        if r.item == 0 || r.item >= items {
            return Err(err(n, "item", &fi, format!("item id out of range 1..={} (the model has {items} item rows, row 0 is padding)", items - 1)));
        }
        if let Err(e) = family.check_obs(&[r.value], 0) {
            let why = match e {
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
    }
    let mut sequences = Vec::with_capacity(table.sequences.len());
    for s in &table.sequences {
        let first = s.rows.iter().map(|r| r.line).min().unwrap_or(1);
        if s.rows.len() < 2 {
            return Err(err(
                first,
                "seq",
                &s.id,
                format!(
                    "sequence `{}` has 1 row; at least 2 are needed (a target and its context)",
                    s.id
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
        sequences.push(
            s.rows
                .iter()
                .map(|r| Row {
                    seq: s.id.clone(),
                    order: r.order,
                    item: r.item,
                    value: r.value,
                    line: r.line,
                })
                .collect(),
        );
    }
    Ok(UserData {
        file: path.to_path_buf(),
        sequences,
    })
}

/// Model samples built from a CSV, with the row each sample predicts.
#[derive(Clone, Debug)]
pub struct UserSamples {
    /// The samples, stored as sequences (memory grows with the rows).
    pub samples: UserSet,
    /// For each sample, the target row.
    pub targets: Vec<Row>,
}

/// One sample per target row (see the module docs), in file order of sequences and then by
/// `order`, as one dense [`Samples`] of width the longest sample (memory: samples × longest;
/// for small data and tests, see [`UserSet::dense`]). EFA: tokens are the sequence's items
/// (the context prefix for `uni`), values the value rows with the target's replaced by
/// `[MASK]`. Rating FM: the context items with their values as weights and the target's item
/// as center.
pub fn build_samples(data: &UserData, cfg: &UserConfig) -> Samples {
    UserSet::new(data, cfg).dense()
}

/// The samples of `data` as a [`UserSet`] (each minibatch built on demand) with their target
/// rows.
pub fn build(data: &UserData, cfg: &UserConfig) -> UserSamples {
    let samples = UserSet::new(data, cfg);
    let uni = cfg.direction == SeqDirection::Uni;
    let targets = data
        .sequences
        .iter()
        .flat_map(|s| s[usize::from(uni)..].iter().cloned())
        .collect();
    UserSamples { samples, targets }
}

/// Checks that training and evaluating `cfg`'s model on `set` (read from `data`) fits in the
/// available memory with `threads` workers ([`efa_model::limits::Job::new`] with the set's
/// sample count and longest sample); the error names the file and, when the tapes'
/// positions dominate, the longest sequence with its `seq` id, line and row count.
pub fn check_job_memory(
    data: &UserData,
    set: &UserSet,
    cfg: &UserConfig,
    params: &ParamCount,
    threads: usize,
) -> Result<MemoryEstimate, TrainError> {
    let job = Job::new(&cfg.train, set.len(), set.longest(), threads);
    let origin = data
        .sequences
        .iter()
        .max_by_key(|s| s.len())
        .and_then(|s| s.iter().min_by_key(|r| r.line).map(|r| (r, s.len())))
        .map_or(String::new(), |(r, n)| {
            format!(
                "the longest sequence `{}` (first row at line {}, {n} rows) among {} samples of {}",
                r.seq,
                r.line,
                set.len(),
                data.file.display()
            )
        });
    check_memory(&cfg.model, params, &job, &origin)
}
