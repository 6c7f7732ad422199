//! [`ForwardPlan::TwoBlockFold`](super::ForwardPlan::TwoBlockFold): the paper's two-block
//! models with the first block's output projection folded into the second block's keys and
//! values.

use crate::batch::Samples;
use crate::efa::continuous::Sharing;
use crate::efa::inputs::{target_inputs, Proj};
use crate::efa::{EfaConfig, EfaVars};
use crate::ModelError;
use efa_nn::ops::attention::Attention;
use efa_nn::TapeNn;
use efa_num::Real;
use efa_tape::{Tape, Var};

/// The fold. With `x₁ = x₀ + o₀·W_o + b_o` (`o₀` the first block's attention output,
/// `[B, N, H·K]`):
/// * `x₁·W_k + b_k = (x₀·W_k + b_k) + o₀·(W_o·W_k) + b_o·W_k`, where `x₀·W_k + b_k` comes
///   from the projected tables (as the first block's projections) and `W_o·W_k` is
///   `[H·K, H·K]`; likewise for the values;
/// * `x₁` itself is needed at the target row only (the second block's query and
///   residual), so the output projection runs on `B` rows instead of `B·N`, and `x₀` is
///   embedded at the target row only.
///
/// The batch is trimmed as in the tabled plan. The same function as the general plan up
/// to round-off (tested against it and against the loop reference).
pub(crate) fn forward<T: Real>(
    cfg: &EfaConfig,
    tape: &mut Tape<T>,
    vars: &EfaVars,
    batch: &Samples,
) -> Result<Var, ModelError> {
    let batch = cfg.trimmed(batch);
    let batch = batch.as_ref();
    let [b0, b1] = vars.blocks.as_slice() else {
        return Err(ModelError::Plan {
            plan: "two-block-fold",
            reason: format!(
                "it needs 2 blocks, the parameters have {}",
                vars.blocks.len()
            ),
        });
    };
    let (a0, a1) = (&b0.attn, &b1.attn);
    let (b, d) = (batch.len(), cfg.d_model());
    let (heads, kd) = (cfg.heads, cfg.key_dim);
    let mask = cfg.mask(batch);
    // Block 0 on every position.
    let inputs = cfg.inputs(tape, vars, batch, None, Sharing::Distinct)?;
    let [q0, k0, v0] =
        cfg.table_projections(tape, vars, &inputs, a0, [Proj::Q, Proj::K, Proj::V])?;
    let scale = 1.0 / (kd as f64).sqrt();
    let args = Attention::new(q0, k0, v0).mask(mask).scale(scale);
    let o0 = tape.attention_heads(args, heads)?.o;
    // x₁ at the target rows.
    let at_target = target_inputs(batch);
    let at_target = cfg.inputs(
        tape,
        vars,
        &at_target,
        Some(&batch.pred_idx),
        Sharing::Distinct,
    )?;
    let x0_t = cfg.embed(tape, vars, &at_target)?;
    let x0_t = tape.reshape(x0_t, &[b, d])?;
    let o0_t = tape.gather_positions(o0, &batch.pred_idx)?;
    let a0_t = a0.o.apply(tape, o0_t)?;
    let x1_t = tape.add(x0_t, a0_t)?;
    let x1_t = tape.reshape(x1_t, &[b, 1, d])?;
    // Block 1: keys and values from the tables plus the folded output projection.
    let [tk, tv] = cfg.table_projections(tape, vars, &inputs, a1, [Proj::K, Proj::V])?;
    let bo = a0.o.b.ok_or_else(|| {
        ModelError::MissingParam("block0.attn.o.b (the fold needs the output bias)".into())
    })?;
    let wo = a0.o.w;
    let bo = tape.reshape(bo, &[1, d])?;
    let mut kv = [tk, tv];
    for (slot, proj) in kv.iter_mut().zip([&a1.k, &a1.v]) {
        let w = proj.w;
        let w_fold = tape.matmul(wo, w, false, false)?;
        let b_fold = tape.matmul(bo, w, false, false)?;
        let hk = tape.shape(w)[1];
        let b_fold = tape.reshape(b_fold, &[hk])?;
        let folded = tape.linear(o0, w_fold, Some(b_fold))?;
        *slot = tape.add(*slot, folded)?;
    }
    let q1 = a1.q.apply(tape, x1_t)?;
    let a1_t = a1.attend(tape, heads, kd, (q1, kv[0], kv[1]), &cfg.target_mask(batch))?;
    let x2 = tape.add(x1_t, a1_t)?;
    let h = tape.reshape(x2, &[b, d])?;
    cfg.head(tape, &vars.head, h)
}
