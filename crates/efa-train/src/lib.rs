//! Running EFA and factor models: everything between a model definition (`efa-model`) and an
//! experiment or command.
//!
//! * [`Evaluator`]: losses, gradients and predictions over fixed micro-batches summed in
//!   order, so results are bitwise independent of the thread count;
//! * [`fit`](mod@fit): minibatch Adam with per-epoch validation, Keras-3 early stopping with
//!   best-weight restore, checkpoints and bit-exact resume ([`resume`]); [`schedule`]: each
//!   epoch's minibatches and the optimizer a run starts with, which both of them replay;
//! * [`checkpoint`]: checkpoints and model files (safetensors with per-tensor CRC-32);
//!   [`fsio`]: atomic writes, checksums and the run lock of an output directory;
//! * [`run`]: the run directory — its layout, the model file's metadata, loading a saved model,
//!   resume checks, the result and timings files — and a training run from files to it;
//! * [`collective`]: the members of a multi-process job (MPI with the `mpi` feature);
//! * [`memory`]: the memory a job needs, estimated before anything is allocated;
//! * [`userdata`]: your own data (a TOML run configuration and CSV files);
//! * [`audit`]: finite-difference audits of whole models and of every fused op on their tapes;
//!   [`precision`]: every forward plan's digits in f32 and f64 against a double-double
//!   reference, with the project's error budgets.

#![warn(missing_docs)]

pub mod audit;
pub mod checkpoint;
pub mod collective;
mod error;
pub mod evaluator;
pub mod fit;
pub mod fsio;
pub mod history;
pub mod memory;
pub mod precision;
pub mod recipe;
pub mod resume;
pub mod run;
pub mod schedule;
pub mod threads;
pub mod userdata;

/// The optimizer's error, which [`TrainError::Optim`] carries as its source.
pub use efa_optim::OptimError;
pub use error::TrainError;
pub use evaluator::Evaluator;
pub use fit::{fit, FitOptions};
pub use history::{EarlyStopping, EpochLog, FitResult, Verdict};
pub use recipe::{Batching, TrainConfig};
pub use threads::Threads;

/// The evaluator, training loop, settings and checkpoints in one import:
/// `use efa_train::prelude::*;`.
pub mod prelude {
    pub use crate::checkpoint::{Checkpoint, CheckpointPolicy};
    pub use crate::evaluator::Evaluator;
    pub use crate::fit::{fit, FitOptions};
    pub use crate::history::{EpochLog, FitResult};
    pub use crate::recipe::{Batching, TrainConfig};
    pub use crate::run::{load_saved, Run, RunDir, RunInputs, RunOptions};
    pub use crate::TrainError;
}
