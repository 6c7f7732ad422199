//! One attention block's parameters and the per-position work around its attention
//! (residual, layer norm, feed-forward), and the head MLP: pieces shared by every plan.

use super::{EfaConfig, Norm};
use crate::ModelError;
use efa_nn::layers::{AttentionVars, DenseVars, LayerNormVars, MlpVars};
use efa_num::Real;
use efa_tape::{Tape, Var};

/// The parameters of block `l`: `block{l}.attn.*`, and with layer norm `block{l}.ln1.*`,
/// with a feed-forward block `block{l}.ffn1.*`, `block{l}.ffn2.*` (and `block{l}.ln2.*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockVars<H = Var> {
    /// Multi-head attention.
    pub attn: AttentionVars<H>,
    /// Layer norm around the attention (pre- or post-norm).
    pub ln1: Option<LayerNormVars<H>>,
    /// Feed-forward block `ffn2(relu(ffn1(x)))`.
    pub ffn: Option<MlpVars<H>>,
    /// Layer norm around the feed-forward block.
    pub ln2: Option<LayerNormVars<H>>,
}

/// The head MLP: `head{i}` (ReLU) layers, then `out` → η.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeadVars<H = Var> {
    /// Hidden layers with ReLU.
    pub hidden: Vec<DenseVars<H>>,
    /// Output layer (bias iff `out_bias`).
    pub out: DenseVars<H>,
}

impl EfaConfig {
    /// The attention input of a block: `LN1(x)` under pre-norm, else `x`.
    pub(super) fn pre_norm<T: Real>(
        &self,
        tape: &mut Tape<T>,
        block: &BlockVars,
        x: Var,
    ) -> Result<Var, ModelError> {
        match (&block.ln1, self.norm) {
            (Some(ln), Norm::Pre) => Ok(ln.apply(tape, x, self.ln_eps)?),
            _ => Ok(x),
        }
    }

    /// Residual, post-norm and feed-forward of a block after its attention output `a`:
    /// `x + a` (then `LN1` under post-norm), then with a feed-forward block
    /// `x + ffn(x or LN2(x))` (then `LN2` under post-norm).
    pub(super) fn finish_block<T: Real>(
        &self,
        tape: &mut Tape<T>,
        block: &BlockVars,
        x: Var,
        a: Var,
    ) -> Result<Var, ModelError> {
        let mut x = tape.add(x, a)?;
        if let (Some(ln), Norm::Post) = (&block.ln1, self.norm) {
            x = ln.apply(tape, x, self.ln_eps)?;
        }
        if let Some(ffn) = &block.ffn {
            let h = match (&block.ln2, self.norm) {
                (Some(ln), Norm::Pre) => ln.apply(tape, x, self.ln_eps)?,
                _ => x,
            };
            let f = ffn.apply(tape, h)?;
            x = tape.add(x, f)?;
            if let (Some(ln), Norm::Post) = (&block.ln2, self.norm) {
                x = ln.apply(tape, x, self.ln_eps)?;
            }
        }
        Ok(x)
    }

    /// Head MLP → η `[B, out_dim]` from the target rows `[B, d]`.
    pub(super) fn head<T: Real>(
        &self,
        tape: &mut Tape<T>,
        head: &HeadVars,
        mut h: Var,
    ) -> Result<Var, ModelError> {
        for layer in &head.hidden {
            h = layer.apply(tape, h)?;
            h = tape.relu(h)?;
        }
        Ok(head.out.apply(tape, h)?)
    }
}
