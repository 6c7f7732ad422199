//! [`ForwardPlan::QueryStream`](super::ForwardPlan::QueryStream): causal models over
//! batches with sequence ids, one content stream per sequence and one query row per target.

use crate::batch::Samples;
use crate::efa::continuous::Sharing;
use crate::efa::inputs::target_inputs;
use crate::efa::{EfaConfig, EfaVars};
use crate::ModelError;
use efa_nn::ops::attention::Mask;
use efa_nn::ops::gather::{Part, NONE};
use efa_nn::TapeNn;
use efa_num::Real;
use efa_tape::{Tape, Var};
use std::collections::HashMap;

/// In sample `s` (target position `p_s` of sequence `g`), a position `j < p_s` holds the
/// sequence's own input and, under the causal mask, sees only positions `≤ j`: its
/// representation at every layer is the same for every target of the sequence after `j`.
/// So each sequence runs once, unmasked, as a causal "content" stream over positions
/// `0..max p`, and each target runs as a one-row "query" stream: its own input (the \[MASK\]
/// row and its position) attending, at layer `l`, to the content keys/values of layer `l`
/// at positions `< p_s` and to its own key/value. This is the per-sample computation with
/// the shared prefix computed once: losses and gradients equal those of the per-sample path
/// up to round-off (tested), at about `len`× less work when a batch holds whole sequences
/// ([`crate::train::Batching::Sequences`]). Samples sharing an id must agree at every
/// position before their target (checked).
pub(crate) fn forward<T: Real>(
    cfg: &EfaConfig,
    tape: &mut Tape<T>,
    vars: &EfaVars,
    batch: &Samples,
) -> Result<Var, ModelError> {
    let group = batch
        .group
        .as_ref()
        .ok_or_else(|| ModelError::Batch("the query stream needs `group`".into()))?;
    let (s_len, width) = batch.tokens.dim();
    let d = cfg.d_model();
    // Sequences in order of first appearance; the representative of a sequence is its
    // sample with the latest target, whose inputs before that target are all unmasked.
    let mut slot: HashMap<usize, usize> = HashMap::new();
    let mut reps: Vec<usize> = Vec::new();
    let mut seq_of = Vec::with_capacity(s_len);
    for (s, &g) in group.iter().enumerate().take(s_len) {
        let c = *slot.entry(g).or_insert_with(|| {
            reps.push(s);
            reps.len() - 1
        });
        if batch.pred_idx[s] > batch.pred_idx[reps[c]] {
            reps[c] = s;
        }
        seq_of.push(c);
    }
    for s in 0..s_len {
        let r = reps[seq_of[s]];
        let p = batch.pred_idx[s].min(width);
        let differs = (0..p).find(|&j| {
            batch.tokens[[s, j]] != batch.tokens[[r, j]]
                || batch
                    .values
                    .as_ref()
                    .is_some_and(|v| v[[s, j]] != v[[r, j]])
        });
        if let Some(j) = differs {
            return Err(ModelError::Batch(format!(
                "field `group`: samples {r} and {s} share sequence id {} but differ at \
                 position {j}, before the target of sample {s}",
                group[s]
            )));
        }
    }
    let c_len = reps.len();
    // Content positions 0..wc (at least one row, so that every tensor is non-empty).
    let wc = reps
        .iter()
        .map(|&r| batch.pred_idx[r])
        .max()
        .unwrap_or(0)
        .clamp(1, width.max(1));
    let content = Samples {
        tokens: ndarray::Array2::from_shape_fn((c_len, wc), |(c, j)| batch.tokens[[reps[c], j]]),
        values: batch
            .values
            .as_ref()
            .map(|v| ndarray::Array2::from_shape_fn((c_len, wc), |(c, j)| v[[reps[c], j]])),
        weights: None,
        center: None,
        lengths: vec![wc; c_len],
        pred_idx: vec![0; c_len],
        targets: crate::Targets::Class(vec![0; c_len]),
        group: None,
    };
    let query = target_inputs(batch);
    let content = cfg.inputs(tape, vars, &content, None, Sharing::Distinct)?;
    let query = cfg.inputs(tape, vars, &query, Some(&batch.pred_idx), Sharing::Distinct)?;
    let mut xc = cfg.embed(tape, vars, &content)?;
    let mut xq = cfg.embed(tape, vars, &query)?;
    // Keys of each target: content rows g·wc + j for j < p_s, then its own row at p_s
    // (later positions are masked).
    let wk = batch.pred_idx.iter().max().map_or(1, |p| p + 1);
    let content_rows = ndarray::Array2::from_shape_fn((s_len, wk), |(s, j)| {
        if j < batch.pred_idx[s] {
            seq_of[s] * wc + j
        } else {
            NONE
        }
    });
    let own_rows =
        ndarray::Array2::from_shape_fn(
            (s_len, wk),
            |(s, j)| {
                if j == batch.pred_idx[s] {
                    s
                } else {
                    NONE
                }
            },
        );
    let key_mask =
        Mask::none().key_lengths(batch.pred_idx.iter().map(|p| p + 1).collect::<Vec<_>>());
    let causal = Mask::causal();
    let hk = cfg.heads * cfg.key_dim;
    let (heads, kd) = (cfg.heads, cfg.key_dim);
    let layers = vars.blocks.len();
    for (l, block) in vars.blocks.iter().enumerate() {
        let attn = &block.attn;
        let hc = cfg.pre_norm(tape, block, xc)?;
        let hq = cfg.pre_norm(tape, block, xq)?;
        let last = l + 1 == layers;
        // Both streams' keys and values; the query stream's keys gathered from both.
        let (kc, vc) = (attn.k.apply(tape, hc)?, attn.v.apply(tape, hc)?);
        let (qq, kq, vq) = (
            attn.q.apply(tape, hq)?,
            attn.k.apply(tape, hq)?,
            attn.v.apply(tape, hq)?,
        );
        let mut gathered = [kc; 2];
        for (slot, (c, q)) in gathered.iter_mut().zip([(kc, kq), (vc, vq)]) {
            let parts = vec![
                Part {
                    ids: content_rows.clone(),
                    col: 0,
                },
                Part {
                    ids: own_rows.clone(),
                    col: 0,
                },
            ];
            *slot = tape.gather_sum(&[c, q], parts, None, hk, 1)?[0];
        }
        let aq = attn.attend(tape, heads, kd, (qq, gathered[0], gathered[1]), &key_mask)?;
        if !last {
            let qc = attn.q.apply(tape, hc)?;
            let ac = attn.attend(tape, heads, kd, (qc, kc, vc), &causal)?;
            xc = cfg.finish_block(tape, block, xc, ac)?;
        }
        xq = cfg.finish_block(tape, block, xq, aq)?;
    }
    let hq = tape.reshape(xq, &[s_len, d])?;
    cfg.head(tape, &vars.head, hq)
}
