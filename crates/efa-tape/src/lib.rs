//! Reverse-mode automatic differentiation for efa (docs/design.md §2).
//!
//! A [`Tape`] is an arena of nodes in creation order that the user owns and drops. Ops append
//! nodes and return [`Var`] handles (a `Copy` index checked against its tape). Gradients come
//! from [`Tape::backward`] (one-element outputs) or [`Tape::backward_with`] (vector-Jacobian
//! products `cᵀ·J`), both one reverse sweep over the arena accumulating with `+=`. Every node's
//! gradient is kept ([`Grads::wrt`]); named parameters are listed by [`Grads::params`].
//!
//! Primitive ops form a closed enum; fused ops plug in through [`FusedOp`] (recorded by
//! [`Tape::fused`]), whose backward is mandatory. The model-level fused ops (linear,
//! gather_sum, bag_sum, attention, nll, links, the post-norm block) live in the `efa-nn`
//! crate, beside the kernels they adapt. Everything is generic over [`Real`] (f32 for speed,
//! f64 for audits). `use efa_tape::prelude::*` brings the tape's types. [`audit()`],
//! [`audit_fused`] and [`Tape::audit_fused_nodes`] check gradients against finite
//! differences through `efa-check`.
//!
//! # Backward
//!
//! For a one-element output `l`, [`Tape::backward`] gives `∂l/∂v` for every node `v`; here
//! `l = Σ (x·W)`, so `∂l/∂W = xᵀ·1`:
//!
//! ```
//! use efa_tape::prelude::*;
//! use ndarray::array;
//! let mut t = Tape::<f64>::new();
//! let w = t.param("w", array![[1.0, 2.0], [3.0, 4.0]].into_dyn()).unwrap();
//! let x = t.constant(array![[1.0, 1.0]].into_dyn());
//! let y = t.matmul(x, w, false, false).unwrap(); // [1, 2] = [[4, 6]]
//! let l = t.sum_all(y).unwrap();
//! let g = t.backward(l).unwrap();
//! assert_eq!(g.param("w").unwrap(), &array![[1.0, 1.0], [1.0, 1.0]].into_dyn());
//! ```
//!
//! # Auditing a tape-built function
//!
//! [`audit()`] compares every claimed `∂l/∂θᵢ` with the central difference
//! `(l(θ + h·eᵢ) − l(θ − h·eᵢ)) / 2h`, `h = 10⁻⁶·max(1, |θᵢ|)`, and passes an element iff
//! `|analytic − numeric| ≤ 10⁻⁵ + 10⁻³·|numeric|`:
//!
//! ```
//! use efa_tape::prelude::*;
//! use ndarray::array;
//! // l(w) = Σ tanh(w)², ∂l/∂w = 2·tanh(w)·(1 − tanh²(w)).
//! let w = array![0.3, -1.2, 2.0].into_dyn();
//! let report = efa_tape::audit(
//!     &[("w", w)],
//!     |t, v| {
//!         let y = t.tanh(v[0])?;
//!         let y = t.square(y)?;
//!         t.sum_all(y)
//!     },
//!     &AuditOptions::default(),
//! )
//! .unwrap();
//! assert!(report.passed(), "{report}");
//! assert_eq!(report.summary("w").unwrap().checked, 3);
//! ```
//!
//! # Auditing one fused op
//!
//! [`audit_fused`] checks an op's backward, the vector-Jacobian product of
//! `φ(x) = Σₘ ⟨cₘ, Fₘ(x)⟩` for seeded random cotangents `cₘ`, against central differences of
//! `φ` through the op's forward, naming the op, the input and the element that disagree:
//!
//! ```
//! use efa_tape::prelude::*;
//! use efa_tape::efa_check::Location;
//! use ndarray::{array, ArrayD};
//!
//! /// y = x², with a planted bug: the gradient of element 1 is off by 0.5.
//! #[derive(Clone)]
//! struct Square;
//!
//! impl FusedOp<f64> for Square {
//!     fn name(&self) -> &str {
//!         "square"
//!     }
//!     fn forward(&mut self, x: &[&ArrayD<f64>]) -> Result<Vec<ArrayD<f64>>, TapeError> {
//!         Ok(vec![x[0].mapv(|v| v * v)])
//!     }
//!     fn backward(
//!         &self,
//!         x: &[&ArrayD<f64>],
//!         _y: &[&ArrayD<f64>],
//!         dy: &[Option<&ArrayD<f64>>],
//!         _need: &[bool],
//!     ) -> Result<Vec<Option<ArrayD<f64>>>, TapeError> {
//!         // forward computed x², so dx = 2x·dy (plus the planted error)
//!         let mut dx = x[0].mapv(|v| 2.0 * v) * dy[0].expect("one output");
//!         dx[1] += 0.5;
//!         Ok(vec![Some(dx)])
//!     }
//! }
//!
//! let report = efa_tape::audit_fused(&Square, &[array![1.0, 2.0, 3.0].into_dyn()], 7,
//!                                    &AuditOptions::default()).unwrap();
//! assert!(!report.passed());
//! assert_eq!(report.failures.len(), 1);
//! assert_eq!(report.failures[0].param, "square input 0");
//! assert_eq!(report.failures[0].location, Location::Element(vec![1]));
//! ```
//!
//! # NaN propagates
//!
//! A NaN input gives NaN in every output element computed from it, and NaN in every gradient
//! element whose formula reads it (a gradient that does not read a value, such as `∂(a + b)/∂a`
//! or `∂(x·W)/∂x` with respect to a NaN in `x`, stays what the formula gives). No op turns a
//! NaN into a finite value by a comparison, `max`/`min` or a maximum search: `relu` passes NaN
//! through, softmax/log-softmax/cross-entropy make a row holding a NaN NaN, layer norm a row.
//! Elements an op never reads do not reach its output: entries `masked_fill` replaces, rows a
//! gather or embedding does not select, slices that leave them out. The fused ops of `efa-nn`
//! follow the same rule (see its crate docs).

#![warn(missing_docs)]

mod anomaly;
pub mod audit;
mod backward;
mod broadcast;
pub mod error;
mod op;
pub mod ops;
pub mod prelude;
pub mod stats;
mod tape;
#[cfg(test)]
mod testutil;

pub use audit::{
    audit, audit_fused, audit_vjp, audit_vjp_linearity, fused_jacobian, AuditOptions,
    FusedNodeReport,
};
pub use backward::Grads;
pub use efa_check;
pub use efa_num::Real;
pub use error::{Result, TapeError};
pub use op::{CloneFusedOp, FusedOp};
pub use stats::{flops, reset_flops};
pub use tape::{Tape, Var};
