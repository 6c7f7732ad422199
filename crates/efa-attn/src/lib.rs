//! Fused masked-softmax attention on the CPU, FlashAttention-2 style (docs/design.md §3).
//!
//! For each batch row `b` and head `h`, with scores `sᵢⱼ = scale·⟨qᵢ, kⱼ⟩` over the keys
//! `j ∈ V(i)` the [`Mask`] shows query `i`:
//!
//! - `o = softmax(scale·QKᵀ + mask)·V`, i.e. `oᵢ = Σ_{j∈V(i)} Pᵢⱼ vⱼ` with
//!   `Pᵢⱼ = exp(sᵢⱼ − lseᵢ)`;
//! - `lseᵢ = ln Σ_{j∈V(i)} exp(sᵢⱼ)` — the log-partition of the empirical exponential family
//!   over the keys, returned as an output. With `v = k`, `oᵢ = (1/scale)·∂lseᵢ/∂qᵢ`: the
//!   output is the mean parameter of that family.
//!
//! A row with no visible key gives `oᵢ = 0`, `lseᵢ = −∞` and zero gradients.
//!
//! Two schedules compute the same bits: query × key tiles per head (any length and mask),
//! and, for at most 64 queries and 16 keys under key-length masks (the synthetic model's 5
//! positions) or 64 keys under causal ones, 16 heads side by side in the vector lanes
//! (`short.rs`), where a tile would be mostly padding or masked triangle. (Causal, with an
//! infinite or NaN input, the tile kernel may also carry NaN to rows of a 16-query group that
//! do not see the key holding it; the lane schedule reads visible pairs only.)
//!
//! One call is an [`Attention`] value (inputs, mask, scale, scheduling, SIMD variant) run by
//! [`Attention::forward`] → [`AttnOut`] `{ o, lse }` and [`Attention::backward`] →
//! [`AttnGrads`] `{ dq, dk, dv }`; [`naive`] takes the same arguments (the O(N²) f64
//! reference used by tests and benches). `use efa_attn::prelude::*` brings them all in.
//!
//! ```
//! use efa_attn::prelude::*;
//! use ndarray::{Array3, Array4};
//!
//! // B = 2 batch rows, H = 1 head, N = 3 positions, D = 2; values = keys.
//! let q = Array4::from_shape_fn((2, 1, 3, 2), |(b, _, i, c)| 0.3 * (b + i) as f64 - 0.2 * c as f64);
//! let k = Array4::from_shape_fn((2, 1, 3, 2), |(b, _, j, c)| 0.5 * j as f64 - 0.1 * (b + c) as f64);
//! // Causal, and batch row 1 has only 2 valid keys (key padding).
//! let args = Attention::new(q.view(), k.view(), k.view()).mask(Mask::causal().key_lengths([3, 2]));
//! let out = args.forward()?;
//!
//! // By hand: query 2 of batch row 1 sees keys 0 and 1 (key 2 is padding), with the default
//! // scale 1/√D.
//! let scale = 1.0 / 2f64.sqrt();
//! let s = |j: usize| scale * (0..2).map(|c| q[[1, 0, 2, c]] * k[[1, 0, j, c]]).sum::<f64>();
//! let lse = (s(0).exp() + s(1).exp()).ln();
//! assert!((out.lse[[1, 0, 2]] - lse).abs() < 1e-12);
//! let o0 = (s(0) - lse).exp() * k[[1, 0, 0, 0]] + (s(1) - lse).exp() * k[[1, 0, 1, 0]];
//! assert!((out.o[[1, 0, 2, 0]] - o0).abs() < 1e-12);
//!
//! // o = (1/scale)·∂lse/∂q when v = k: the cotangents d_o = 0, d_lse = 1 make dq = ∂Σlse/∂q.
//! let (d_o, d_lse) = (Array4::zeros(out.o.raw_dim()), Array3::ones(out.lse.raw_dim()));
//! let g = args.backward(out.view(), d_o.view(), Some(d_lse.view()))?;
//! for (o, dq) in out.o.iter().zip(&g.dq) {
//!     assert!((o - dq / scale).abs() < 1e-12);
//! }
//! # Ok::<(), AttnError>(())
//! ```
//!
//! # Layouts
//!
//! The kernel works on `[B, H, N, D]` tensors; the tape op (`efa_nn`'s `TapeNn::attention`
//! and `TapeNn::attention_heads`) takes the layout per-position projections produce and views
//! it as `[B, H, N, D]` through strides (no copy of the inputs; it copies the outputs and
//! gradients back to its layout).
//!
//! | tensor | kernel (`Attention<ArrayView4>`) | `TapeNn::attention` | `TapeNn::attention_heads(…, H)` |
//! |--------|--------------------|-------------------|-------------------------------|
//! | `q`    | `[B, H, Nq, Dk]`   | `[B, Nq, H, Dk]`  | `[B, Nq, H·Dk]` |
//! | `k`    | `[B, H, Nk, Dk]`   | `[B, Nk, H, Dk]`  | `[B, Nk, H·Dk]` |
//! | `v`    | `[B, H, Nk, Dv]`   | `[B, Nk, H, Dv]`  | `[B, Nk, H·Dv]` |
//! | `o`    | `[B, H, Nq, Dv]`   | `[B, Nq, H, Dv]`  | `[B, Nq, H·Dv]` |
//! | `lse`  | `[B, H, Nq]`       | `[B, H, Nq]`      | `[B, H, Nq]` |
//! | `mask.key_lengths` | `[B]`  | `[B]`             | `[B]` |
//! | `mask.dense` | `[B or 1, H or 1, Nq, Nk]` | same | same |
//!
//! - Axes: `B` batch rows, `H` heads, `Nq` queries (positions asking), `Nk` keys = values
//!   (positions answering), `Dk` query/key width per head, `Dv` value width per head.
//! - Flat heads: head `h` owns columns `[h·Dk, (h+1)·Dk)` of `q`, `k` (and
//!   `[h·Dv, (h+1)·Dv)` of `v`, `o`): a `[B, N, H·D]` array is the `[B, N, H, D]` one in
//!   standard layout.
//! - `Nq ≠ Nk` (cross-attention) is allowed everywhere; the causal rule then compares query
//!   and key indices directly (`j ≤ i + offset`, with offset `Nk − Nq` aligning the last
//!   query with the last key). `Nq` or `Nk` may be 0.
//! - `Dv ≠ Dk` is allowed: `o` has `v`'s width; `dq`, `dk` have `Dk`, `dv` has `Dv`.
//! - `lse` is `[B, H, Nq]` in every layout (one log-partition per (batch row, head, query)).
//! - The default scale is `1/√Dk` with `Dk` the per-head width (not `H·Dk`).
//!
//! # Implementation
//!
//! [`Attention::forward`] streams key tiles per (batch, head, query tile) with a running max
//! `m`, running sum `l` and an output accumulator, never storing an `Nq×Nk` matrix; scores are
//! kept transposed (keys × queries) so the softmax statistics are vectorised across queries.
//! The matrix products are this crate's own SIMD microkernels ([`micro`]), so no library
//! threading runs inside the rayon tasks. [`Attention::backward`] recomputes
//! `P = exp(S − LSE)` tile by tile. Work is split into tasks that each own their output rows,
//! so results are bitwise identical for any number of threads.

#![warn(missing_docs)]

mod args;
mod backward;
mod forward;
mod mask;
pub mod micro;
pub mod naive;
mod problem;
mod short;

pub use args::{Attention, AttnGrads, AttnOut, AttnOutView};
pub use efa_num::simd::Isa;
pub use efa_num::Real;
pub use mask::Mask;

/// Everything a caller of the kernel needs: `use efa_attn::prelude::*`.
pub mod prelude {
    pub use crate::{Attention, AttnError, AttnGrads, AttnOut, AttnOutView, Isa, Mask, Par, Real};
}

use std::fmt;

/// Whether `T` is the double-double reference type, which has no SIMD kernels: the forward
/// and backward then compute the naive definition in it ([`naive::forward_in`]).
#[inline(always)]
pub(crate) fn reference<T: Real>() -> bool {
    efa_num::simd::elem_kind::<T>() == efa_num::simd::ElemKind::Dd
}

/// Query rows per tile. Working set of one forward task for head dim 64 in f32: the
/// transposed query tile `Qᵀ` 64×64 (16 KiB), the transposed score tile `Sᵀ`
/// [`BLOCK_K`]×64 (32 KiB) and accumulator `accᵀ` 64×64 (16 KiB), with the key and value tiles
/// (2 × 32 KiB) streamed from the inputs: about 128 KiB, an eighth of Zen 4's 1 MiB L2, while
/// the panel each microkernel reuses across a row strip (`Qᵀ`, 16 KiB, or a 16-column slice of
/// `Sᵀ`) fits the 32 KiB L1d. Sequences of at most this many queries are a single tile.
pub const BLOCK_Q: usize = 64;

/// Key rows per tile (see [`BLOCK_Q`] for the cache budget). 128 keys amortise the online-softmax
/// rescaling of the accumulator over 128 scores per query.
pub const BLOCK_K: usize = 128;

/// Minimum number of tasks a rayon job takes, so small tasks (short sequences, one tile per
/// head) are not split below a few microseconds of work each.
pub const MIN_TASKS_PER_JOB: usize = 4;

/// Backward runs one task per (batch, head) — a single pass computing `dQ`, `dK` and `dV`
/// together — when there are at least this many heads in total and the sequences are at most
/// [`FUSED_MAX_LEN`] long; otherwise two passes (key tiles own `dK`, `dV`; query tiles own `dQ`)
/// give parallelism within a head with per-task memory bounded by the tile sizes. The choice
/// depends only on the shapes, never on the thread count.
pub const FUSED_MIN_HEADS: usize = 8;

/// See [`FUSED_MIN_HEADS`].
pub const FUSED_MAX_LEN: usize = 4096;

/// How work is scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Par {
    /// One thread, in task order.
    Sequential,
    /// rayon's current thread pool over (batch·head·tile) tasks, at least
    /// [`MIN_TASKS_PER_JOB`] per job.
    #[default]
    Rayon,
}

/// An invalid input: the tensor concerned, its shape and what is wrong (with the index for
/// per-element problems).
#[derive(Clone, Debug, PartialEq)]
pub struct AttnError {
    /// Name of the argument, e.g. `"k"` or `"mask.key_lengths"`.
    pub tensor: &'static str,
    /// Its shape.
    pub shape: Vec<usize>,
    /// What is wrong.
    pub message: String,
}

impl AttnError {
    pub(crate) fn new(tensor: &'static str, shape: Vec<usize>, message: impl Into<String>) -> Self {
        AttnError {
            tensor,
            shape,
            message: message.into(),
        }
    }
}

impl fmt::Display for AttnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "attention: {} with shape {:?}: {}",
            self.tensor, self.shape, self.message
        )
    }
}

impl std::error::Error for AttnError {}
