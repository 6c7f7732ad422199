//! Fused masked-softmax attention on the CPU, FlashAttention-2 style (DESIGN §3).
//!
//! For each batch row `b` and head `h`, with scores `sᵢⱼ = scale·⟨qᵢ, kⱼ⟩` over the visible keys
//! `j ∈ V(i)` (see [`Mask`]):
//!
//! - `lseᵢ = ln Σ_{j∈V(i)} exp(sᵢⱼ)` — the log-partition of the empirical exponential family
//!   over the keys, returned as an output;
//! - `oᵢ = Σ_{j∈V(i)} Pᵢⱼ vⱼ` with `Pᵢⱼ = exp(sᵢⱼ − lseᵢ)`. With `v = k`,
//!   `oᵢ = (1/scale)·∂lseᵢ/∂qᵢ`: the output is the mean parameter of that family.
//!
//! A row with no visible key gives `oᵢ = 0`, `lseᵢ = −∞` and zero gradients.
//!
//! [`forward`] streams key tiles per (batch, head, query tile) with a running max `m`, running
//! sum `l` and an output accumulator, never storing an `Nq×Nk` matrix; scores are kept
//! transposed (keys × queries) so the softmax statistics are vectorised across queries. The
//! matrix products are this crate's own SIMD microkernels ([`micro`]), so no library threading
//! runs inside the rayon tasks. [`backward`] recomputes
//! `P = exp(S − LSE)` tile by tile. Work is split into tasks that each own their output rows, so
//! results are bitwise identical for any number of threads. Tensors are `[batch, heads, len,
//! dim]`; [`naive`] holds the O(N²) f64 reference used by tests and benches.

mod backward;
mod forward;
mod mask;
pub mod micro;
pub mod naive;
mod problem;

pub use backward::{backward, backward_with};
pub use efa_num::simd::Isa;
pub use forward::{forward, forward_with};
pub use mask::{Mask, MaskSet};

use std::fmt;

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

/// Useful floating-point operations of one forward pass: `4·B·H·Σᵢ|V(i)|·D` counted as
/// `4·B·H·Nq·Nk·D`, halved (`Nq·(Nq+1)/2` pairs) for causal masks. Backward is counted as 2.5×
/// this (the convention of FlashAttention papers).
pub fn forward_flops(
    batch: usize,
    heads: usize,
    nq: usize,
    nk: usize,
    dim: usize,
    causal: bool,
) -> f64 {
    let pairs = if causal {
        (nq as f64) * (nq as f64 + 1.0) / 2.0
    } else {
        nq as f64 * nk as f64
    };
    4.0 * batch as f64 * heads as f64 * pairs * dim as f64
}
