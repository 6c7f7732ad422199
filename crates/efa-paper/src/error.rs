//! Errors of the paper's experiments: settings out of range (named by their field), missing
//! or malformed data files (named by file, line and field), and training failures.

use std::fmt;
use std::path::PathBuf;

/// An error of an experiment.
#[derive(Debug)]
pub enum PaperError {
    /// An experiment option or run setting outside its range. `field` is the option's name as
    /// the options structs spell it (`lag`, `layers`, `k`, `seeds`, `users`, `epochs`,
    /// `fm_epochs`, `spread_seeds`); a command-line tool maps it to its flag.
    Setting {
        /// The option.
        field: &'static str,
        /// The value given, as written.
        value: String,
        /// What is allowed.
        reason: String,
    },
    /// A data file an experiment reads does not exist.
    MissingData {
        /// The file looked for.
        path: PathBuf,
        /// Where the data set comes from and how it is prepared.
        how: String,
    },
    /// A data file is not the one the paper used (another size or SHA-256): its results would
    /// not be the paper's. Option `allow_other_data` runs on it anyway and marks the results.
    OtherData(efa_data::fingerprint::Mismatch),
    /// No data directory: the one given is not a directory, or none was given and the default
    /// `../shared/data` does not exist.
    NoDataDir {
        /// The directory given, if any.
        given: Option<PathBuf>,
    },
    /// A data file could not be read or parsed (names the file, line and field).
    Data(efa_data::DataError),
    /// Samples built from loaded data are inconsistent (names the split and sample).
    Samples(String),
    /// Building a model failed.
    Model(efa_model::ModelError),
    /// Training or evaluating a model failed.
    Train(efa_train::TrainError),
    /// A run of a queue did not finish (no error was recorded: an internal invariant).
    Unfinished {
        /// Its index in the queue.
        index: usize,
    },
}

impl PaperError {
    /// A [`PaperError::Setting`] for `field` holding `value`.
    pub fn setting(
        field: &'static str,
        value: impl fmt::Display,
        reason: impl Into<String>,
    ) -> Self {
        PaperError::Setting {
            field,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// What a file other than the paper's means, for [`PaperError::OtherData`].
pub const NOT_THE_PAPERS: &str =
    "It is not the file the paper used, so the results would not be the paper's";

/// Where each data set comes from, for the error without a data directory.
const DATA_SOURCES: &str = "DIR/movielens/u.data (GroupLens MovieLens 100K), \
     DIR/instacart/{items,baskets_train,baskets_test}.csv (Kaggle Instacart Market Basket \
     Analysis, prepared as in docs/paper.md §5.1) and DIR/temperature/{us_cities_fall,cities}.csv \
     (University of Dayton / Kaggle daily city temperatures)";

impl fmt::Display for PaperError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PaperError::Setting {
                field,
                value,
                reason,
            } => write!(f, "setting `{field}` = {value}: {reason}"),
            PaperError::MissingData { path, how } => {
                write!(f, "{} does not exist. {how}", path.display())
            }
            PaperError::OtherData(m) => write!(
                f,
                "{m}. {NOT_THE_PAPERS}; set `allow_other_data` to run on it anyway, with the \
                 results marked as not the paper's"
            ),
            PaperError::NoDataDir { given: Some(p) } => {
                write!(f, "data directory {}: not a directory", p.display())
            }
            PaperError::NoDataDir { given: None } => write!(
                f,
                "no data directory: ../shared/data does not exist here; give a data directory \
                 DIR with {DATA_SOURCES}"
            ),
            PaperError::Data(e) => write!(f, "{e}"),
            PaperError::Samples(s) => write!(f, "invalid samples: {s}"),
            PaperError::Model(e) => write!(f, "{e}"),
            PaperError::Train(e) => write!(f, "{e}"),
            PaperError::Unfinished { index } => {
                write!(f, "run {index} of the queue did not finish")
            }
        }
    }
}

impl std::error::Error for PaperError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PaperError::Data(e) => Some(e),
            PaperError::Model(e) => Some(e),
            PaperError::Train(e) => Some(e),
            _ => None,
        }
    }
}

impl From<efa_data::DataError> for PaperError {
    fn from(e: efa_data::DataError) -> Self {
        PaperError::Data(e)
    }
}

impl From<efa_model::ModelError> for PaperError {
    fn from(e: efa_model::ModelError) -> Self {
        PaperError::Model(e)
    }
}

impl From<efa_train::TrainError> for PaperError {
    fn from(e: efa_train::TrainError) -> Self {
        PaperError::Train(e)
    }
}
