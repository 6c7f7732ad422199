//! [`TapeNn`]: the building blocks of this crate as methods on [`Tape`], so a model writes
//! `tape.linear(x, w, Some(b))` with `use efa_nn::prelude::*` (or `use efa_nn::TapeNn`) in
//! scope.
//!
//! Each method records one [`efa_tape::FusedOp`] from [`crate::ops`] (forward, backward,
//! FLOPs and tests live there, beside the kernel each adapts); the trait only names them.

use crate::ops::attention::{Attention, AttnVars};
use crate::ops::block::PostNormBlock;
use crate::ops::gather::Part;
use crate::ops::shared_attention::SharedContextAttention;
use crate::ops::{attention, block, gather, linear, link, nll, shared_attention};
use efa_expfam::Family;
use efa_num::Real;
use efa_tape::{Tape, TapeError, Var};
use ndarray::Array2;

/// The fused building blocks on a [`Tape`]: affine maps, table gathers, attention,
/// exponential-family nll and links, and the post-norm transformer block.
///
/// Every method records one fused node (none for an identity link) whose backward is the
/// op's own vector-Jacobian product, checked against central differences in f64 in this
/// crate's tests.
pub trait TapeNn<T: Real> {
    /// Records `y = x·W (+ b)` over the last axis of `x` `[…, in]` with `W` `[in, out]` and
    /// `b` `[out]` as one node (one GEMM with the bias as its initial value; backward
    /// `dx = dy·Wᵀ`, `dW = xᵀ·dy` over all leading axes at once, `db = Σ dy`).
    ///
    /// # Errors
    /// `W` not `[in, out]` for the last axis of `x`, or a bias not `[out]` (naming both shapes).
    fn linear(&mut self, x: Var, w: Var, b: Option<Var>) -> Result<Var, TapeError>;

    /// Records `out[b, n, col_p ..] += T_p[ids_p[b, n]]` for every part `p` whose index is not
    /// [`NONE`](crate::ops::gather::NONE) (each table at its column offset), `+ bias`, as one
    /// node, and returns it split into `chunks` equal column blocks `[B, N, width / chunks]`.
    /// Backward scatter-adds `dT_p[r] = Σ_{(b, n): ids_p[b, n] = r} dOut[b, n, col_p ..]`.
    ///
    /// # Errors
    /// No parts, a table count other than the part count, `width` not divisible by `chunks`,
    /// parts that do not fit `[B, N, width]`, an index outside its table (naming the position).
    fn gather_sum(
        &mut self,
        tables: &[Var],
        parts: Vec<Part>,
        bias: Option<Var>,
        width: usize,
        chunks: usize,
    ) -> Result<Vec<Var>, TapeError>;

    /// Records `out[b] = Σ_j w[b, j]·table[ids[b, j]]` (`[B, F]`, entries
    /// [`NONE`](crate::ops::gather::NONE) skipped, `w = 1` without weights) as one node (an
    /// embedding bag); backward `dT[ids[b, j]] += w[b, j]·dOut[b]`, the weights are constants.
    ///
    /// # Errors
    /// Weights not of the shape of `ids`, a table that is not 2-D, an index outside the table.
    fn bag_sum(
        &mut self,
        table: Var,
        ids: Array2<usize>,
        weights: Option<Array2<T>>,
    ) -> Result<Var, TapeError>;

    /// Records fused attention on `[B, N, H, K]` inputs: `args.q` `[B, Nq, H, K]`, `args.k`
    /// `[B, Nk, H, K]`, `args.v` `[B, Nk, H, Kv]` → `o` `[B, Nq, H, Kv]` and `lse`
    /// `[B, H, Nq]`, with `o = softmax(scale·QKᵀ + mask)·V`, `lse = logsumexp(scale·QKᵀ + mask)`
    /// per head (defaults: no mask, `scale = 1/√K`, [`Par::Rayon`](crate::ops::attention::Par),
    /// the detected SIMD variant). Layouts: [efa-attn crate docs](efa_attn#layouts).
    ///
    /// # Errors
    /// Inputs of another rank or mismatched shapes, a mask that does not fit (naming
    /// `mask.key_lengths` or `mask.dense`, its shape and index), a non-finite scale.
    fn attention(&mut self, args: Attention<Var>) -> Result<AttnVars, TapeError>;

    /// [`TapeNn::attention`] on flat heads: `args.q` `[B, Nq, H·K]`, `args.k` `[B, Nk, H·K]`,
    /// `args.v` `[B, Nk, H·Kv]` (the layout of a per-position projection, read as
    /// `[B, N, H, K]` without a copy; head `h` owns columns `[h·K, (h+1)·K)`) → `o`
    /// `[B, Nq, H·Kv]` and `lse` `[B, H, Nq]`. The default scale is `1/√K` with `K` the width
    /// per head.
    ///
    /// # Errors
    /// `heads = 0`, widths not divisible by `heads`, and as [`TapeNn::attention`].
    fn attention_heads(
        &mut self,
        args: Attention<Var>,
        heads: usize,
    ) -> Result<AttnVars, TapeError>;

    /// Per-row negative log-likelihood `[B]`, `nllᵢ = A(ηᵢ) − ⟨t(yᵢ), ηᵢ⟩ − log h(yᵢ)` (each
    /// family in its own stable form), of observations `y` `[B, obs_dim]` under `family` with
    /// natural parameters `eta` `[B, eta_dim]`; rows with `mask[i] = false` give 0. Backward:
    /// `dηᵢ = d_outᵢ·(∇A(ηᵢ) − t(yᵢ))`. For the ordinal model use [`TapeNn::ordinal_nll`].
    ///
    /// # Errors
    /// Support violations and natural parameters outside the family's domain (NaN included),
    /// naming the family, the value and the row; the ordinal family (it needs cut-points).
    fn nll(
        &mut self,
        family: &Family,
        eta: Var,
        y: &Array2<T>,
        mask: Option<&[bool]>,
    ) -> Result<Var, TapeError>;

    /// Per-row nll `[B]` of the ordinal cumulative-logit model with learnable, increasing
    /// cut-points `cutpoints` `[K − 1]`: `P(Y ≤ k) = σ(c_k − η)`; `eta` is `[B, 1]`, `y`
    /// `[B, 1]` holds category indices `0..K`. Gradients flow to η and to the cut-points
    /// (`d_c = Σᵢ d_outᵢ·∂nllᵢ/∂c`).
    ///
    /// # Errors
    /// As [`TapeNn::nll`], and cut-points that are not finite and strictly increasing.
    fn ordinal_nll(
        &mut self,
        eta: Var,
        cutpoints: Var,
        y: &Array2<T>,
        mask: Option<&[bool]>,
    ) -> Result<Var, TapeError>;

    /// η = link(z) on the tape, `z` of shape `[B, eta_dim]`: the family's link from an
    /// unconstrained model output to its natural parameter space (`efa_expfam::link`),
    /// `η[b, j] = stepⱼ(z[b, j])` with `stepⱼ` the identity or `sign·softplus(±z) + shift`;
    /// backward `dz[b, j] = dη[b, j]·stepⱼ'(z[b, j])`. The identity link records no node and
    /// returns `z`.
    ///
    /// # Errors
    /// `z` not `[B, eta_dim]`.
    fn natural(&mut self, family: &Family, z: Var) -> Result<Var, TapeError>;

    /// Records one post-norm transformer block as a single node (formulas in the
    /// [module docs](crate::ops::block)): `[B, N, d]` out, or `[B, 1, d]` with query rows.
    /// Inputs are recorded in the order `x`, the projection kernels and biases
    /// (`wq, bq, wk, bk, wv, bv`) or the given `q, k, v`, then `wo, bo, ln1_gain, ln1_bias,
    /// w1, b1, w2, b2, ln2_gain, ln2_bias`.
    ///
    /// # Errors
    /// Shapes that do not fit together (naming the tensor and both shapes), `heads = 0` or not
    /// dividing `H·K`, key lengths above `N`, query rows not below `N`, a non-finite scale or
    /// a negative ε.
    fn post_norm_block(&mut self, blk: PostNormBlock) -> Result<Var, TapeError>;

    /// Records attention for samples that share a group's rows up to one replaced row each
    /// as a single node (formulas in the [module docs](crate::ops::shared_attention)):
    /// base `a.q, a.k, a.v` `[G, N, H·K]`, replaced rows `a.q_t, a.k_t, a.v_t` `[B, H·K]` at
    /// `a.target[s]` of group `a.group[s]`, keys `j < a.lengths[g]` visible → `o` `[B, N, H·K]`,
    /// computed with leave-one-out sums per group (`O(N²·H·K)` per group plus `O(N·H·K)` per
    /// sample). Inputs are recorded in the order `q, k, v, q_t, k_t, v_t`.
    ///
    /// # Errors
    /// Shapes that do not fit together (naming the tensor and both shapes), `heads = 0` or not
    /// dividing `H·K`, `group`, `target` or `lengths` of the wrong length, a group index not
    /// below `G`, a length above `N`, a target not below its group's length (naming the
    /// sample), a non-finite scale.
    fn shared_context_attention(&mut self, a: SharedContextAttention) -> Result<Var, TapeError>;
}

impl<T: Real> TapeNn<T> for Tape<T> {
    fn linear(&mut self, x: Var, w: Var, b: Option<Var>) -> Result<Var, TapeError> {
        linear::linear(self, x, w, b)
    }

    fn gather_sum(
        &mut self,
        tables: &[Var],
        parts: Vec<Part>,
        bias: Option<Var>,
        width: usize,
        chunks: usize,
    ) -> Result<Vec<Var>, TapeError> {
        gather::gather_sum(self, tables, parts, bias, width, chunks)
    }

    fn bag_sum(
        &mut self,
        table: Var,
        ids: Array2<usize>,
        weights: Option<Array2<T>>,
    ) -> Result<Var, TapeError> {
        gather::bag_sum(self, table, ids, weights)
    }

    fn attention(&mut self, args: Attention<Var>) -> Result<AttnVars, TapeError> {
        attention::attention(self, args)
    }

    fn attention_heads(
        &mut self,
        args: Attention<Var>,
        heads: usize,
    ) -> Result<AttnVars, TapeError> {
        attention::attention_heads(self, args, heads)
    }

    fn nll(
        &mut self,
        family: &Family,
        eta: Var,
        y: &Array2<T>,
        mask: Option<&[bool]>,
    ) -> Result<Var, TapeError> {
        nll::nll(self, family, eta, y, mask)
    }

    fn ordinal_nll(
        &mut self,
        eta: Var,
        cutpoints: Var,
        y: &Array2<T>,
        mask: Option<&[bool]>,
    ) -> Result<Var, TapeError> {
        nll::ordinal_nll(self, eta, cutpoints, y, mask)
    }

    fn natural(&mut self, family: &Family, z: Var) -> Result<Var, TapeError> {
        link::natural(self, family, z)
    }

    fn post_norm_block(&mut self, blk: PostNormBlock) -> Result<Var, TapeError> {
        block::post_norm_block(self, blk)
    }

    fn shared_context_attention(&mut self, a: SharedContextAttention) -> Result<Var, TapeError> {
        shared_attention::shared_context_attention(self, a)
    }
}
