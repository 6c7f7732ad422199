//! [`NnError`]: what can go wrong when a model declares its parameters ([`crate::params`]) or
//! applies its layers ([`crate::layers`]).

use efa_tape::TapeError;
use std::fmt;

/// An error of a parameter declaration or of a layer on the tape, naming the tensor, its
/// shape and (for sizes) the configuration field it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NnError {
    /// A tape op failed (names the op and the shapes).
    Tape(TapeError),
    /// A declared parameter does not match the parameter set at its position in declaration
    /// order (a [`Registrar`](crate::params::Registrar) checks name and shape).
    ParamMismatch {
        /// Position in declaration order.
        index: usize,
        /// The declared name.
        name: String,
        /// The declared shape.
        shape: Vec<usize>,
        /// Name and shape the set holds at `index`; `None` when it holds only `index` tensors.
        found: Option<(String, Vec<usize>)>,
    },
    /// The parameter set holds tensors the declaration does not name.
    UndeclaredParams {
        /// Their names, in the set's order.
        names: Vec<String>,
    },
    /// Fewer variables were given than parameters are declared
    /// ([`FromVars`](crate::params::FromVars)).
    MissingVar {
        /// Position of the declaration without a variable.
        index: usize,
        /// The declared name.
        name: String,
        /// The declared shape.
        shape: Vec<usize>,
        /// Variables given.
        given: usize,
    },
    /// One declared tensor has more elements `Π shape` than the limit (or than `u64::MAX`).
    TensorTooLarge {
        /// The configuration field the tensor comes from.
        field: String,
        /// The tensor's name.
        name: String,
        /// Its shape.
        shape: Vec<usize>,
        /// The most elements allowed.
        limit: u64,
    },
    /// The running total of elements passes the limit at this tensor.
    TotalTooLarge {
        /// The configuration field of the tensor that passes the limit.
        field: String,
        /// The tensor's name.
        name: String,
        /// Its shape.
        shape: Vec<usize>,
        /// The most elements allowed in all tensors together.
        limit: u64,
    },
}

impl fmt::Display for NnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NnError::Tape(e) => write!(f, "{e}"),
            NnError::ParamMismatch {
                index,
                name,
                shape,
                found: None,
            } => write!(
                f,
                "`{name}` {shape:?} (parameter {index}; the parameter set has only {index})"
            ),
            NnError::ParamMismatch {
                index,
                name,
                shape,
                found: Some((have, have_shape)),
            } => write!(
                f,
                "the model declares `{name}` {shape:?} as parameter {index}, the parameter set \
                 has `{have}` {have_shape:?} there"
            ),
            NnError::UndeclaredParams { names } => write!(
                f,
                "the parameter set has {} tensor(s) the model does not declare: {}",
                names.len(),
                names.join(", ")
            ),
            NnError::MissingVar {
                index,
                name,
                shape,
                given,
            } => write!(
                f,
                "`{name}` {shape:?} (parameter {index}; only {given} variables given)"
            ),
            NnError::TensorTooLarge {
                field,
                name,
                shape,
                limit,
            } => write!(
                f,
                "field {field}: parameter `{name}` of shape {shape:?} exceeds the limit of \
                 {limit} elements"
            ),
            NnError::TotalTooLarge { field, limit, .. } => write!(
                f,
                "field {field}: the total parameter count exceeds the limit of {limit} elements"
            ),
        }
    }
}

impl std::error::Error for NnError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NnError::Tape(e) => Some(e),
            _ => None,
        }
    }
}

impl From<TapeError> for NnError {
    fn from(e: TapeError) -> Self {
        NnError::Tape(e)
    }
}
