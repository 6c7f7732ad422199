//! Layers built from tape ops: dense (affine) maps and multi-head attention on the fused kernel.

use efa_tape::ops::attention::AttentionMask;
use crate::params::{zeros, Init, Params};
use crate::ModelError;
use efa_num::Real;
use efa_tape::{Tape, Var};
use std::collections::HashMap;

/// The tape variable of parameter `name`, or [`ModelError::MissingParam`].
pub(crate) fn param(vars: &HashMap<String, Var>, name: &str) -> Result<Var, ModelError> {
    vars.get(name)
        .copied()
        .ok_or_else(|| ModelError::MissingParam(name.to_string()))
}

/// An affine map `y = x·W (+ b)` over the last axis, with a Glorot-uniform kernel and zero bias.
#[derive(Clone, Copy, Debug)]
pub struct Dense {
    /// Input width.
    pub fan_in: usize,
    /// Output width.
    pub fan_out: usize,
    /// With a bias vector.
    pub bias: bool,
}

impl Dense {
    /// Adds `{prefix}.w` `[fan_in, fan_out]` and, with a bias, `{prefix}.b` `[fan_out]`.
    pub fn init<T: Real>(&self, p: &mut Params<T>, init: &mut Init, prefix: &str) {
        p.insert(
            &format!("{prefix}.w"),
            init.dense(self.fan_in, self.fan_out),
        );
        if self.bias {
            p.insert(&format!("{prefix}.b"), zeros(&[self.fan_out]));
        }
    }
}

/// `y = x·W + b` with `x` of shape `[…, fan_in]`; the bias is used when `{prefix}.b` exists.
pub fn dense<T: Real>(
    tape: &mut Tape<T>,
    vars: &HashMap<String, Var>,
    prefix: &str,
    x: Var,
) -> Result<Var, ModelError> {
    let w = param(vars, &format!("{prefix}.w"))?;
    let b = vars.get(&format!("{prefix}.b")).copied();
    Ok(tape.linear(x, w, b)?)
}

/// Multi-head attention with Keras `MultiHeadAttention` parameterisation: per-head query, key
/// and value projections of width `key_dim` with biases, scores `(Q/√key_dim)·Kᵀ`, softmax
/// over the allowed keys, and an output projection back to `d_model` with bias.
#[derive(Clone, Copy, Debug)]
pub struct Mha {
    /// Number of heads H.
    pub heads: usize,
    /// Width per head.
    pub key_dim: usize,
    /// Model width D.
    pub d_model: usize,
}

impl Mha {
    /// Adds `{prefix}.{q,k,v}.{w,b}` and `{prefix}.o.{w,b}` with Keras's fans: the (D, H, K)
    /// projection kernels have fan_in = H·D and fan_out = K·D; the (H, K, D) output kernel has
    /// fan_in = K·H and fan_out = D·H.
    pub fn init<T: Real>(&self, p: &mut Params<T>, init: &mut Init, prefix: &str) {
        let (h, k, d) = (self.heads, self.key_dim, self.d_model);
        for name in ["q", "k", "v"] {
            p.insert(
                &format!("{prefix}.{name}.w"),
                init.glorot(&[d, h * k], h * d, k * d),
            );
            p.insert(&format!("{prefix}.{name}.b"), zeros(&[h * k]));
        }
        p.insert(
            &format!("{prefix}.o.w"),
            init.glorot(&[h * k, d], k * h, d * h),
        );
        p.insert(&format!("{prefix}.o.b"), zeros(&[d]));
    }
}

/// Self-attention of `x` `[B, N, D]` → `[B, N, D]` through the fused kernel.
pub fn mha<T: Real>(
    tape: &mut Tape<T>,
    vars: &HashMap<String, Var>,
    cfg: &Mha,
    prefix: &str,
    x: Var,
    mask: &AttentionMask,
) -> Result<Var, ModelError> {
    mha_cross(tape, vars, cfg, prefix, x, x, mask)
}

/// Attention of queries from `xq` `[B, Nq, D]` over keys and values from `xkv` `[B, Nk, D]`
/// → `[B, Nq, D]`, with the same parameters as [`mha`] (self-attention is `xq = xkv`).
pub fn mha_cross<T: Real>(
    tape: &mut Tape<T>,
    vars: &HashMap<String, Var>,
    cfg: &Mha,
    prefix: &str,
    xq: Var,
    xkv: Var,
    mask: &AttentionMask,
) -> Result<Var, ModelError> {
    let mut proj = [xq; 3];
    for (slot, (name, x)) in proj.iter_mut().zip([("q", xq), ("k", xkv), ("v", xkv)]) {
        *slot = dense(tape, vars, &format!("{prefix}.{name}"), x)?;
    }
    let scale = 1.0 / (cfg.key_dim as f64).sqrt();
    let (o, _lse) = tape.attention_heads(proj[0], proj[1], proj[2], cfg.heads, mask, scale)?;
    dense(tape, vars, &format!("{prefix}.o"), o)
}
