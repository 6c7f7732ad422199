//! Exponential families for efa (DESIGN §4).
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
pub use error::{ExpfamError, Num};
pub use eval::Eval;
pub use family::Family;
pub use moments::{hessian_batch, log_partition_batch, mean_batch};
