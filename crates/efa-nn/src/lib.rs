//! Building blocks on the efa tape (docs/design.md §1, §2): the fused ops a model records, the
//! parameter declaration every model goes through, and the layers built from both.
//!
//! - [`TapeNn`], an extension trait on [`efa_tape::Tape`]: `linear` (`y = x·W + b`),
//!   `gather_sum` and `bag_sum` (table rows by index), `attention` and `attention_heads` (the
//!   `efa-attn` kernel, `o = softmax(scale·QKᵀ + mask)·V` and `lse`), `nll` and `ordinal_nll`
//!   (exponential-family negative log-likelihoods from `efa-expfam`), `natural` (the families'
//!   links) and `post_norm_block` (a whole post-norm transformer block as one node). Each is an
//!   [`efa_tape::FusedOp`] in [`ops`], beside the kernel it adapts, with its backward and an
//!   f64 finite-difference test.
//! - [`params`]: [`Params`] (named tensors in creation order), the Keras initialisers, and the
//!   [`ParamSink`] a model declares its parameters to: [`Initialiser`] draws them,
//!   [`Registrar`] puts a set on a tape as typed handles, [`Layout`] lists them and
//!   [`Counter`] counts them against a limit.
//! - [`layers`]: dense, MLP, layer-norm and multi-head attention layers as structs of handles.
//!
//! `use efa_nn::prelude::*` brings all of it, with the tape's own types.
//!
//! ```
//! use efa_nn::prelude::*;
//! use ndarray::{array, Array2};
//!
//! // A Poisson regression: log-rate η = x·W + b, loss = Σᵢ nllᵢ.
//! let mut tape = Tape::<f64>::new();
//! let x = tape.constant(array![[1.0, 0.5], [0.0, -1.0]].into_dyn());
//! let w = tape.param("w", array![[0.2], [-0.4]].into_dyn()).unwrap();
//! let b = tape.param("b", array![0.1].into_dyn()).unwrap();
//! let eta = tape.linear(x, w, Some(b)).unwrap(); // [2, 1]
//! let eta = tape.natural(&Family::Poisson, eta).unwrap(); // the identity link: no node
//! let y = Array2::from_shape_vec((2, 1), vec![1.0, 3.0]).unwrap();
//! let nll = tape.nll(&Family::Poisson, eta, &y, None).unwrap(); // [2]
//! let loss = tape.sum_all(nll).unwrap();
//! let grads = tape.backward(loss).unwrap();
//! // ∂nllᵢ/∂ηᵢ = exp(ηᵢ) − yᵢ, so ∂loss/∂b = Σᵢ (exp(ηᵢ) − yᵢ).
//! let e = tape.value(eta);
//! let want = (e[[0, 0]].exp() - 1.0) + (e[[1, 0]].exp() - 3.0);
//! assert!((grads.param("b").unwrap()[0] - want).abs() < 1e-12);
//! ```
//!
//! # NaN
//!
//! The fused ops propagate NaN as the tape's primitive ops do (a NaN input gives NaN in every
//! output element and every gradient element whose formula reads it; `tests/all/nan.rs` states
//! each pattern), with one refusal: a NaN natural parameter in `nll` is an error naming the
//! family and row (it is outside every family's domain). In `attention`, a NaN query or key
//! element reaches every output that reads it; the kernel never treats a NaN score as masked.

#![warn(missing_docs)]

mod error;
mod ext;
pub mod layers;
pub mod ops;
pub mod params;
pub mod prelude;

pub use efa_num::Real;
pub use error::NnError;
pub use ext::TapeNn;
pub use params::{Counter, Initialiser, Layout, ParamCount, ParamSink, Params, Registrar};
