//! Errors of model building, training and evaluation.

use std::fmt;

/// Errors of model building, training and evaluation.
#[derive(Debug)]
pub enum ModelError {
    /// An impossible configuration (names the field).
    Config(String),
    /// A batch that does not fit the model (names the field and row).
    Batch(String),
    /// The parameter set does not match the model's declaration (names the parameter).
    MissingParam(String),
    /// A parameter does not reach the loss (names it and the forward plan).
    Unused(String),
    /// A tape error (op and shapes).
    Tape(efa_tape::TapeError),
    /// An optimizer error (names the parameter).
    Optim(String),
    /// Training produced a non-finite loss.
    NonFinite(String),
    /// A model or checkpoint file could not be read or written (names the file).
    Io(String),
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Config(s) => write!(f, "invalid model configuration: {s}"),
            ModelError::Batch(s) => write!(f, "invalid batch: {s}"),
            ModelError::MissingParam(s) => write!(f, "parameters do not match the model: {s}"),
            ModelError::Unused(s) => write!(f, "{s}"),
            ModelError::Tape(e) => write!(f, "{e}"),
            ModelError::Optim(s) => write!(f, "optimizer: {s}"),
            ModelError::NonFinite(s) => write!(f, "non-finite value: {s}"),
            ModelError::Io(s) => write!(f, "{s}"),
        }
    }
}

impl std::error::Error for ModelError {}

impl From<efa_tape::TapeError> for ModelError {
    fn from(e: efa_tape::TapeError) -> Self {
        ModelError::Tape(e)
    }
}

/// Declaration and layer errors keep their place among the model's errors: a tape error stays
/// [`ModelError::Tape`], a parameter set that does not match the declaration is
/// [`ModelError::MissingParam`], a size beyond a limit is [`ModelError::Config`].
impl From<efa_nn::NnError> for ModelError {
    fn from(e: efa_nn::NnError) -> Self {
        use efa_nn::NnError;
        match e {
            NnError::Tape(e) => ModelError::Tape(e),
            NnError::ParamMismatch { .. }
            | NnError::UndeclaredParams { .. }
            | NnError::MissingVar { .. } => ModelError::MissingParam(e.to_string()),
            NnError::TensorTooLarge { .. } | NnError::TotalTooLarge { .. } => {
                ModelError::Config(e.to_string())
            }
        }
    }
}
