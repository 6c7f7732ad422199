//! Errors of efa-optim: every one names the parameter or the byte offset involved.

use std::fmt;

/// What went wrong in an optimizer call.
#[derive(Clone, Debug, PartialEq)]
pub enum OptimError {
    /// A parameter was passed without a gradient.
    MissingGrad {
        /// Parameter name.
        name: String,
    },
    /// Gradient length differs from the parameter length.
    GradLength {
        /// Parameter name.
        name: String,
        /// Parameter length.
        value_len: usize,
        /// Gradient length.
        grad_len: usize,
    },
    /// The declared shape does not match the value's length.
    ShapeLength {
        /// Parameter name.
        name: String,
        /// Declared shape.
        shape: Vec<usize>,
        /// Value length.
        len: usize,
    },
    /// The shape differs from the one the optimizer state was created with.
    ShapeChanged {
        /// Parameter name.
        name: String,
        /// Shape recorded in the state.
        expected: Vec<usize>,
        /// Shape passed now.
        got: Vec<usize>,
    },
    /// A parameter the state does not know (state is created on the first step).
    UnknownParam {
        /// Parameter name.
        name: String,
    },
    /// The same name passed twice in one step.
    DuplicateParam {
        /// Parameter name.
        name: String,
    },
    /// An array that is not contiguous in memory.
    NotContiguous {
        /// Parameter name.
        name: String,
    },
    /// An invalid hyper-parameter.
    BadConfig(String),
    /// A saved state that cannot be decoded.
    Decode {
        /// Byte offset where decoding failed.
        offset: usize,
        /// The field being read.
        field: String,
        /// Why.
        reason: String,
    },
}

impl fmt::Display for OptimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptimError::MissingGrad { name } => write!(f, "parameter `{name}` has no gradient"),
            OptimError::GradLength {
                name,
                value_len,
                grad_len,
            } => {
                write!(
                    f,
                    "parameter `{name}`: {value_len} values but gradient has {grad_len}"
                )
            }
            OptimError::ShapeLength { name, shape, len } => {
                write!(
                    f,
                    "parameter `{name}`: shape {shape:?} does not hold {len} values"
                )
            }
            OptimError::ShapeChanged {
                name,
                expected,
                got,
            } => {
                write!(f, "parameter `{name}`: shape changed from {expected:?} to {got:?} since the state was created")
            }
            OptimError::UnknownParam { name } => {
                write!(f, "parameter `{name}` is not in the optimizer state")
            }
            OptimError::DuplicateParam { name } => write!(f, "parameter `{name}` passed twice"),
            OptimError::NotContiguous { name } => {
                write!(f, "parameter `{name}` is not contiguous in memory")
            }
            OptimError::BadConfig(m) => write!(f, "bad optimizer config: {m}"),
            OptimError::Decode {
                offset,
                field,
                reason,
            } => {
                write!(
                    f,
                    "optimizer state, byte {offset}, field `{field}`: {reason}"
                )
            }
        }
    }
}

impl std::error::Error for OptimError {}
