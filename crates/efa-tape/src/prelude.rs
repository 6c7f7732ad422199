//! The types a computation on the tape needs, in one import: `use efa_tape::prelude::*;`.
//!
//! The tape and its handles ([`Tape`], [`Var`], [`Grads`]), fused ops ([`FusedOp`],
//! [`CloneFusedOp`]), errors ([`TapeError`]), the scalar trait ([`Real`]) and the audit
//! options ([`AuditOptions`]). The model-level ops and their helper types are in
//! `efa_nn::prelude`.

pub use crate::audit::AuditOptions;
pub use crate::backward::Grads;
pub use crate::error::TapeError;
pub use crate::op::{CloneFusedOp, FusedOp};
pub use crate::tape::{Tape, Var};
pub use efa_num::Real;
