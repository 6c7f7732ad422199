//! Bring-your-own-data training: the TOML run configuration of `efa train`, a CSV of
//! sequences of (item, value) observations turned into model samples, and an optional
//! item-feature table (`item,<features>`, e.g. coordinates) for continuous inputs.
//!
//! # CSV layout
//!
//! A header naming the columns `seq`, `order`, `item`, `value` and optionally `lag` and
//! `target` (any order), then one row per observation:
//! * `seq`: sequence id (any non-empty text);
//! * `order`: integer position key inside the sequence (rows are sorted by it; a repeated
//!   `(seq, order)` pair is an error);
//! * `item`: integer item id in `1..items` (`items` from the model config; 0 is padding), or
//!   in `0..items` for continuous inputs (no padding row);
//! * `value`: the observed value, finite and inside the support of the item's family
//!   (categorical: a class index `0..k`). For an EFA model with a value table
//!   (`model.efa.values`), context values are embedded by row `value + 1`, so they must be
//!   integers in `0..=rows − 3` (row 0 is padding, row `rows − 1` is the `[MASK]` row). With
//!   continuous inputs (`model.efa.continuous`) values are read by the value MLP as they are;
//! * `lag` (optional, default 0): 0 for the target's own time, 1, 2, … for earlier times.
//!   Rows with `lag > 0` are context only (never targets) and need the lag embedding
//!   (`model.efa.continuous.lag_rows` > lag); a sequence needs lag-0 rows;
//! * `target` (optional): `1` for a target row, `0` for a context-only row.
//!
//! Each sequence needs at least 2 rows and a target (for EFA models, a single row marked a
//! target is a sample too: its context is its own item, the value masked). Without a `target` column every row with
//! lag 0 is a target once: bidirectionally (pseudo-likelihood) with all other rows as context,
//! unidirectionally (`direction = "uni"`) with the rows before it as context (so the first
//! row is never a target). With a `target` column exactly the rows marked 1 are targets (a
//! unidirectional EFA target may then be the first row: its context is its own item).
//!
//! # Families
//!
//! `[family]` gives every item one family; `[[family]]` tables with `items = [first, last]`
//! give each item range its own (mixed types in one data set): the model's output is as wide
//! as the widest family's η, each target uses its family's leading columns and link, and the
//! loss is the mean nll over all targets. An item outside every range is an error.

mod build;
pub mod diagnose;
mod family;
mod items;
mod loss;
mod read;
pub mod report;
mod set;

pub use build::{build, build_samples, check_job_memory, UserSamples};
pub use efa_data::item_csv::{read_item_csv, ItemTable};
pub use efa_data::written;
pub use efa_data::Direction;
pub use family::{Families, FamilyRange, FamilySpec};
pub use items::check_items_match;
pub use loss::UserLoss;
pub use read::{read_csv, read_csv_with, Row, UserData, COLUMNS};
pub use set::UserSet;

use crate::memory::{available_memory, check_config_sites_against, check_memory_against, Job};
use crate::recipe::TrainConfig;
use crate::TrainError;
use efa_model::efa::ContinuousInputs;
use efa_model::fm::FmConfig;
use efa_model::{ModelConfig, Objective};
use efa_nn::params::ParamCount;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The TOML configuration of `efa train` (unknown keys are errors).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// `[model.efa]` or `[model.fm]` (FM: `kind = "rating"` only).
    pub model: ModelConfig,
    /// `[family]` with `kind = "poisson"` etc., or `[[family]]` tables with item ranges.
    pub family: Families,
    /// `"bi"` (default) or `"uni"`.
    #[serde(default)]
    pub direction: Direction,
    /// `[train]`: lr, batch_size, max_epochs, patience, seed (shuffles), eval_batch.
    pub train: TrainConfig,
    /// Seed of the parameter initialisation.
    #[serde(default)]
    pub init_seed: u64,
    /// The loss (default `"nll"`; the paper's losses for reproducing it exactly).
    #[serde(default, skip_serializing_if = "UserLoss::is_nll")]
    pub loss: UserLoss,
}

impl UserConfig {
    /// Parses and validates a TOML text read from `path` (named in every error); returns the
    /// configuration and its model's parameter count ([`UserConfig::validate`]).
    pub fn from_toml(text: &str, path: &Path) -> Result<(Self, ParamCount), TrainError> {
        Self::from_toml_with_items(text, path, None)
    }

    /// [`UserConfig::from_toml`] with an item-feature table: its rows become the site table
    /// of the continuous inputs ([`UserConfig::set_items`]) before the checks.
    pub fn from_toml_with_items(
        text: &str,
        path: &Path,
        items: Option<&ItemTable>,
    ) -> Result<(Self, ParamCount), TrainError> {
        let mut cfg = Self::parse(text, path)?;
        if let Some(t) = items {
            cfg.set_items(t).map_err(|e| e.in_file(path))?;
        }
        let params = cfg.validate().map_err(|e| e.in_file(path))?;
        Ok((cfg, params))
    }

    /// [`UserConfig::from_toml`] of the configuration a trained model was given (`saved`, as
    /// stored in its model file): continuous inputs whose site table the file leaves out (it
    /// came from an item-feature table) take the model's stored table before the checks, as
    /// `efa evaluate` and `efa predict` take it without `--items`.
    pub fn from_toml_for(
        text: &str,
        path: &Path,
        saved: &UserConfig,
    ) -> Result<(Self, ParamCount), TrainError> {
        let mut cfg = Self::parse(text, path)?;
        if let (Some(ci), Some(stored)) = (cfg.continuous_mut(), saved.continuous()) {
            if ci.sites.is_empty() {
                ci.sites = stored.sites.clone();
            }
        }
        let params = cfg.validate().map_err(|e| e.in_file(path))?;
        Ok((cfg, params))
    }

    /// The TOML text `text` of `path`, parsed (not checked).
    fn parse(text: &str, path: &Path) -> Result<Self, TrainError> {
        toml::from_str(text).map_err(|e| TrainError::Parse {
            file: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })
    }

    /// The configuration as TOML text (what [`UserConfig::from_toml`] reads back).
    pub fn to_toml(&self) -> Result<String, TrainError> {
        toml::to_string(self).map_err(|e| TrainError::Parse {
            file: "model.toml".into(),
            message: format!("cannot write the configuration as TOML: {e}"),
        })
    }

    /// Fills the site table of `model.efa.continuous` from an item-feature table: row `i` is
    /// item `i`'s features (continuous inputs have no padding row; items the table lacks are
    /// zeros, and a data row of such an item is an error when read with it,
    /// [`read_csv_with`]). Errors name the field (`model.efa.continuous`: a model without
    /// continuous inputs, or a table already given in the configuration; `model.efa.items`:
    /// a table beyond the size limit, or one that with its copies would not fit in memory,
    /// checked before it is built: [`crate::memory::check_site_table`]) or the table's file,
    /// line and field.
    pub fn set_items(&mut self, table: &ItemTable) -> Result<(), TrainError> {
        let items = self.items();
        let ModelConfig::Efa(c) = &mut self.model else {
            return Err(TrainError::config(
                "model.efa.continuous",
                "an item-feature table feeds the continuous inputs of an EFA model; this is a \
                 factor model",
            ));
        };
        let Some(ci) = c.continuous.as_mut() else {
            return Err(TrainError::config(
                "model.efa.continuous",
                "an item-feature table was given, but the model has no continuous inputs (add \
                 model.efa.continuous)",
            ));
        };
        if !ci.sites.is_empty() {
            return Err(TrainError::config(
                "model.efa.continuous.sites",
                "is given in the configuration and as an item-feature table; give one",
            ));
        }
        // The table gets a row per item id: its size is checked before it is built, as the
        // configuration's sizes are (`items` comes from the TOML file unchecked).
        efa_model::size::check_size("efa.items", items as u64)?;
        let values = (items as u64).saturating_mul(table.features.len() as u64);
        if values > efa_model::size::MAX_PARAM_VALUES {
            return Err(TrainError::config(
                "model.efa.items",
                format!(
                    "{items} item rows × {} feature columns of {} = {values} site-table values, \
                     beyond the limit of {}",
                    table.features.len(),
                    table.file.display(),
                    efa_model::size::MAX_PARAM_VALUES
                ),
            ));
        }
        crate::memory::check_site_table(items, table.features.len(), &table.file)?;
        ci.sites = table.table(items)?;
        Ok(())
    }

    /// The training objective ([`UserLoss::objective`]).
    pub fn objective(&self) -> Objective {
        self.loss.objective(&self.family)
    }

    /// Checks shapes and settings, naming the offending field: the model's sizes
    /// ([`ModelConfig::validate`]), the families ([`Families::validate`]) and the loss, the
    /// model's output width (the widest family's η), the values the training dtype cannot
    /// represent (`train.lr`, `model.efa.ln_eps`, the families' parameters), the training
    /// settings ([`TrainConfig::validate`]), and the memory of the smallest job the
    /// configuration can run (one sample as long as the model's positions allow, one thread;
    /// [`crate::memory`]) against the available memory. Returns the model's parameter count.
    pub fn validate(&self) -> Result<ParamCount, TrainError> {
        self.validate_against(available_memory())
    }

    /// [`UserConfig::validate`] against a given `(bytes, source)` of available memory.
    pub fn validate_against(&self, memory: (u64, &str)) -> Result<ParamCount, TrainError> {
        let bad = |field: &str, reason: String| Err(TrainError::config(field, reason));
        if let Some(ci) = self.continuous() {
            if ci.sites.is_empty() {
                return bad(
                    "model.efa.continuous.sites",
                    "the item-feature table is missing: continuous inputs need one row of \
                 numeric features per item (a CSV `item,<feature>,…`)"
                        .into(),
                );
            }
            // The site table against memory before the size check copies it, as a table
            // read from a file is before it is built (features: its first row's, as the
            // estimate counts them; rows of other widths are refused below).
            let features = ci.sites[0].len();
            check_config_sites_against(ci.sites.len(), features, memory)?;
        }
        let params = self.model.validate()?;
        let items = self.items();
        self.family.validate(self.first_item(), items)?;
        self.loss.validate(&self.family)?;
        let width = self.family.eta_width();
        match &self.model {
            ModelConfig::Efa(c) => {
                if c.out_dim != width {
                    let why = match &self.family {
                        Families::All(f) => format!(
                            "{} but family `{}` needs {width} natural parameter(s)",
                            c.out_dim,
                            f.family().name()
                        ),
                        Families::Ranges(_) => format!(
                            "{} but the families ({}) need {width} natural parameter(s) (the \
                             widest family's)",
                            c.out_dim,
                            self.family.describe()
                        ),
                    };
                    return bad("model.efa.out_dim", why);
                }
                if let Some(v) = &c.values {
                    if v.rows < 3 {
                        return bad(
                            "model.efa.values.rows",
                            format!("{} must be at least 3 (padding, a value, [MASK])", v.rows),
                        );
                    }
                }
                if let Some(ci) = &c.continuous {
                    if ci.sites.len() != c.items {
                        return bad(
                            "model.efa.continuous.sites",
                            format!(
                                "{} rows but model.efa.items is {} (one row per item id \
                 0..items: continuous inputs have no padding row)",
                                ci.sites.len(),
                                c.items
                            ),
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
                let eps = c.ln_eps as f32;
                if !eps.is_normal() {
                    return bad(
                        "model.efa.ln_eps",
                        format!(
                            "{:e} is not a normal positive f32 (the training dtype)",
                            c.ln_eps
                        ),
                    );
                }
            }
            ModelConfig::Fm(FmConfig::Rating { items, .. }) => {
                if self.family.is_mixed() {
                    return bad(
                        "family",
                        format!(
                            "`{}`: the rating FM trains on one [family], not [[family]] ranges",
                            self.family.describe()
                        ),
                    );
                }
                if width != 1 {
                    return bad(
                        "family",
                        format!(
                            "`{}` needs {width} natural parameters but the rating FM outputs 1",
                            self.family.describe()
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
        if !(self.train.lr as f32).is_normal() {
            return bad(
                "train.lr",
                format!(
                    "{:e} is not a normal positive f32 (the training dtype rounds it to {:e})",
                    self.train.lr, self.train.lr as f32
                ),
            );
        }
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
        check_memory_against(&self.model, &params, &job, &origin, memory)?;
        Ok(params)
    }

    /// Rows of the item table (`items` of the model).
    pub fn items(&self) -> usize {
        match &self.model {
            ModelConfig::Efa(c) => c.items,
            ModelConfig::Fm(FmConfig::Rating { items, .. }) => *items,
            ModelConfig::Fm(FmConfig::Item { tokens, .. }) => *tokens,
        }
    }

    /// The smallest item id: 0 for continuous inputs (no padding row: padded positions are
    /// masked by the sample lengths, and the site table has a row per item), else 1 (row 0
    /// of the item table is padding).
    pub fn first_item(&self) -> usize {
        usize::from(!self.is_continuous())
    }

    /// The lag rows of the model (`model.efa.continuous.lag_rows`), if it has a lag embedding.
    pub fn lag_rows(&self) -> Option<usize> {
        match &self.model {
            ModelConfig::Efa(c) => c.continuous.as_ref().and_then(|c| c.lag_rows),
            _ => None,
        }
    }

    /// True for an EFA model with continuous inputs.
    pub fn is_continuous(&self) -> bool {
        self.continuous().is_some()
    }

    /// The continuous inputs of an EFA model, if it has them.
    fn continuous(&self) -> Option<&ContinuousInputs> {
        match &self.model {
            ModelConfig::Efa(c) => c.continuous.as_ref(),
            _ => None,
        }
    }

    /// [`UserConfig::continuous`], mutable.
    fn continuous_mut(&mut self) -> Option<&mut ContinuousInputs> {
        match &mut self.model {
            ModelConfig::Efa(c) => c.continuous.as_mut(),
            _ => None,
        }
    }
}
