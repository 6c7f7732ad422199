//! Options the experiments share: which directions and model families run, where the data
//! are, and which split protocol applies.

use crate::ModelError;
use serde::Serialize;
use std::path::PathBuf;

/// Which directions run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Directions {
    /// Unidirectional only.
    Uni,
    /// Bidirectional only.
    Bi,
    /// Both.
    #[default]
    Both,
}

impl Directions {
    /// The selected directions as "is unidirectional" flags, unidirectional first.
    pub fn unidirectional(self) -> &'static [bool] {
        match self {
            Directions::Uni => &[true],
            Directions::Bi => &[false],
            Directions::Both => &[true, false],
        }
    }
}

/// Which model families run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Models {
    /// EFA only.
    Efa,
    /// Factor model only.
    Fm,
    /// Both.
    #[default]
    Both,
}

impl Models {
    /// The selected families as "is EFA" flags, the factor model first.
    pub fn is_efa(self) -> &'static [bool] {
        match self {
            Models::Efa => &[true],
            Models::Fm => &[false],
            Models::Both => &[false, true],
        }
    }
}

/// How the data are split.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Protocol {
    /// Exactly as the notebooks ran it, quirks included (PAPER.md §7: the MovieLens user split
    /// that drops every user id ≥ the number of users; exp-2's per-sample validation split).
    #[default]
    Paper,
    /// MovieLens: every kept user used (a correct random user split, numpy seed 42) and the
    /// validation split made by user, so no user's ratings are in both train and validation.
    /// Temperature: standardised temperatures and coordinates, minibatches and early stopping
    /// on validation (the MSE still in °F²). Elsewhere the same as the paper protocol.
    Clean,
}

impl Protocol {
    /// A line saying what the protocol means for an experiment whose paper protocol has a
    /// split quirk (`quirk`) or not.
    pub fn describe(self, quirk: bool) -> &'static str {
        match (self, quirk) {
            (Protocol::Paper, _) => {
                "protocol: paper (the notebooks' exact filters, tie-breaks and splits, quirks \
                 included)"
            }
            (Protocol::Clean, true) => {
                "protocol: clean (all users used, validation split by user; numbers are not \
                 comparable to the paper's)"
            }
            (Protocol::Clean, false) => {
                "protocol: clean (this experiment has no split quirk: identical to the paper \
                 protocol)"
            }
        }
    }
}

/// Where a real-data experiment reads its files, and its split protocol.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct DataOptions {
    /// Data directory holding movielens/, instacart/ and temperature/ (default
    /// ../shared/data).
    #[cfg_attr(feature = "cli", arg(long))]
    pub data: Option<PathBuf>,
    /// Split protocol.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = Protocol::Paper))]
    pub protocol: Protocol,
}

impl DataOptions {
    /// `--data DIR` if it is a directory, else `../shared/data` when it exists, else an
    /// error saying where each data set comes from.
    pub fn dir(&self) -> Result<PathBuf, ModelError> {
        resolve_data_dir(self.data.as_ref())
    }
}

/// `data` if it is a directory, else `../shared/data` when it exists, else an error saying
/// where each data set comes from.
pub fn resolve_data_dir(data: Option<&PathBuf>) -> Result<PathBuf, ModelError> {
    match data {
        Some(p) if p.is_dir() => Ok(p.clone()),
        Some(p) => Err(ModelError::Config(format!(
            "--data {}: not a directory",
            p.display()
        ))),
        None => efa_data::default_data_dir().ok_or_else(|| {
            ModelError::Config(
                "no data directory: ../shared/data does not exist here; pass --data DIR with \
                 DIR/movielens/u.data (GroupLens MovieLens 100K), \
                 DIR/instacart/{items,baskets_train,baskets_test}.csv (Kaggle Instacart Market \
                 Basket Analysis, prepared as in PAPER.md §5.1) and \
                 DIR/temperature/{us_cities_fall,cities}.csv (University of Dayton / Kaggle \
                 daily city temperatures)"
                    .into(),
            )
        }),
    }
}

/// The first value of `v` that occurs a second time (a repeated `--k` or `--seeds` entry),
/// in O(n log n).
pub fn first_repeat<T: Ord + Copy>(v: &[T]) -> Option<T> {
    let mut seen = std::collections::BTreeSet::new();
    v.iter().copied().find(|x| !seen.insert(*x))
}

impl super::temperature::Options {
    /// Checks the options before any data are read, naming the flag: `--layers` in
    /// `1..=MAX_LAYERS`; `--lag` at most 2; where the FM runs, `--fm-epochs` at least 1 and
    /// `--k` not empty, every k at least 1 and none repeated (the upper bound, the number of
    /// cities − 1, is checked once the cities are known); `--seeds` without repeats.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |s: String| Err(ModelError::Config(s));
        if let Some(l) = self.layers {
            if l == 0 || l > crate::limits::MAX_LAYERS {
                return bad(format!(
                    "--layers {l}: must be in 1..={}",
                    crate::limits::MAX_LAYERS
                ));
            }
        }
        if self.lag > 2 {
            return bad(format!(
                "--lag {}: the paper's models use 0, 1 or 2 lag days",
                self.lag
            ));
        }
        if self.model != super::Models::Efa {
            if self.fm_epochs == 0 {
                return bad("--fm-epochs 0: must be at least 1".into());
            }
            if self.k.is_empty() || self.k.contains(&0) {
                return bad(format!(
                    "--k {:?}: needs neighbour counts of at least 1",
                    self.k
                ));
            }
            if let Some(k) = first_repeat(&self.k) {
                return bad(format!("--k: {k} is given twice"));
            }
        }
        if let Some(s) = first_repeat(&self.seeds) {
            return bad(format!("--seeds: {s} is given twice"));
        }
        Ok(())
    }
}
