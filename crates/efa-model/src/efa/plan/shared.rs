//! The first block's attention in the fused-blocks plan when a batch holds several targets of
//! one context (the temperature models' full batches: a day's 44 samples, one per target
//! city, whose inputs differ only at their own target position).
//!
//! Samples with the same sequence id (`Samples::group`) form a *context*: they read the same
//! inputs (items, values or lag rows, continuous values, positions) at every position but
//! their own targets, which hold the \[MASK\] input (checked), and have the same length. The first block's queries, keys and values are then
//! a per-context base `[G, N, H·K]` (every position's observed input) plus one replaced row per
//! sample (its target's input), and the attention of all the context's samples runs as
//! leave-one-out sums over the base ([`efa_nn::ops::shared_attention`]): O(N²·H·K) per context
//! and O(N·H·K) per sample instead of O(N²·H·K) per sample. The rest of the block (output
//! projection, norms, feed-forward) runs per sample as before
//! ([`efa_nn::ops::block::BlockQkv::Attended`]). Same function, different round-off (tested
//! against the general plan with the other plans).

use crate::batch::Samples;
use crate::efa::inputs::{InputIds, Inputs, Proj};
use crate::efa::{EfaConfig, EfaVars};
use crate::ModelError;
use efa_nn::layers::AttentionVars;
use efa_nn::ops::shared_attention::SharedContextAttention;
use efa_nn::TapeNn;
use efa_num::Real;
use efa_tape::{Tape, Var};
use ndarray::Array2;
use std::collections::HashMap;

/// The contexts of a batch: each sample's context, each context's length, and for each base
/// row `(g, j)` the sample whose input row `j` it reads (one whose target is not `j`).
pub(super) struct Contexts {
    group: Vec<usize>,
    lengths: Vec<usize>,
    base_from: Vec<usize>,
}

impl Contexts {
    /// The contexts of `batch` (its sequence ids, `Samples::group`) when sharing pays: at
    /// least two samples per context on average, each context of one length and every
    /// target a visible key (else `None`: the per-sample attention runs). `ids` are the
    /// input rows the model reads at each position (with distinct inputs: equal inputs, equal
    /// rows).
    ///
    /// # Errors
    /// Samples that share an id but read different inputs at a position that is neither's
    /// target (the promise of `Samples::group` broken), naming both samples and the position.
    pub(super) fn of(batch: &Samples, ids: &InputIds) -> Result<Option<Contexts>, ModelError> {
        let (b, n) = ids.item.dim();
        let Some(seq) = &batch.group else {
            return Ok(None);
        };
        if b < 2 || (0..b).any(|s| batch.pred_idx[s] >= batch.lengths[s].min(n)) {
            return Ok(None);
        }
        // Contexts in order of first appearance.
        let mut slot: HashMap<usize, usize> = HashMap::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut group = Vec::with_capacity(b);
        for (s, &id) in seq.iter().enumerate().take(b) {
            let g = *slot.entry(id).or_insert_with(|| {
                members.push(Vec::new());
                members.len() - 1
            });
            members[g].push(s);
            group.push(g);
        }
        if 2 * members.len() > b
            || members
                .iter()
                .any(|m| m.iter().any(|&s| batch.lengths[s] != batch.lengths[m[0]]))
        {
            return Ok(None);
        }
        let lengths = members.iter().map(|m| batch.lengths[m[0]]).collect();
        let base_from: Vec<usize> = members
            .iter()
            .flat_map(|m| {
                (0..n).map(move |j| {
                    m.iter()
                        .copied()
                        .find(|&s| batch.pred_idx[s] != j)
                        .unwrap_or(m[0])
                })
            })
            .collect();
        let parts = [Some(&ids.item), ids.value.as_ref(), ids.position.as_ref()];
        for (s, &g) in group.iter().enumerate() {
            for j in (0..n).filter(|&j| j != batch.pred_idx[s]) {
                let r = base_from[g * n + j];
                if parts.iter().flatten().any(|x| x[[s, j]] != x[[r, j]]) {
                    return Err(ModelError::Batch(format!(
                        "field `group`: samples {r} and {s} of the minibatch share sequence id \
                         {} but read different inputs at position {j}, which is neither's \
                         target",
                        seq[s]
                    )));
                }
            }
        }
        Ok(Some(Contexts {
            group,
            lengths,
            base_from,
        }))
    }

    /// The input rows of the base (`G·N` rows, context by context) and then of each sample's
    /// target, as single-position rows `[G·N + B, 1]`.
    fn ids(&self, ids: &InputIds, pred_idx: &[usize]) -> InputIds {
        let n = ids.item.ncols();
        let rows = |x: &Array2<usize>| {
            let base = self
                .base_from
                .iter()
                .enumerate()
                .map(|(r, &s)| x[[s, r % n]]);
            let targets = pred_idx.iter().enumerate().map(|(s, &t)| x[[s, t]]);
            let all =
                efa_num::pool::collect(self.base_from.len() + pred_idx.len(), base.chain(targets));
            Array2::from_shape_vec((all.len(), 1), all).expect("one column")
        };
        InputIds {
            item: rows(&ids.item),
            value: ids.value.as_ref().map(rows),
            position: ids.position.as_ref().map(rows),
        }
    }
}

/// The first block's attention output `[B, N, H·K]` (before its output projection) for a
/// batch with contexts: the projections of the base and target rows from the projected
/// tables, then the shared-context attention.
pub(super) fn first_block_attention<T: Real>(
    cfg: &EfaConfig,
    tape: &mut Tape<T>,
    vars: &EfaVars,
    inputs: &Inputs,
    attn: &AttentionVars,
    batch: &Samples,
    cx: &Contexts,
) -> Result<Var, ModelError> {
    let (b, n) = batch.tokens.dim();
    let (g, hk) = (cx.lengths.len(), cfg.heads * cfg.key_dim);
    let rows = Inputs {
        items: inputs.items,
        ids: cx.ids(&inputs.ids, &batch.pred_idx),
    };
    let qkv = cfg.table_projections(tape, vars, &rows, attn, [Proj::Q, Proj::K, Proj::V])?;
    let mut base = [qkv[0]; 3];
    let mut target = [qkv[0]; 3];
    for (i, &x) in qkv.iter().enumerate() {
        let x = tape.reshape(x, &[g * n + b, hk])?;
        let head = tape.slice(x, 0, 0, g * n)?;
        base[i] = tape.reshape(head, &[g, n, hk])?;
        target[i] = tape.slice(x, 0, g * n, g * n + b)?;
    }
    Ok(tape.shared_context_attention(SharedContextAttention {
        q: base[0],
        k: base[1],
        v: base[2],
        q_t: target[0],
        k_t: target[1],
        v_t: target[2],
        heads: cfg.heads,
        scale: 1.0 / (cfg.key_dim as f64).sqrt(),
        group: cx.group.clone(),
        target: batch.pred_idx.clone(),
        lengths: cx.lengths.clone(),
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Targets;

    /// Six samples of width 4 in two sequences: 7 (samples 0, 1, 2, 5; targets 0, 1, 3, 1)
    /// and 9 (samples 3, 4, both with target 2).
    fn batch() -> Samples {
        Samples {
            tokens: Array2::zeros((6, 4)),
            values: None,
            weights: None,
            center: None,
            lengths: vec![4; 6],
            pred_idx: vec![0, 1, 3, 2, 2, 1],
            targets: Targets::Real(vec![0.0; 6]),
            group: Some(vec![7, 7, 7, 9, 9, 7]),
        }
    }

    /// The rows each position reads: sequence 7 reads 1, 2, 3, 4 and sequence 9 reads 5, 6,
    /// 7, 8, except at a sample's own target, which reads 100 + its index; positions 0..4.
    fn ids() -> InputIds {
        let b = batch();
        let seq = b.group.unwrap();
        InputIds {
            item: Array2::from_shape_fn((6, 4), |(s, j)| match (j == b.pred_idx[s], seq[s]) {
                (true, _) => 100 + s,
                (false, 7) => 1 + j,
                _ => 5 + j,
            }),
            value: None,
            position: Some(Array2::from_shape_fn((6, 4), |(_, j)| j)),
        }
    }

    #[test]
    fn contexts_are_sequences_and_each_base_row_reads_a_sample_whose_target_it_is_not() {
        let cx = Contexts::of(&batch(), &ids())
            .unwrap()
            .expect("two contexts");
        assert_eq!(cx.group, [0, 0, 0, 1, 1, 0]);
        assert_eq!(cx.lengths, [4, 4]);
        // Sequence 7: position 0 from sample 1 (sample 0 targets it), 1..3 from sample 0;
        // sequence 9: both samples target 2, so its row 2 is sample 3's target (unused).
        assert_eq!(cx.base_from, [1, 0, 0, 0, 3, 3, 3, 3]);
        let r = cx.ids(&ids(), &batch().pred_idx);
        let col = |x: &Array2<usize>| x.column(0).to_vec();
        assert_eq!(
            col(&r.item),
            [1, 2, 3, 4, 5, 6, 103, 8, 100, 101, 102, 103, 104, 105]
        );
        assert_eq!(
            col(r.position.as_ref().unwrap()),
            [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 3, 2, 2, 1]
        );
        assert!(r.value.is_none());
    }

    #[test]
    fn no_contexts_without_ids_or_when_sharing_does_not_pay_or_a_target_is_not_a_key() {
        let none = |b: &Samples| Contexts::of(b, &ids()).unwrap().is_none();
        let mut b = batch();
        b.group = None;
        assert!(none(&b));
        // Four contexts of six samples.
        b.group = Some(vec![7, 7, 8, 9, 9, 6]);
        assert!(none(&b));
        // Lengths that differ inside a sequence.
        let mut b = batch();
        b.lengths[5] = 3;
        assert!(none(&b));
        // A target past its sample's length.
        let mut b = batch();
        b.lengths = vec![4, 4, 3, 4, 4, 4];
        assert!(none(&b));
        assert!(!none(&batch()));
    }

    #[test]
    fn a_sequence_whose_samples_read_different_inputs_is_an_error_naming_them() {
        let mut ids = ids();
        ids.item[[2, 1]] = 50;
        let e = Contexts::of(&batch(), &ids)
            .err()
            .expect("an error")
            .to_string();
        assert!(
            e.contains(
                "samples 0 and 2 of the minibatch share sequence id 7 but read different \
                 inputs at position 1"
            ),
            "{e}"
        );
        // A difference at a target position is the target's own input: no error.
        let mut ids = self::ids();
        ids.position.as_mut().unwrap()[[1, 1]] = 9;
        assert!(Contexts::of(&batch(), &ids).unwrap().is_some());
    }
}
