//! The fused ops, one per module, each an [`efa_tape::FusedOp`] with its forward, backward,
//! FLOP count, docs and tests, recorded through [`crate::TapeNn`]:
//!
//! - [`linear`]: `y = x·W + b` over the last axis;
//! - [`gather`]: `gather_sum` (rows of several tables summed into column ranges) and
//!   `bag_sum` (an embedding bag), with its row kernels in `gather_rows`;
//! - [`attention`]: the `efa-attn` kernel, `o` and `lse` as two outputs;
//! - [`nll`]: exponential-family negative log-likelihoods from `efa-expfam`, per row;
//! - [`link`]: the families' links from a model output to natural parameters;
//! - [`block`]: the post-norm transformer block as one node, with its attention kernel
//!   ([`block::rows`]);
//! - [`shared_attention`]: attention for samples sharing a context up to one replaced row
//!   each (per group leave-one-out sums), `shared_context_attention`.

pub mod attention;
pub mod block;
pub mod gather;
mod gather_rows;
pub mod linear;
pub mod link;
pub mod nll;
pub mod shared_attention;
