//! [`ForwardPlan::FusedBlocks`](super::ForwardPlan::FusedBlocks): the tabled plan with every
//! post-norm block (attention, output projection, residual, layer norm, feed-forward with
//! bias and ReLU, residual, layer norm) as one fused tape op
//! ([`efa_nn::ops::block`]), for the dense continuous-input models (the paper's
//! temperature EFAs, docs/paper.md §6.2–§6.3).
//!
//! The work is the tabled plan's: the first block's queries, keys and values are gathered
//! from projected tables, continuous inputs run once per distinct input, and the last block
//! runs its query (and everything after its attention) at the target rows only. What changes
//! is how a block is computed: one node per block whose forward and backward run over
//! cache-sized chunks of whole samples in parallel, on weights packed once per call; the
//! backward forms the attention probabilities again from kept softmax statistics where every
//! row is a query (the last block's one-query rows keep theirs). When a batch holds several targets of one
//! context (a day of the temperature data), the first block's attention runs once per context
//! with a leave-one-out correction per target (`shared.rs`). The result is the same function
//! up to round-off (tested against the general plan and the loop reference).

use super::shared::{first_block_attention, Contexts};
use crate::batch::Samples;
use crate::efa::continuous::Sharing;
use crate::efa::inputs::Proj;
use crate::efa::{BlockVars, EfaConfig, EfaVars};
use crate::ModelError;
use efa_nn::ops::block::{BlockQkv, BlockTail, PostNormBlock};
use efa_nn::TapeNn;
use efa_num::Real;
use efa_tape::{Tape, Var};

/// The parameters after a block's attention as the fused op takes them.
fn tail(block: &BlockVars) -> Result<BlockTail, ModelError> {
    let missing = |what: &str| ModelError::MissingParam(format!("{what} of a post-norm block"));
    let (ln1, ffn, ln2) = (
        block.ln1.as_ref().ok_or_else(|| missing("ln1"))?,
        block.ffn.as_ref().ok_or_else(|| missing("ffn"))?,
        block.ln2.as_ref().ok_or_else(|| missing("ln2"))?,
    );
    let bias = |b: Option<Var>, what: &str| b.ok_or_else(|| missing(what));
    Ok(BlockTail {
        wo: block.attn.o.w,
        bo: bias(block.attn.o.b, "attn.o.b")?,
        ln1_gain: ln1.gain,
        ln1_bias: ln1.bias,
        w1: ffn.inner.w,
        b1: bias(ffn.inner.b, "ffn1.b")?,
        w2: ffn.outer.w,
        b2: bias(ffn.outer.b, "ffn2.b")?,
        ln2_gain: ln2.gain,
        ln2_bias: ln2.bias,
    })
}

/// The projection kernels and biases of a block's attention.
fn projections(block: &BlockVars) -> Result<BlockQkv, ModelError> {
    let a = &block.attn;
    let bias = |b: Option<Var>| {
        b.ok_or_else(|| ModelError::MissingParam("attention projection bias".into()))
    };
    Ok(BlockQkv::Project {
        wq: a.q.w,
        bq: bias(a.q.b)?,
        wk: a.k.w,
        bk: bias(a.k.b)?,
        wv: a.v.w,
        bv: bias(a.v.b)?,
    })
}

/// The fused-blocks plan (see the module docs): the trimmed batch, the inputs once per
/// distinct input, block 0's projections from the projected tables, every block one
/// `post_norm_block` node, the last one at the target rows only; then the head.
pub(crate) fn forward<T: Real>(
    cfg: &EfaConfig,
    tape: &mut Tape<T>,
    vars: &EfaVars,
    batch: &Samples,
) -> Result<Var, ModelError> {
    let batch = cfg.trimmed(batch);
    let batch = batch.as_ref();
    let (b, d) = (batch.len(), cfg.d_model());
    let inputs = cfg.inputs(tape, vars, batch, None, Sharing::Distinct)?;
    let mut x = cfg.embed(tape, vars, &inputs)?;
    let last = vars.blocks.len().saturating_sub(1);
    // Contexts shared by several targets (only a first block that is not the last uses them).
    let shared = match last {
        0 => None,
        _ => Contexts::of(batch, &inputs.ids)?,
    };
    for (l, block) in vars.blocks.iter().enumerate() {
        let targets = l == last;
        let qkv = if l == 0 {
            // Block 0 reads the raw inputs: its projections are gathered from the
            // projected tables; with a single block the query is projected at the
            // target rows only.
            if targets {
                let rows = tape.gather_positions(x, &batch.pred_idx)?;
                let rows = tape.reshape(rows, &[b, 1, d])?;
                let q = block.attn.q.apply(tape, rows)?;
                let [k, v] =
                    cfg.table_projections(tape, vars, &inputs, &block.attn, [Proj::K, Proj::V])?;
                BlockQkv::Given { q, k, v }
            } else if let Some(cx) = shared.as_ref() {
                // Several targets per context: the shared-context attention.
                let a = first_block_attention(cfg, tape, vars, &inputs, &block.attn, batch, cx)?;
                BlockQkv::Attended { a }
            } else {
                let [q, k, v] = cfg.table_projections(
                    tape,
                    vars,
                    &inputs,
                    &block.attn,
                    [Proj::Q, Proj::K, Proj::V],
                )?;
                BlockQkv::Given { q, k, v }
            }
        } else {
            projections(block)?
        };
        x = tape.post_norm_block(PostNormBlock {
            x,
            qkv,
            tail: tail(block)?,
            heads: cfg.heads,
            scale: 1.0 / (cfg.key_dim as f64).sqrt(),
            eps: cfg.ln_eps,
            key_lengths: Some(batch.lengths.clone()),
            queries: targets.then(|| batch.pred_idx.clone()),
        })?;
    }
    // Target rows (the last block's output) → head MLP → η.
    let h = if vars.blocks.is_empty() {
        tape.gather_positions(x, &batch.pred_idx)?
    } else {
        tape.reshape(x, &[b, d])?
    };
    cfg.head(tape, &vars.head, h)
}
