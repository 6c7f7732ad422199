//! Options the experiments share: which directions and model families run, where the data
//! are, and which split protocol applies.

use crate::paper_data::{DataSet, PaperData};
use crate::{ModelKind, PaperError};
use efa_data::samples::Direction;
use serde::Serialize;
use std::path::PathBuf;

/// Which directions run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[derive(clap::ValueEnum)]
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
    /// The selected directions, unidirectional first.
    pub fn directions(self) -> &'static [Direction] {
        match self {
            Directions::Uni => &[Direction::Uni],
            Directions::Bi => &[Direction::Bi],
            Directions::Both => &[Direction::Uni, Direction::Bi],
        }
    }
}

/// Which model families run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[derive(clap::ValueEnum)]
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
    /// The selected families, the factor model first.
    pub fn kinds(self) -> &'static [ModelKind] {
        match self {
            Models::Efa => &[ModelKind::Efa],
            Models::Fm => &[ModelKind::Fm],
            Models::Both => &[ModelKind::Fm, ModelKind::Efa],
        }
    }
}

/// How the data are split.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[derive(clap::ValueEnum)]
pub enum Protocol {
    /// Exactly as the notebooks ran it, quirks included (docs/paper.md §7: the MovieLens user split
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, clap::Args)]
pub struct DataOptions {
    /// Data directory holding movielens/, instacart/ and temperature/ (default
    /// ../shared/data).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Split protocol.
    #[arg(long, value_enum, default_value_t = Protocol::Paper)]
    pub protocol: Protocol,
    /// Run on data files other than the paper's (another size or SHA-256), which are refused
    /// otherwise; the results are marked as not the paper's.
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub allow_other_data: bool,
}

impl DataOptions {
    /// The data directory if it is a directory, else `../shared/data` when it exists, else an
    /// error saying where each data set comes from.
    pub fn dir(&self) -> Result<PathBuf, PaperError> {
        resolve_data_dir(self.data.as_ref())
    }

    /// The data directory ([`DataOptions::dir`]) with `set`'s files checked against the
    /// paper's ([`crate::paper_data::verify`], other files allowed with `allow_other_data`).
    pub fn verified(&self, set: DataSet) -> Result<PaperData, PaperError> {
        crate::paper_data::verify(&self.dir()?, set, self.allow_other_data)
    }
}

/// `data` if it is a directory, else `../shared/data` when it exists, else an error saying
/// where each data set comes from.
pub fn resolve_data_dir(data: Option<&PathBuf>) -> Result<PathBuf, PaperError> {
    match data {
        Some(p) if p.is_dir() => Ok(p.clone()),
        Some(p) => Err(PaperError::NoDataDir {
            given: Some(p.clone()),
        }),
        None => efa_data::default_data_dir().ok_or(PaperError::NoDataDir { given: None }),
    }
}

/// The first value of `v` that occurs a second time (a repeated `--k` or `--seeds` entry),
/// in O(n log n).
pub fn first_repeat<T: Ord + Copy>(v: &[T]) -> Option<T> {
    let mut seen = std::collections::BTreeSet::new();
    v.iter().copied().find(|x| !seen.insert(*x))
}

/// A clap value parser from a setting's own check: parses the value, then applies `check`,
/// whose reason becomes clap's message (clap names the flag, the library the field).
pub fn parse_checked<T: std::str::FromStr>(
    s: &str,
    check: impl Fn(&T) -> Result<(), PaperError>,
) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    let v = s.parse::<T>().map_err(|e| e.to_string())?;
    match check(&v) {
        Ok(()) => Ok(v),
        Err(PaperError::Setting { reason, .. }) => Err(reason),
        Err(e) => Err(e.to_string()),
    }
}

/// A count that must be at least 1 (`field` names it in the error).
pub fn at_least_one(field: &'static str, v: usize) -> Result<(), PaperError> {
    if v == 0 {
        Err(PaperError::setting(field, v, "must be at least 1"))
    } else {
        Ok(())
    }
}
