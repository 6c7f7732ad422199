//! The tape's error type.

use std::fmt;

/// An error from a tape operation: the op's name and a message naming the shapes (and the
/// index, where one is involved) that made the call invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TapeError {
    /// Name of the operation that failed (e.g. `"matmul"`).
    pub op: String,
    /// What went wrong, with shapes and indices.
    pub message: String,
}

impl TapeError {
    /// Builds an error for operation `op`.
    pub fn new(op: impl Into<String>, message: impl Into<String>) -> Self {
        TapeError {
            op: op.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for TapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.op, self.message)
    }
}

impl std::error::Error for TapeError {}

/// `Result` with [`TapeError`].
pub type Result<T, E = TapeError> = std::result::Result<T, E>;
