//! The error type of efa-data: every failure names where it happened.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where in an input file a problem was found: file, 1-based line, field name and raw value.
#[derive(Clone, Debug, PartialEq)]
pub struct Location {
    /// The file read.
    pub file: PathBuf,
    /// 1-based line number (the header is line 1 for CSV files); 0 when the problem is not on
    /// one line (e.g. a row the file lacks).
    pub line: usize,
    /// Column name (or description) of the offending field; empty for whole-line or whole-file
    /// problems.
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

    /// A [`DataError::Parse`] about `file` as a whole (no line, no field), e.g. a row it lacks
    /// or a property of all its rows.
    pub fn in_file(file: &Path, reason: impl Into<String>) -> Self {
        DataError::parse(file, 0, "", "", reason)
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
                // `file:line: field `f` = "v": reason`; a whole-file problem (line 0, no
                // field) reads `file: reason`.
                write!(f, "{}", at.file.display())?;
                if at.line > 0 {
                    write!(f, ":{}", at.line)?;
                }
                if at.line > 0 || !at.field.is_empty() {
                    write!(f, ": field `{}`", at.field)?;
                    if !at.value.is_empty() {
                        write!(f, " = {:?}", at.value)?;
                    }
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

/// Parses a real-valued field for training: the text must be a number whose value is finite in
/// the training dtype, i.e. `x` parses as f64, `x` is not NaN or ±∞, and `x as f32` is finite
/// (|x| below f32's overflow threshold, ≈ 3.4028235e38 + half an f32 ulp). A value such as
/// `1e39` is finite in f64 but becomes +∞ once the model converts it to f32, so it is rejected
/// here, naming `file:line`, the field and the text. (Values tiny enough to round to 0 or to an
/// f32 subnormal are kept: they are finite in both dtypes.)
pub fn parse_real(file: &Path, line: usize, field: &str, raw: &str) -> Result<f64, DataError> {
    let v: f64 = parse_field(file, line, field, raw)?;
    if !v.is_finite() {
        return Err(DataError::parse(
            file,
            line,
            field,
            raw,
            "not a finite number (NaN and infinities are not data)",
        ));
    }
    if !(v as f32).is_finite() {
        return Err(DataError::parse(
            file,
            line,
            field,
            raw,
            format!(
                "{v:e} is finite in f64 but overflows f32 (largest {:e}), the dtype training uses",
                f32::MAX
            ),
        ));
    }
    Ok(v)
}
