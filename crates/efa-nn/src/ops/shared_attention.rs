//! `shared_context_attention`: multi-head attention for samples that share a context and
//! differ in one row each, computed once per context with leave-one-out sums: the tape's side
//! of the kernel [`efa_block::shared::SharedKernel`].
//!
//! The temperature model's first block sees, per day, one sample per target city whose
//! input rows are the day's rows except the target's own (replaced by a \[MASK\] embedding).
//! So its queries, keys and values are a per-group base `q, k, v` `[G, N, H·K]` plus, per
//! sample `s`, a replaced row `q_t[s], k_t[s], v_t[s]` `[H·K]` at its target position
//! `t = target[s]` in group `g = group[s]` (head `h` owns columns `[h·K, (h+1)·K)`). With the
//! sample's rows `Qᵢ = q_t[s]` if `i = t` else `q[g, i]` (likewise `Kⱼ`, `Vⱼ`) and the first
//! `len = lengths[g]` keys visible, every row `i < N` (rows `≥ len` too) is a query:
//!
//! ```text
//! o[s, i, h] = Σ_{j<len} softmax_j(scale·⟨Qᵢₕ, Kⱼₕ⟩)·Vⱼₕ
//! ```
//!
//! Per group, head and base query row `qᵢ` the op forms the base scores `sⱼ` (one fused
//! multiply-add per term, as a GEMM kernel: at sharp weights a score cancels products far
//! larger than itself, and a rounding per product and per sum cost digits), their maximum
//! `m` and `eⱼ = exp(sⱼ − m)` once, and the leave-one-out sums `Z⁻[t] = Σ_{j≠t} eⱼ`,
//! `A⁻[t] = Σ_{j≠t} eⱼ vⱼ` from prefix and suffix sums (no subtraction). A sample whose
//! target `t ≠ i` then needs only its replaced key's score `s'`: with `s' ≤ m`,
//! `Z = Z⁻[t] + exp(s' − m)`; with `s' > m`, `c = exp(m − s')` and `Z = Z⁻[t]·c + 1`; in both
//! cases `o = r·A⁻[t] + p'·v_t[s]` with `r = exp(m − max)/Z` (so base key `j` has probability
//! `eⱼ·r`) and `p'` the replaced key's probability. That is `O(N²·H·K)` per group plus
//! `O(N·H·K)` per sample instead of `O(N²·H·K)` per sample. A sample's own query row
//! (`i = t`), any pair whose `Z⁻[t]` is below [`LOO_MIN`] (the base maximum sits at the
//! target and the other keys' exponentials are so small relative to it that their sum would
//! lose precision further down, and `1/Z` overflow in f32 below 2⁻¹²⁸), and any pair whose
//! replaced key's score is not finite, is computed directly, as an ordinary softmax row over
//! the sample's keys, in forward and backward. In the backward a base key that no
//! leave-one-out pair of a row sees (every such pair targets it) adds nothing to that row.
//!
//! Backward, per group, head and row `i`: the samples' cotangents `dOₛ` with
//! `Dₛ = ⟨dOₛ, oₛ⟩` are gathered per target as `R[t] = Σ rₛ·dOₛ`, `Δ[t] = Σ rₛ·Dₛ`, whose
//! leave-one-out sums `R⁻[j]`, `Δ⁻[j]` give every base key's share at once:
//! `dv[g, j] += eⱼ·R⁻[j]`, `dSⱼ = eⱼ·(⟨R⁻[j], vⱼ⟩ − Δ⁻[j])`, `dk[g, j] += scale·dSⱼ·qᵢ`,
//! `dq[g, i] += scale·Σⱼ dSⱼ·kⱼ`; the replaced key adds `dv_t[s] += p'·dOₛ` and, with
//! `dS' = p'·(⟨dOₛ, v_t[s]⟩ − Dₛ)`, `dk_t[s] += scale·dS'·qᵢ`, `dq[g, i] += scale·dS'·k_t[s]`.
//! Directly computed rows run the ordinary attention backward of their row.
//!
//! Groups run in parallel on rayon's pool; each group's task writes only its own base
//! gradient rows and its own samples' outputs and gradients, every sum in a fixed order, so
//! results are bitwise the same for any number of threads.

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_precision;

use efa_block::shared::{SharedKernel, SharedSettings};
use efa_num::Real;
use efa_tape::{FusedOp, Tape, TapeError, Var};
use ndarray::ArrayD;

pub use efa_block::shared::LOO_MIN;

/// One call of
/// [`TapeNn::shared_context_attention`](crate::TapeNn::shared_context_attention) (formulas in
/// the [module docs](self)).
#[derive(Clone, Debug)]
pub struct SharedContextAttention {
    /// Base queries `[G, N, H·K]`.
    pub q: Var,
    /// Base keys `[G, N, H·K]`.
    pub k: Var,
    /// Base values `[G, N, H·K]`.
    pub v: Var,
    /// Each sample's replaced query row `[B, H·K]`.
    pub q_t: Var,
    /// Each sample's replaced key row `[B, H·K]`.
    pub k_t: Var,
    /// Each sample's replaced value row `[B, H·K]`.
    pub v_t: Var,
    /// Heads `H` (`H·K` must divide by it).
    pub heads: usize,
    /// Score scale (`1/√K` for Keras).
    pub scale: f64,
    /// Each sample's group (`B` entries, each below `G`).
    pub group: Vec<usize>,
    /// Each sample's target position (`B` entries, each below its group's length).
    pub target: Vec<usize>,
    /// Visible keys per group (`G` entries, each at most `N`): keys `j < lengths[g]`.
    pub lengths: Vec<usize>,
}

/// The kernel on the tape.
#[derive(Clone)]
struct SharedOp<T>(SharedKernel<T>);

impl<T: Real> FusedOp<T> for SharedOp<T> {
    fn name(&self) -> &str {
        "shared_context_attention"
    }

    fn forward(&mut self, inputs: &[&ArrayD<T>]) -> Result<Vec<ArrayD<T>>, TapeError> {
        let o = self
            .0
            .forward(inputs)
            .map_err(|e| TapeError::new(e.op, e.message))?;
        Ok(vec![o])
    }

    fn backward(
        &self,
        inputs: &[&ArrayD<T>],
        outputs: &[&ArrayD<T>],
        d_outputs: &[Option<&ArrayD<T>>],
        _needs_grad: &[bool],
    ) -> Result<Vec<Option<ArrayD<T>>>, TapeError> {
        let d_o = d_outputs.first().copied().flatten();
        self.0
            .backward(inputs, outputs.first().copied(), d_o)
            .map_err(|e| TapeError::new(e.op, e.message))
    }

    /// The base exponentials and the per-sample scales, probabilities and flags.
    fn saved_bytes(&self) -> usize {
        self.0.saved_bytes()
    }

    /// Operations as performed ([`SharedKernel::flops`]).
    fn flops(&self, inputs: &[&ArrayD<T>], backward: bool) -> u64 {
        self.0.flops(inputs, backward)
    }
}

/// Records
/// [`TapeNn::shared_context_attention`](crate::TapeNn::shared_context_attention) (documented
/// there).
pub(crate) fn shared_context_attention<T: Real>(
    tape: &mut Tape<T>,
    a: SharedContextAttention,
) -> Result<Var, TapeError> {
    let op = SharedOp::<T>(SharedKernel::new(SharedSettings {
        heads: a.heads,
        scale: a.scale,
        group: a.group,
        target: a.target,
        lengths: a.lengths,
    }));
    Ok(tape.fused(Box::new(op), &[a.q, a.k, a.v, a.q_t, a.k_t, a.v_t])?[0])
}
