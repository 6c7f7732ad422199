//! `post_norm_block`: one post-norm transformer block (the paper's temperature model,
//! docs/paper.md §6.2) as a single fused op: the tape's side of the kernel
//! [`efa_block::block::PostNormKernel`], which computes it in parallel chunks of whole samples
//! with every intermediate kept in cache-sized row-major buffers.
//!
//! For `x` `[B, N, d]` and each query row `i` of sample `b` (every row, or one given row per
//! sample), with heads `h` of width `K` and the first `len_b` keys visible:
//!
//! ```text
//! qᵢ = xᵢ·W_q + b_q,  kⱼ = xⱼ·W_k + b_k,  vⱼ = xⱼ·W_v + b_v     (or given q, k, v)
//! aᵢ = Σ_h softmax_{j<len_b}(scale·⟨qᵢₕ, kⱼₕ⟩)·vⱼₕ · W_o[h] + b_o  (or the given per-head softmax·v, concatenated)
//! zᵢ = LN₁(xᵢ + aᵢ)
//! yᵢ = LN₂(zᵢ + relu(zᵢ·W₁ + b₁)·W₂ + b₂)
//! ```
//!
//! with `LN(u) = (u − μ)/√(σ² + ε)∘γ + β` over the last axis (biased variance). This is
//! exactly `x = LN₁(x + MHA(x)); x = LN₂(x + FFN(x))` of a Keras post-norm block, as the tape
//! would compute it from `linear`, `attention_heads`, `add` and `layer_norm` nodes, but with
//! the projections run on weights packed once per call, the attention on the
//! [`rows`] kernel, biases, residuals and the ReLU applied in place, and the backward of the
//! whole block in one pass per chunk. The attention probabilities of blocks whose every row is
//! a query are not kept: the backward forms them again per sample, in cache, from the kept `q`
//! and `k` and the softmax's per-query maxima and scales (`rows::probs_uninit`: one score
//! product and one exponential per element, the forward's bits). Keeping them would add a
//! quarter to the saved state's bytes in the temperature model, all of it traffic to main
//! memory. Those of a few query rows (one per sample, at the targets) are small and kept.
//!
//! Work is split into chunks of whole samples ([`CHUNK_ROWS`] rows) that run on rayon's pool;
//! each chunk writes its own rows and its own partial parameter gradients, which are summed in
//! a fixed pairwise tree over the chunks, so results are bitwise the same for any number of
//! threads.

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_precision;

use efa_block::block::{BlockSettings, BlockSource, PostNormKernel};
use efa_num::Real;
use efa_tape::{FusedOp, Tape, TapeError, Var};
use ndarray::ArrayD;

pub use efa_block::block::{rows, CHUNK_ROWS};

/// Where a block's queries, keys and values come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockQkv {
    /// Projected from the block input inside the op: `q = x·W_q + b_q`, `k = x·W_k + b_k`,
    /// `v = x·W_v + b_v`, each kernel `[d, H·K]` and bias `[H·K]`.
    Project {
        /// Query kernel.
        wq: Var,
        /// Query bias.
        bq: Var,
        /// Key kernel.
        wk: Var,
        /// Key bias.
        bk: Var,
        /// Value kernel.
        wv: Var,
        /// Value bias.
        bv: Var,
    },
    /// Already projected: `q` `[B, Nq, H·K]` (`Nq` = N, or 1 with query rows), `k`, `v`
    /// `[B, N, H·K]` (head `h` owns columns `[h·K, (h+1)·K)`).
    Given {
        /// Queries.
        q: Var,
        /// Keys.
        k: Var,
        /// Values.
        v: Var,
    },
    /// The attention itself computed elsewhere (e.g. by
    /// [`TapeNn::shared_context_attention`](crate::TapeNn::shared_context_attention)): `a`
    /// `[B, Nq, H·K]` holds each head's `softmax(…)·v` (head `h` in columns `[h·K, (h+1)·K)`)
    /// for every query row, before the output projection.
    /// The op runs the block from `a·W_o + b_o` on; `heads`, `scale` and `key_lengths` are
    /// not used.
    Attended {
        /// Attention output before its projection.
        a: Var,
    },
}

/// The parameters after the attention: output projection, first layer norm, feed-forward
/// layers and second layer norm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockTail {
    /// Output projection `[H·K, d]`.
    pub wo: Var,
    /// Output bias `[d]`.
    pub bo: Var,
    /// First layer norm's gain `[d]`.
    pub ln1_gain: Var,
    /// First layer norm's shift `[d]`.
    pub ln1_bias: Var,
    /// Feed-forward kernel `[d, F]`.
    pub w1: Var,
    /// Feed-forward bias `[F]`.
    pub b1: Var,
    /// Feed-forward output kernel `[F, d]`.
    pub w2: Var,
    /// Feed-forward output bias `[d]`.
    pub b2: Var,
    /// Second layer norm's gain `[d]`.
    pub ln2_gain: Var,
    /// Second layer norm's shift `[d]`.
    pub ln2_bias: Var,
}

/// One call of [`TapeNn::post_norm_block`](crate::TapeNn::post_norm_block) (formulas in the
/// [module docs](self)).
#[derive(Clone, Debug)]
pub struct PostNormBlock {
    /// Block input `[B, N, d]`.
    pub x: Var,
    /// Queries, keys and values: projected here or given.
    pub qkv: BlockQkv,
    /// Output projection, layer norms and feed-forward block.
    pub tail: BlockTail,
    /// Heads `H` (the projection width `H·K` must divide by it).
    pub heads: usize,
    /// Score scale (`1/√K` for Keras).
    pub scale: f64,
    /// Layer-norm ε of both norms.
    pub eps: f64,
    /// Visible keys per sample (`j < len_b`); `None`: all `N`.
    pub key_lengths: Option<Vec<usize>>,
    /// One query row per sample (e.g. the target position), giving `[B, 1, d]`; `None`: every
    /// row is a query, giving `[B, N, d]`.
    pub queries: Option<Vec<usize>>,
}

/// The kernel on the tape.
#[derive(Clone)]
struct BlockOp<T>(PostNormKernel<T>);

fn tape_error(e: efa_block::KernelError) -> TapeError {
    TapeError::new(e.op, e.message)
}

impl<T: Real> FusedOp<T> for BlockOp<T> {
    fn name(&self) -> &str {
        "post_norm_block"
    }

    fn forward(&mut self, inputs: &[&ArrayD<T>]) -> Result<Vec<ArrayD<T>>, TapeError> {
        Ok(vec![self.0.forward(inputs).map_err(tape_error)?])
    }

    fn backward(
        &self,
        inputs: &[&ArrayD<T>],
        _outputs: &[&ArrayD<T>],
        d_outputs: &[Option<&ArrayD<T>>],
        _needs_grad: &[bool],
    ) -> Result<Vec<Option<ArrayD<T>>>, TapeError> {
        self.0
            .backward(inputs, d_outputs.first().copied().flatten())
            .map_err(tape_error)
    }

    /// The saved activations.
    fn saved_bytes(&self) -> usize {
        self.0.saved_bytes()
    }

    /// The block's products ([`PostNormKernel::flops`]).
    fn flops(&self, inputs: &[&ArrayD<T>], backward: bool) -> u64 {
        self.0.flops(inputs, backward)
    }
}

/// Records [`TapeNn::post_norm_block`](crate::TapeNn::post_norm_block) (documented there).
pub(crate) fn post_norm_block<T: Real>(
    tape: &mut Tape<T>,
    blk: PostNormBlock,
) -> Result<Var, TapeError> {
    let mut inputs = vec![blk.x];
    let source = match blk.qkv {
        BlockQkv::Project {
            wq,
            bq,
            wk,
            bk,
            wv,
            bv,
        } => {
            inputs.extend([wq, bq, wk, bk, wv, bv]);
            BlockSource::Project
        }
        BlockQkv::Given { q, k, v } => {
            inputs.extend([q, k, v]);
            BlockSource::Given
        }
        BlockQkv::Attended { a } => {
            inputs.push(a);
            BlockSource::Attended
        }
    };
    let t = blk.tail;
    inputs.extend([
        t.wo, t.bo, t.ln1_gain, t.ln1_bias, t.w1, t.b1, t.w2, t.b2, t.ln2_gain, t.ln2_bias,
    ]);
    let op = BlockOp::<T>(PostNormKernel::new(BlockSettings {
        heads: blk.heads,
        scale: blk.scale,
        eps: blk.eps,
        source,
        key_lengths: blk.key_lengths,
        queries: blk.queries,
        keep_cols_p: false,
    }));
    Ok(tape.fused(Box::new(op), &inputs)?[0])
}
