//! [`ForwardPlan::Tabled`](super::ForwardPlan::Tabled): work proportional to what the
//! targets can see.

use crate::batch::Samples;
use crate::efa::continuous::Sharing;
use crate::efa::inputs::Proj;
use crate::efa::{EfaConfig, EfaVars, Norm};
use crate::ModelError;
use efa_num::Real;
use efa_tape::{Tape, Var};

/// The tabled plan: the trimmed batch; the first block's projections gathered from the
/// projected tables when it reads the raw inputs (no pre-norm); continuous inputs once per
/// distinct input; every block on every position except the last, whose queries run at
/// the target rows only (after the last attention everything is per position, so only the
/// target rows are ever read: L − 1 full blocks plus one row).
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
    let mask = cfg.mask(batch);
    let target_mask = cfg.target_mask(batch);
    let pre = cfg.norm == Norm::Pre;
    let (heads, kd) = (cfg.heads, cfg.key_dim);
    for (l, block) in vars.blocks.iter().enumerate() {
        let h = cfg.pre_norm(tape, block, x)?;
        let attn = &block.attn;
        let tabled = l == 0 && !pre;
        let a = if l + 1 == vars.blocks.len() && tabled {
            // A single block reading the raw inputs: its keys and values come from the
            // projected tables, so `x`'s gradient has only the residual's and the queries'
            // terms, added in one gather of the target rows.
            let rows = tape.gather_positions(x, &batch.pred_idx)?;
            x = tape.reshape(rows, &[b, 1, d])?;
            let q = attn.q.apply(tape, x)?;
            let [k, v] = cfg.table_projections(tape, vars, &inputs, attn, [Proj::K, Proj::V])?;
            attn.attend(tape, heads, kd, (q, k, v), &target_mask)?
        } else if l + 1 == vars.blocks.len() {
            // The target rows of the attention's query input, gathered before the keys and
            // values are projected, and (below) those of the residual, gathered after the
            // attention: `x`'s gradient then adds the residual's, the values', the keys' and
            // the queries' terms in the order the general plan adds them, so that the plans'
            // gradients agree bit for bit from the last block down to the first (one gather
            // for both added the same terms in another order: an ulp that sharp attention
            // amplifies to percents of the input MLPs' gradients in f32).
            let rows = tape.gather_positions(h, &batch.pred_idx)?;
            let hq = tape.reshape(rows, &[b, 1, d])?;
            let a = attn.apply(tape, heads, kd, hq, h, &target_mask)?;
            let rows = tape.gather_positions(x, &batch.pred_idx)?;
            x = tape.reshape(rows, &[b, 1, d])?;
            a
        } else if tabled {
            let [q, k, v] =
                cfg.table_projections(tape, vars, &inputs, attn, [Proj::Q, Proj::K, Proj::V])?;
            attn.attend(tape, heads, kd, (q, k, v), &mask)?
        } else {
            attn.apply(tape, heads, kd, h, h, &mask)?
        };
        x = cfg.finish_block(tape, block, x, a)?;
    }
    // Target rows (already gathered by the last block) → head MLP → η.
    let h = if vars.blocks.is_empty() {
        tape.gather_positions(x, &batch.pred_idx)?
    } else {
        tape.reshape(x, &[b, d])?
    };
    cfg.head(tape, &vars.head, h)
}
