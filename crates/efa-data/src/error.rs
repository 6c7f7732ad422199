//! The error type of efa-data: every failure names where it happened.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where in an input file a problem was found: file, 1-based line, field name and raw value.
#[derive(Clone, Debug, PartialEq)]
pub struct Location {
    /// The file read.
    pub file: PathBuf,
    /// 1-based line number (the header is line 1 for CSV files).
    pub line: usize,
    /// Column name (or description) of the offending field; empty for whole-line problems.
    pub field: String,
    /// The raw text found, if any.
    pub value: String,
}

/// Errors raised by loaders, preprocessing and sample construction.
#[derive(Debug)]
pub enum DataError {
    /// A file could not be opened or read.
    Io {
        /// The file.
        file: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A malformed line or field.
    Parse {
        /// Where.
        at: Location,
        /// What was wrong.
        reason: String,
    },
    /// Input that parsed but cannot be used as the experiment requires (e.g. a missing day).
    Invalid(String),
}

impl DataError {
    /// An [`DataError::Invalid`] with the given message.
    pub fn invalid(msg: impl Into<String>) -> Self {
        DataError::Invalid(msg.into())
    }

    /// A [`DataError::Parse`] at `file:line`, field `field` holding `value`.
    pub fn parse(
        file: &Path,
        line: usize,
        field: &str,
        value: &str,
        reason: impl Into<String>,
    ) -> Self {
        DataError::Parse {
            at: Location {
                file: file.to_path_buf(),
                line,
                field: field.to_string(),
                value: value.to_string(),
            },
            reason: reason.into(),
        }
    }

    /// An [`DataError::Io`] for `file`.
    pub fn io(file: &Path, source: std::io::Error) -> Self {
        DataError::Io {
            file: file.to_path_buf(),
            source,
        }
    }
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataError::Io { file, source } => write!(f, "{}: {source}", file.display()),
            DataError::Parse { at, reason } => {
                write!(f, "{}:{}: field `{}`", at.file.display(), at.line, at.field)?;
                if !at.value.is_empty() {
                    write!(f, " = {:?}", at.value)?;
                }
                write!(f, ": {reason}")
            }
            DataError::Invalid(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for DataError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DataError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Reads a whole file to a string, mapping the error to [`DataError::Io`].
pub(crate) fn read_to_string(file: &Path) -> Result<String, DataError> {
    std::fs::read_to_string(file).map_err(|e| DataError::io(file, e))
}

/// Parses one field, or fails naming file, line, field and value.
pub(crate) fn parse_field<X: std::str::FromStr>(
    file: &Path,
    line: usize,
    field: &str,
    raw: &str,
) -> Result<X, DataError>
where
    X::Err: fmt::Display,
{
    raw.trim().parse::<X>().map_err(|e| {
        DataError::parse(
            file,
            line,
            field,
            raw,
            format!("cannot parse as {}: {e}", std::any::type_name::<X>()),
        )
    })
}
