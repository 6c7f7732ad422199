//! efa: Exponential Family Attention on the CPU.
//!
//! This root crate re-exports the member crates so that `efa::tape`, `efa::attn`, … are one
//! import away, and gathers their preludes in [`prelude`].
//!
//! | crate | what |
//! |---|---|
//! | [`num`] | the `Real` trait (f32, f64), stable scalar functions, SIMD row kernels |
//! | [`tape`] | reverse-mode autodiff tape: primitive ops, the `FusedOp` trait, gradients, audits |
//! | [`nn`] | building blocks on the tape: fused linear, gather-sum, attention, nll, links and post-norm block ops (`TapeNn`), parameter declaration, layers |
//! | [`attn`] | the fused masked-softmax attention kernel, forward and backward, and its naive reference |
//! | [`expfam`] | exponential families: A, ∇A, ∇²A, t, log h, stable nll, links, sampling |
//! | [`optim`] | Adam / AdamW, SGD, clipping, schedules, bit-exact state |
//! | [`check`] | finite-difference audits with per-element reports |
//! | [`data`] | the paper's data sets, their splits, the user CSV layout |
//! | [`model`] | EFA and factor-model definitions, objectives, batches, forward plans |
//! | [`train`] | evaluator, fit with early stopping, checkpoints and model files, resume, user data, whole-model audits |
//! | [`paper`] | the paper's experiments and the scheduler that runs them |
//!
//! ```
//! use efa::prelude::*;
//! // A two-parameter tape: loss = Σ (x·W)², ∂loss/∂W = 2·xᵀ·(x·W).
//! let mut t = Tape::<f64>::new();
//! let w = t.param("w", ndarray::array![[1.0], [2.0]].into_dyn()).unwrap();
//! let x = t.constant(ndarray::array![[3.0, 4.0]].into_dyn());
//! let y = t.matmul(x, w, false, false).unwrap(); // 3 + 8 = 11
//! let l = t.square(y).and_then(|s| t.sum_all(s)).unwrap();
//! let g = t.backward(l).unwrap();
//! assert_eq!(g.param("w").unwrap(), &ndarray::array![[66.0], [88.0]].into_dyn());
//! ```

#![warn(missing_docs)]

pub use efa_attn as attn;
pub use efa_check as check;
pub use efa_data as data;
pub use efa_expfam as expfam;
pub use efa_model as model;
pub use efa_nn as nn;
pub use efa_num as num;
pub use efa_optim as optim;
pub use efa_paper as paper;
pub use efa_tape as tape;
pub use efa_train as train;

/// The tape and its building blocks, the attention arguments, families, optimizers and models
/// in one import.
pub mod prelude {
    pub use efa_attn::{Attention, Mask};
    pub use efa_expfam::{Eval, Family};
    pub use efa_model::{
        EfaConfig, FmConfig, ForwardPlan, ModelConfig, Objective, Samples, Targets,
    };
    pub use efa_nn::ops::attention::AttnVars;
    pub use efa_nn::ops::gather::{Part, NONE};
    pub use efa_nn::params::Params;
    pub use efa_nn::{NnError, ParamSink, TapeNn};
    pub use efa_num::Real;
    pub use efa_optim::{Adam, AdamConfig, Param};
    pub use efa_paper::{Experiment, ExperimentOptions, RunSettings};
    pub use efa_tape::{FusedOp, Grads, Tape, TapeError, Var};
    pub use efa_train::{fit, Evaluator, FitOptions, Threads, TrainConfig, TrainError};
}
