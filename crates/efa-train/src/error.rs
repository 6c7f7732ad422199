//! Errors of running a model: each variant says what went wrong and where (the file, field,
//! tensor or sample), so a command-line tool can show it as it is.

use efa_model::ModelError;
use std::fmt;
use std::path::PathBuf;

/// An error of training, evaluation, checkpoints, model files or user data.
#[derive(Debug)]
pub enum TrainError {
    /// The model rejected its configuration, a batch or its parameters.
    Model(ModelError),
    /// A data file could not be read or used (names the file, line and field).
    Data(efa_data::DataError),
    /// A run configuration or training setting is invalid: the file it came from (if any),
    /// the field and why.
    Config {
        /// The configuration file, when the setting came from one.
        file: Option<PathBuf>,
        /// The field, e.g. `train.lr` or `family.s2`.
        field: String,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// A configuration file could not be parsed (syntax, an unknown key, a wrong type): the
    /// file and the parser's message, which names the key and line.
    Parse {
        /// The file.
        file: PathBuf,
        /// What the parser found.
        message: String,
    },
    /// A checkpoint cannot continue this run: what differs or is inconsistent.
    Resume(String),
    /// The checkpoint of a run directory cannot continue this run ([`crate::run`]): the
    /// checkpoint file and why (a [`TrainError::Resume`] or an error reading it).
    ResumeFrom {
        /// The checkpoint file.
        checkpoint: PathBuf,
        /// Why it cannot continue this run.
        source: Box<TrainError>,
    },
    /// A checkpoint was written with another run configuration than this run's.
    ConfigDiffers {
        /// The checkpoint file.
        checkpoint: PathBuf,
        /// The configuration file of this run, when it came from one.
        config: Option<PathBuf>,
    },
    /// A model or checkpoint file lacks a metadata entry (e.g. `efa.config`, the run
    /// configuration of a model file).
    MissingMetadata {
        /// The file.
        file: PathBuf,
        /// The metadata key.
        key: String,
    },
    /// A model or checkpoint file's metadata entry cannot be used: the file, the key, the
    /// configuration field at fault (when the entry parsed) and why.
    Metadata {
        /// The file.
        file: PathBuf,
        /// The metadata key.
        key: String,
        /// The field inside the entry, e.g. `model.efa.items`.
        field: Option<String>,
        /// What is wrong.
        reason: String,
    },
    /// The job would not fit in the available memory (the message gives the estimate and
    /// what dominates it).
    Memory {
        /// Bytes the job needs (estimate).
        need: u64,
        /// Bytes available.
        available: u64,
        /// The estimate's parts, what dominates it, and where the available figure comes
        /// from.
        detail: String,
    },
    /// A model file or checkpoint is damaged or does not fit (names the file, tensor and
    /// why).
    File {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Reading or writing a file failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Another process holds the output directory's run lock.
    Locked {
        /// The lock file.
        path: PathBuf,
        /// Who holds it (`process 1234`, or `another process`).
        holder: String,
    },
    /// Training produced a non-finite value (names the epoch, batch and, where known, the
    /// sample).
    NonFinite(String),
    /// The optimizer refused its configuration, a checkpoint's state or a step.
    Optim {
        /// What was being done: `configuration`, `checkpoint optimizer state` or `step`.
        during: &'static str,
        /// The optimizer's own error (it names the parameter, its shape and lengths).
        source: efa_optim::OptimError,
    },
    /// A worker thread pool could not be started.
    Threads(String),
    /// The multi-process transport (MPI, feature `mpi`) could not start or refused a
    /// message: what it said.
    Transport(String),
    /// Another member of a multi-process job failed or sent something unreadable.
    Rank {
        /// The member's rank.
        rank: usize,
        /// Its error.
        message: String,
    },
}

impl TrainError {
    /// A [`TrainError::Config`] without a file.
    pub fn config(field: impl Into<String>, reason: impl Into<String>) -> Self {
        TrainError::Config {
            file: None,
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// A [`TrainError::File`].
    pub fn file(file: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        TrainError::File {
            file: file.into(),
            reason: reason.into(),
        }
    }

    /// A [`TrainError::Io`].
    pub fn io(path: impl Into<PathBuf>, what: &'static str, source: std::io::Error) -> Self {
        TrainError::Io {
            path: path.into(),
            what,
            source,
        }
    }

    /// This error as coming from configuration file `file`: a [`TrainError::Config`] without
    /// a file, or a model configuration error (its field below `model.`), gets it; others
    /// are unchanged.
    pub fn in_file(self, file: &std::path::Path) -> Self {
        match self {
            TrainError::Config {
                file: None,
                field,
                reason,
            } => TrainError::Config {
                file: Some(file.to_path_buf()),
                field,
                reason,
            },
            TrainError::Model(ModelError::Config { field, reason }) => TrainError::Config {
                file: Some(file.to_path_buf()),
                field: format!("model.{field}"),
                reason,
            },
            TrainError::Model(ModelError::Size(e)) => TrainError::Config {
                file: Some(file.to_path_buf()),
                field: "model".into(),
                reason: size_reason(&e),
            },
            e => e,
        }
    }
}

/// What a size refusal says inside a configuration file's error: the tensor, its shape and
/// the fields behind it.
fn size_reason(e: &efa_nn::NnError) -> String {
    use efa_nn::NnError;
    match e {
        NnError::TensorTooLarge {
            field,
            name,
            shape,
            limit,
        } => format!(
            "parameter `{name}` of shape {shape:?} (from {field}) has more than {limit} values"
        ),
        NnError::TotalTooLarge {
            field,
            name,
            shape,
            limit,
        } => format!(
            "parameter `{name}` of shape {shape:?} (from {field}) brings the model beyond \
             {limit} parameter values"
        ),
        e => e.to_string(),
    }
}

impl fmt::Display for TrainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrainError::Model(e) => write!(f, "{e}"),
            TrainError::Data(e) => write!(f, "{e}"),
            TrainError::Config {
                file,
                field,
                reason,
            } => {
                if let Some(file) = file {
                    write!(f, "{}: ", file.display())?;
                }
                write!(f, "field `{field}`: {reason}")
            }
            TrainError::Parse { file, message } => write!(f, "{}: {message}", file.display()),
            TrainError::Resume(s) => write!(f, "cannot resume: {s}"),
            TrainError::ResumeFrom { checkpoint, source } => {
                write!(f, "{}: {source}", checkpoint.display())
            }
            TrainError::ConfigDiffers { checkpoint, config } => {
                write!(
                    f,
                    "{}: the checkpoint was written with a different configuration than ",
                    checkpoint.display()
                )?;
                match config {
                    Some(c) => write!(f, "{}", c.display()),
                    None => write!(f, "this run's"),
                }
            }
            TrainError::MissingMetadata { file, key } => write!(
                f,
                "{}: metadata `{key}` is missing (not written by efa train?)",
                file.display()
            ),
            TrainError::Metadata {
                file,
                key,
                field,
                reason,
            } => {
                write!(f, "{}: metadata `{key}`: ", file.display())?;
                if let Some(field) = field {
                    write!(f, "field `{field}`: ")?;
                }
                write!(f, "{reason}")
            }
            TrainError::Memory { detail, .. } => write!(f, "not enough memory: {detail}"),
            TrainError::File { file, reason } => write!(f, "{}: {reason}", file.display()),
            TrainError::Io { path, what, source } => {
                write!(f, "{}: {what}: {source}", path.display())
            }
            TrainError::Locked { path, holder } => write!(
                f,
                "{}: the output directory is in use by {holder} (another training run); wait \
                 for it to end or choose another output directory",
                path.display()
            ),
            TrainError::NonFinite(s) => write!(f, "non-finite value: {s}"),
            TrainError::Optim { during, source } => write!(f, "optimizer ({during}): {source}"),
            TrainError::Threads(s) => write!(f, "cannot start the worker threads: {s}"),
            TrainError::Transport(s) => write!(f, "{s}"),
            TrainError::Rank { rank, message } => write!(f, "rank {rank}: {message}"),
        }
    }
}

impl std::error::Error for TrainError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TrainError::Model(e) => Some(e),
            TrainError::Data(e) => Some(e),
            TrainError::Io { source, .. } => Some(source),
            TrainError::ResumeFrom { source, .. } => Some(source.as_ref()),
            TrainError::Optim { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<ModelError> for TrainError {
    fn from(e: ModelError) -> Self {
        TrainError::Model(e)
    }
}

impl From<efa_data::DataError> for TrainError {
    fn from(e: efa_data::DataError) -> Self {
        TrainError::Data(e)
    }
}

impl From<efa_tape::TapeError> for TrainError {
    fn from(e: efa_tape::TapeError) -> Self {
        TrainError::Model(ModelError::Tape(e))
    }
}
