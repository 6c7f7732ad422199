//! The paper's data files, fingerprinted: each file's path in the data directory, size and
//! SHA-256 as the paper's runs read them. An experiment refuses any other file (another
//! MovieLens release, a CSV with its columns swapped, a re-prepared Instacart set) with an
//! error naming the file and what differs, unless `allow_other_data` is set; then it runs and
//! its results are marked as not the paper's ([`PaperData::other`]).

use crate::PaperError;
pub use efa_data::fingerprint::{Differs, Fingerprint, Mismatch};
use std::path::{Path, PathBuf};

/// MovieLens 100K (GroupLens `ml-100k.zip`): `u.data`.
pub const MOVIELENS: [Fingerprint; 1] = [Fingerprint {
    path: "movielens/u.data",
    size: 1_979_173,
    sha256: "06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490",
}];

/// The prepared Instacart baskets (docs/paper.md §5.1).
pub const INSTACART: [Fingerprint; 3] = [
    Fingerprint {
        path: "instacart/items.csv",
        size: 1_885,
        sha256: "2a7099a0ed8753003d1fe513b2c8c02ae46905d98fba26105171beb483360384",
    },
    Fingerprint {
        path: "instacart/baskets_train.csv",
        size: 3_486_363,
        sha256: "3278d6507c533a27f655c151fae6169b8c66b9eb4a63e30b8f99cbb8795484b9",
    },
    Fingerprint {
        path: "instacart/baskets_test.csv",
        size: 202_757,
        sha256: "2ae63357cc4b1101d261f5c91cc3ad78d928ffe3e01657cfb4407baf908df4bd",
    },
];

/// The U.S. city temperatures (docs/paper.md §6.1, `temperature/SOURCE.md`).
pub const TEMPERATURE: [Fingerprint; 2] = [
    Fingerprint {
        path: "temperature/us_cities_fall.csv",
        size: 3_481_575,
        sha256: "949a1350a625cd49a036d9ddf467b9695aad2237f9fb186b4c386d81a8b3f471",
    },
    Fingerprint {
        path: "temperature/cities.csv",
        size: 1_819,
        sha256: "de1ca00e6ed05a2d88a3ccbde2533f11ddad7d3edbca612e286caad80d364e54",
    },
];

/// A data set of the paper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataSet {
    /// MovieLens 100K (`movielens/u.data`).
    Movielens,
    /// Instacart baskets (`instacart/{items,baskets_train,baskets_test}.csv`).
    Instacart,
    /// U.S. city temperatures (`temperature/{us_cities_fall,cities}.csv`).
    Temperature,
}

impl DataSet {
    /// The fingerprints of the set's files.
    pub fn files(self) -> &'static [Fingerprint] {
        match self {
            DataSet::Movielens => &MOVIELENS,
            DataSet::Instacart => &INSTACART,
            DataSet::Temperature => &TEMPERATURE,
        }
    }

    /// Where the set comes from and how it is prepared (for a missing file).
    pub fn how(self) -> &'static str {
        match self {
            DataSet::Movielens => {
                "Download MovieLens 100K from GroupLens \
                 (https://grouplens.org/datasets/movielens/100k/, ml-100k.zip) and put its \
                 u.data there."
            }
            DataSet::Instacart => {
                "Download the Kaggle \"Instacart Market Basket Analysis\" files and prepare \
                 items.csv and baskets_{train,test}.csv as described in docs/paper.md §5.1 (items \
                 with ≥ 50,000 rows, orders with ≥ 10 of them)."
            }
            DataSet::Temperature => {
                "Get the University of Dayton daily average temperature archive (Kaggle \
                 \"Daily Temperature of Major Cities\", city_temperature.csv) and prepare \
                 us_cities_fall.csv and cities.csv as in docs/paper.md §6.1 (see SOURCE.md beside \
                 the data)."
            }
        }
    }
}

/// A data directory whose files were checked against the paper's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PaperData {
    /// The data directory.
    pub dir: PathBuf,
    /// The files that differ from the paper's (allowed by `allow_other_data`); empty when
    /// every file is the paper's.
    pub other: Vec<Mismatch>,
}

impl PaperData {
    /// Whether every file is the one the paper used.
    pub fn is_papers(&self) -> bool {
        self.other.is_empty()
    }
}

/// Checks `set`'s files in `dir` against the paper's fingerprints: a missing file is
/// [`PaperError::MissingData`] (saying where the set comes from); a file that differs is
/// [`PaperError::OtherData`] naming it and what differs, unless `allow_other` (then it is
/// listed in [`PaperData::other`]).
pub fn verify(dir: &Path, set: DataSet, allow_other: bool) -> Result<PaperData, PaperError> {
    let mut other = Vec::new();
    for fp in set.files() {
        let Some(m) = fp.check(dir)? else { continue };
        match m.differs {
            Differs::Missing => {
                return Err(PaperError::MissingData {
                    path: m.file,
                    how: set.how().into(),
                })
            }
            _ if !allow_other => return Err(PaperError::OtherData(m)),
            _ => other.push(m),
        }
    }
    Ok(PaperData {
        dir: dir.to_path_buf(),
        other,
    })
}
