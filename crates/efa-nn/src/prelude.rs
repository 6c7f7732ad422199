//! What a model on the tape needs, in one import: `use efa_nn::prelude::*;`.
//!
//! The tape's own types ([`Tape`], [`Var`], [`Grads`], [`FusedOp`], [`CloneFusedOp`],
//! [`TapeError`], [`AuditOptions`], [`Real`]); the fused ops as methods ([`TapeNn`]) with
//! their argument types ([`Part`], [`NONE`], [`Attention`], [`Mask`], [`Par`], [`AttnVars`],
//! [`PostNormBlock`], [`BlockQkv`], [`BlockTail`], [`SharedContextAttention`]) and the
//! exponential-family selector the nll and link ops take ([`Family`]); parameters ([`Params`], [`ParamSink`], [`InitKind`],
//! [`Initialiser`], [`Registrar`], [`Layout`], [`Counter`], [`ParamCount`]); the layers
//! ([`DenseVars`], [`MlpVars`], [`LayerNormVars`], [`AttentionVars`]); and [`NnError`].

pub use crate::layers::{AttentionVars, DenseVars, LayerNormVars, MlpVars};
pub use crate::ops::attention::{Attention, AttnVars, Mask, Par};
pub use crate::ops::block::{BlockQkv, BlockTail, PostNormBlock};
pub use crate::ops::gather::{Part, NONE};
pub use crate::ops::shared_attention::SharedContextAttention;
pub use crate::params::{
    Counter, InitKind, Initialiser, Layout, ParamCount, ParamSink, Params, Registrar,
};
pub use crate::{NnError, TapeNn};
pub use efa_expfam::Family;
pub use efa_tape::prelude::{
    AuditOptions, CloneFusedOp, FusedOp, Grads, Real, Tape, TapeError, Var,
};
