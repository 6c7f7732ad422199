//! EFA models and factor-model baselines assembled from the efa crates: the tape
//! (`efa-tape`), the fused attention kernel (`efa-attn`, wrapped as a tape op in
//! [`ops::attention`]), exponential-family likelihoods (`efa-expfam`, wrapped in
//! [`ops::nll`]) and Adam (`efa-optim`); plus the training loop with early stopping and exact
//! evaluation ([`train`]) and the paper's experiments ([`experiments`]).

pub mod audit;
pub mod batch;
pub mod checkpoint;
pub mod efa;
pub mod experiments;
pub mod fm;
pub mod layers;
pub mod objective;

pub mod params;
pub mod train;
pub mod userdata;

pub use batch::{Samples, Targets};
pub use efa::{Direction, EfaConfig, Norm, Positions, ValueTable};
pub use fm::FmConfig;
pub use objective::Objective;
pub use params::Params;

use efa_num::Real;
use efa_tape::{Tape, Var};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;

/// Errors of model building, training and evaluation.
#[derive(Debug)]
pub enum ModelError {
    /// An impossible configuration (names the field).
    Config(String),
    /// A batch that does not fit the model (names the field and row).
    Batch(String),
    /// A parameter the model expects is not in the parameter set.
    MissingParam(String),
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
            ModelError::MissingParam(s) => write!(f, "missing parameter `{s}`"),
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

/// Either model family, as one serialisable value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelConfig {
    /// Exponential Family Attention.
    Efa(EfaConfig),
    /// Linear factor model.
    Fm(FmConfig),
}

impl ModelConfig {
    /// Checks for impossible shapes.
    pub fn validate(&self) -> Result<(), ModelError> {
        match self {
            ModelConfig::Efa(c) => c.validate(),
            ModelConfig::Fm(c) => c.validate(),
        }
    }

    /// Creates seeded parameters.
    pub fn init<T: Real>(&self, seed: u64) -> Params<T> {
        match self {
            ModelConfig::Efa(c) => c.init(seed),
            ModelConfig::Fm(c) => c.init(seed),
        }
    }

    /// η for a minibatch.
    pub fn forward<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &HashMap<String, Var>,
        batch: &Samples,
    ) -> Result<Var, ModelError> {
        match self {
            ModelConfig::Efa(c) => c.forward(tape, vars, batch),
            ModelConfig::Fm(c) => c.forward(tape, vars, batch),
        }
    }

    /// `"efa"` or `"fm"`.
    pub fn kind(&self) -> &'static str {
        match self {
            ModelConfig::Efa(_) => "efa",
            ModelConfig::Fm(_) => "fm",
        }
    }
}

/// Registers every parameter on a fresh tape and returns the name → variable map.
pub fn register<T: Real>(
    tape: &mut Tape<T>,
    params: &Params<T>,
) -> Result<HashMap<String, Var>, ModelError> {
    let mut vars = HashMap::with_capacity(params.len());
    for (name, value) in params.iter() {
        let v = tape.param(name, value.clone())?;
        vars.insert(name.to_string(), v);
    }
    Ok(vars)
}
