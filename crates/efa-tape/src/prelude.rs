//! The types a model on the tape needs, in one import: `use efa_tape::prelude::*;`.
//!
//! The tape and its handles ([`Tape`], [`Var`], [`Grads`]), fused ops ([`FusedOp`],
//! [`CloneFusedOp`]), errors ([`TapeError`]), the scalar trait ([`Real`]), the op helper types
//! ([`Part`], [`NONE`], [`Mask`], [`Attention`], [`AttnVars`]), the exponential-family selector the nll and link
//! ops take ([`Family`]) and the audit options ([`AuditOptions`]).

pub use crate::audit::AuditOptions;
pub use crate::backward::Grads;
pub use crate::error::TapeError;
pub use crate::ops::attention::{Attention, AttnVars, Mask};
pub use crate::ops::fused::{CloneFusedOp, FusedOp};
pub use crate::ops::gather::{Part, NONE};
pub use crate::tape::{Tape, Var};
pub use efa_expfam::Family;
pub use efa_num::Real;
