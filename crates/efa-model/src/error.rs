//! Errors of model building and the forward pass: a configuration field, a size, a forward
//! plan, a batch or a parameter set that does not fit, each named.

use std::fmt;

/// An error of building a model or running its forward pass.
#[derive(Debug)]
pub enum ModelError {
    /// A configuration field out of range or inconsistent with another: its path below the
    /// model (`efa.layers`, `efa.continuous.sites`, `fm.items`) and why.
    Config {
        /// The field's path.
        field: String,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// The parameters would exceed [`crate::size::MAX_PARAM_VALUES`]: the tensor, its shape
    /// and the configuration field it comes from.
    Size(efa_nn::NnError),
    /// A forced forward plan does not apply to this model or batch.
    Plan {
        /// The plan's name.
        plan: &'static str,
        /// Why it does not apply.
        reason: String,
    },
    /// A batch that does not fit the model (names the field and row).
    Batch(String),
    /// The parameter set does not match the model's declaration (names the parameter).
    MissingParam(String),
    /// A parameter does not reach the loss (names it and the forward plan).
    Unused {
        /// The parameter.
        param: String,
        /// The plan that computed the loss.
        plan: &'static str,
    },
    /// A tape error (op and shapes).
    Tape(efa_tape::TapeError),
}

impl ModelError {
    /// A [`ModelError::Config`].
    pub fn config(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ModelError::Config {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Config { field, reason } => {
                write!(f, "model configuration field `{field}`: {reason}")
            }
            ModelError::Size(e) => write!(f, "model configuration: {e}"),
            ModelError::Plan { plan, reason } => {
                write!(f, "forward plan `{plan}` does not apply: {reason}")
            }
            ModelError::Batch(s) => write!(f, "invalid batch: {s}"),
            ModelError::MissingParam(s) => write!(f, "parameters do not match the model: {s}"),
            ModelError::Unused { param, plan } => write!(
                f,
                "parameter `{param}` does not reach the loss in forward plan `{plan}` (a \
                 disconnected parameter: a bug in the forward, or allow unused parameters \
                 explicitly)"
            ),
            ModelError::Tape(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ModelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ModelError::Size(e) => Some(e),
            ModelError::Tape(e) => Some(e),
            _ => None,
        }
    }
}

impl From<efa_tape::TapeError> for ModelError {
    fn from(e: efa_tape::TapeError) -> Self {
        ModelError::Tape(e)
    }
}

/// Declaration and layer errors keep their place among the model's errors: a tape error stays
/// [`ModelError::Tape`], a parameter set that does not match the declaration is
/// [`ModelError::MissingParam`], a size beyond the limit is [`ModelError::Size`].
impl From<efa_nn::NnError> for ModelError {
    fn from(e: efa_nn::NnError) -> Self {
        use efa_nn::NnError;
        match e {
            NnError::Tape(e) => ModelError::Tape(e),
            NnError::ParamMismatch { .. }
            | NnError::UndeclaredParams { .. }
            | NnError::MissingVar { .. } => ModelError::MissingParam(e.to_string()),
            NnError::TensorTooLarge { .. } | NnError::TotalTooLarge { .. } => ModelError::Size(e),
        }
    }
}
