//! Exponential families for efa (docs/design.md §4).
//!
//! A density p(y | η) = h(y) exp(⟨t(y), η⟩ − A(η)) is described by its log-partition A(η),
//! the mean ∇A(η) = E t(y), the covariance ∇²A(η) (Fisher information in η), the sufficient
//! statistic t(y) and the base measure log h(y). The negative log-likelihood
//! nll(y, η) = A(η) − ⟨t(y), η⟩ − log h(y) and its gradient ∂nll/∂η = ∇A(η) − t(y) are
//! computed per family in a stable form (never as that difference of large terms).
//! Conventions follow `shared/reference/README.md` exactly.
//!
//! * [`Family`]: the closed set of families with per-observation methods (slices, generic over
//!   [`Real`] = f32 / f64), including support checks that return [`ExpfamError`] naming the
//!   family, the value and the row.
//!   [`Family::eval`] gives the same methods for one-off calls (no row index, owned results).
//! * [`nll_batch`] and [`ordinal_nll_batch`]: batched nll + gradient over rows with a mask,
//!   parallel over rows for large batches (the model crate wraps them as tape ops).
//! * [`link`]: links from an unconstrained model output to each family's natural parameters.
//! * [`log_partition_batch`], [`mean_batch`], [`hessian_batch`]: A, ∇A and ∇²A over the rows
//!   of an η matrix, parallel for large batches.
//! * One module per family with the formulas.
//!
//! ```
//! use efa_expfam::prelude::*;
//! // Poisson: t(y) = y, log h(y) = −ln y!, A(η) = eᶯ, ∇A = ∇²A = eᶯ.
//! let p = Family::Poisson.eval();
//! let eta = [0.5f64];
//! assert!((p.log_partition(&eta).unwrap() - 0.5f64.exp()).abs() < 1e-15);
//! // nll(y; η) = A(η) − y·η + ln y!, and ∂nll/∂η = ∇A(η) − y.
//! let (nll, g) = p.nll_grad(&[3.0], &eta).unwrap();
//! let ln_fact3 = 6f64.ln();
//! assert!((nll - (0.5f64.exp() - 1.5 + ln_fact3)).abs() < 1e-14);
//! assert!((g[0] - (0.5f64.exp() - 3.0)).abs() < 1e-15);
//! // Out of the support: an error naming the family and the value, never a NaN.
//! assert!(p.nll(&[-1.0f64], &eta).unwrap_err().to_string().contains("poisson"));
//! ```

#![warn(missing_docs)]

pub mod batch;
pub mod bernoulli;
pub mod beta;
pub mod binomial;
pub mod categorical;
mod common;
pub mod error;
pub mod eval;
pub mod exponential;
pub mod family;
pub mod gamma;
pub mod gaussian;
pub mod gaussian_known;
pub mod link;
pub mod moments;
pub mod multinomial;
pub mod negbin;
pub mod ordinal;
pub mod poisson;
pub mod refcheck;

pub use batch::{nll_batch, ordinal_nll_batch, PAR_MIN_ROWS};
pub use efa_num::Real;

/// The family type, its one-off evaluator, the batched routines and the scalar trait in one
/// import: `use efa_expfam::prelude::*;`.
pub mod prelude {
    pub use crate::batch::{nll_batch, ordinal_nll_batch};
    pub use crate::error::ExpfamError;
    pub use crate::eval::Eval;
    pub use crate::family::Family;
    pub use crate::link::{natural_rows, steps, LinkStep};
    pub use crate::moments::{hessian_batch, log_partition_batch, mean_batch};
    pub use efa_num::Real;
}
pub use error::{ExpfamError, Num};
pub use eval::Eval;
pub use family::Family;
pub use moments::{hessian_batch, log_partition_batch, mean_batch};
