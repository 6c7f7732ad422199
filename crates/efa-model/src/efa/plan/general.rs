//! [`ForwardPlan::General`](super::ForwardPlan::General): the EFA forward as defined, with
//! nothing shared between positions, and the per-layer attention trace it can record.

use crate::batch::Samples;
use crate::efa::continuous::Sharing;
use crate::efa::{EfaConfig, EfaVars};
use crate::ModelError;
use efa_nn::ops::attention::Mask;
use efa_num::Real;
use efa_tape::{Tape, Var};

/// What the general plan records of each block for inspection: the projected queries and
/// keys `[B, N, H·K]` (the attention scores are `scale·q·kᵀ` per head) and the mask.
#[derive(Clone, Debug)]
pub struct LayerTrace {
    /// Projected queries.
    pub q: Var,
    /// Projected keys.
    pub k: Var,
    /// The keys each query sees.
    pub mask: Mask,
}

/// The general plan: embed every position, run every block on every position with
/// dense projections (`LN1` first under pre-norm), gather the target rows, run the head.
/// With `trace`, each block's projected queries and keys are recorded.
pub(crate) fn forward<T: Real>(
    cfg: &EfaConfig,
    tape: &mut Tape<T>,
    vars: &EfaVars,
    batch: &Samples,
    mut trace: Option<&mut Vec<LayerTrace>>,
) -> Result<Var, ModelError> {
    let inputs = cfg.inputs(tape, vars, batch, None, Sharing::PerPosition)?;
    let mut x = cfg.embed(tape, vars, &inputs)?;
    let mask = cfg.mask(batch);
    for block in &vars.blocks {
        let h = cfg.pre_norm(tape, block, x)?;
        let attn = &block.attn;
        let q = attn.q.apply(tape, h)?;
        let k = attn.k.apply(tape, h)?;
        let v = attn.v.apply(tape, h)?;
        if let Some(t) = trace.as_deref_mut() {
            t.push(LayerTrace {
                q,
                k,
                mask: mask.clone(),
            });
        }
        let a = attn.attend(tape, cfg.heads, cfg.key_dim, (q, k, v), &mask)?;
        x = cfg.finish_block(tape, block, x, a)?;
    }
    let h = tape.gather_positions(x, &batch.pred_idx)?;
    cfg.head(tape, &vars.head, h)
}
