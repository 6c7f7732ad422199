//! Reverse-mode automatic differentiation for efa (DESIGN §2).
//!
//! A [`Tape`] is an arena of nodes in creation order that the user owns and drops. Ops append
//! nodes and return [`Var`] handles (a `Copy` index checked against its tape). Gradients come
//! from [`Tape::backward`] (one-element outputs) or [`Tape::backward_with`] (vector-Jacobian
//! products `cᵀ·J`), both one reverse sweep over the arena accumulating with `+=`. Every node's
//! gradient is kept ([`Grads::wrt`]); named parameters are listed by [`Grads::params`].
//!
//! Primitive ops form a closed enum; fused ops plug in through [`FusedOp`], whose backward is
//! mandatory. Everything is generic over [`efa_num::Real`] (f32 for speed, f64 for audits).
//! [`audit()`] and friends check gradients against finite differences through `efa-check`.
//!
//! ```
//! use efa_tape::Tape;
//! use ndarray::array;
//! let mut t = Tape::<f64>::new();
//! let w = t.param("w", array![[1.0, 2.0], [3.0, 4.0]].into_dyn()).unwrap();
//! let x = t.constant(array![[1.0, 1.0]].into_dyn());
//! let y = t.matmul(x, w, false, false).unwrap(); // [1, 2] = [[4, 6]]
//! let l = t.sum_all(y).unwrap();
//! let g = t.backward(l).unwrap();
//! assert_eq!(g.param("w").unwrap(), &array![[1.0, 1.0], [1.0, 1.0]].into_dyn());
//! ```

mod anomaly;
pub mod audit;
mod backward;
mod broadcast;
pub mod error;
pub mod ops;
pub mod stats;
mod tape;
#[cfg(test)]
mod testutil;

pub use audit::{audit, audit_vjp, audit_vjp_linearity, AuditOptions};
pub use backward::Grads;
pub use efa_check;
pub use error::{Result, TapeError};
pub use ops::fused::FusedOp;
pub use stats::{flops, reset_flops};
pub use tape::{Tape, Var};
