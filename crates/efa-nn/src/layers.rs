//! The layers models are built from, each a struct of typed parameter handles with its
//! declaration (names, shapes, Keras initialisers) and its forward on the tape.
//!
//! Every struct is generic over the handle `H` a [`ParamSink`] gives out: `()` while the
//! parameters are drawn, [`Var`] (the default) once a parameter set is registered on a tape.

use crate::ops::attention::{Attention, Mask};
use crate::params::{InitKind, ParamSink};
use crate::{NnError, TapeNn};
use efa_num::Real;
use efa_tape::{Tape, Var};

/// An affine map `y = x·W + b` over the last axis: `{prefix}.w` `[fan_in, fan_out]`
/// (Glorot-uniform) and, when the layer has a bias, `{prefix}.b` `[fan_out]` (zeros).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DenseVars<H = Var> {
    /// Kernel `[fan_in, fan_out]`.
    pub w: H,
    /// Bias `[fan_out]`, present iff the layer was declared with one.
    pub b: Option<H>,
}

impl<H: Copy> DenseVars<H> {
    /// Declares `{prefix}.w` and, with `bias`, `{prefix}.b`.
    pub fn declare<S: ParamSink<Handle = H>>(
        s: &mut S,
        prefix: &str,
        fan_in: usize,
        fan_out: usize,
        bias: bool,
    ) -> Result<Self, NnError> {
        let w = s.param(
            &format!("{prefix}.w"),
            &[fan_in, fan_out],
            InitKind::Glorot { fan_in, fan_out },
        )?;
        let b = if bias {
            Some(s.param(&format!("{prefix}.b"), &[fan_out], InitKind::Zeros)?)
        } else {
            None
        };
        Ok(Self { w, b })
    }
}

impl DenseVars {
    /// `y = x·W (+ b)` for `x` `[…, fan_in]`, one tape node.
    pub fn apply<T: Real>(&self, tape: &mut Tape<T>, x: Var) -> Result<Var, NnError> {
        Ok(tape.linear(x, self.w, self.b)?)
    }
}

/// Two dense layers with a ReLU between: `outer(relu(inner(x)))`, declared as `{name}1` and
/// `{name}2` (the feed-forward block of a layer, and the continuous-input MLPs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlpVars<H = Var> {
    /// First layer (`{name}1`).
    pub inner: DenseVars<H>,
    /// Second layer (`{name}2`).
    pub outer: DenseVars<H>,
}

impl<H: Copy> MlpVars<H> {
    /// Declares `{name}1` `[fan_in, hidden]` and `{name}2` `[hidden, fan_out]`, both with biases.
    pub fn declare<S: ParamSink<Handle = H>>(
        s: &mut S,
        name: &str,
        fan_in: usize,
        hidden: usize,
        fan_out: usize,
    ) -> Result<Self, NnError> {
        Ok(Self {
            inner: DenseVars::declare(s, &format!("{name}1"), fan_in, hidden, true)?,
            outer: DenseVars::declare(s, &format!("{name}2"), hidden, fan_out, true)?,
        })
    }
}

impl MlpVars {
    /// `outer(relu(inner(x)))`.
    pub fn apply<T: Real>(&self, tape: &mut Tape<T>, x: Var) -> Result<Var, NnError> {
        let h = self.inner.apply(tape, x)?;
        let h = tape.relu(h)?;
        self.outer.apply(tape, h)
    }
}

/// Layer norm over the last axis: `{prefix}.gain` (ones) and `{prefix}.bias` (zeros), `[d]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerNormVars<H = Var> {
    /// Gain γ.
    pub gain: H,
    /// Shift β.
    pub bias: H,
}

impl<H: Copy> LayerNormVars<H> {
    /// Declares `{prefix}.gain` and `{prefix}.bias` of width `d`.
    pub fn declare<S: ParamSink<Handle = H>>(
        s: &mut S,
        prefix: &str,
        d: usize,
    ) -> Result<Self, NnError> {
        Ok(Self {
            gain: s.param(&format!("{prefix}.gain"), &[d], InitKind::Ones)?,
            bias: s.param(&format!("{prefix}.bias"), &[d], InitKind::Zeros)?,
        })
    }
}

impl LayerNormVars {
    /// `γ·(x − μ)/√(σ² + ε) + β` over the last axis.
    pub fn apply<T: Real>(&self, tape: &mut Tape<T>, x: Var, eps: f64) -> Result<Var, NnError> {
        Ok(tape.layer_norm(x, self.gain, self.bias, T::from_f64(eps))?)
    }
}

/// Multi-head attention with the Keras `MultiHeadAttention` parameterisation: per-head
/// query, key and value projections of width `key_dim` with biases, scores
/// `(Q/√key_dim)·Kᵀ`, softmax over the visible keys, and an output projection back to the
/// model width with bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionVars<H = Var> {
    /// Query projection `[d, H·K]`.
    pub q: DenseVars<H>,
    /// Key projection `[d, H·K]`.
    pub k: DenseVars<H>,
    /// Value projection `[d, H·K]`.
    pub v: DenseVars<H>,
    /// Output projection `[H·K, d]`.
    pub o: DenseVars<H>,
}

impl<H: Copy> AttentionVars<H> {
    /// Declares `{prefix}.{q,k,v,o}.{w,b}` with Keras's fans: the (D, H, K) projection kernels
    /// have fan_in = H·D and fan_out = K·D; the (H, K, D) output kernel has fan_in = K·H and
    /// fan_out = D·H.
    pub fn declare<S: ParamSink<Handle = H>>(
        s: &mut S,
        prefix: &str,
        heads: usize,
        key_dim: usize,
        d: usize,
    ) -> Result<Self, NnError> {
        let hk = heads * key_dim;
        let mut proj = |name: &str| -> Result<DenseVars<H>, NnError> {
            let w = s.param(
                &format!("{prefix}.{name}.w"),
                &[d, hk],
                InitKind::Glorot {
                    fan_in: heads * d,
                    fan_out: key_dim * d,
                },
            )?;
            let b = s.param(&format!("{prefix}.{name}.b"), &[hk], InitKind::Zeros)?;
            Ok(DenseVars { w, b: Some(b) })
        };
        let (q, k, v) = (proj("q")?, proj("k")?, proj("v")?);
        let w = s.param(
            &format!("{prefix}.o.w"),
            &[hk, d],
            InitKind::Glorot {
                fan_in: key_dim * heads,
                fan_out: d * heads,
            },
        )?;
        let b = s.param(&format!("{prefix}.o.b"), &[d], InitKind::Zeros)?;
        Ok(Self {
            q,
            k,
            v,
            o: DenseVars { w, b: Some(b) },
        })
    }
}

impl AttentionVars {
    /// Attention of projected `q` `[B, Nq, H·K]` over projected `k`, `v` `[B, Nk, H·K]` (given
    /// as `(q, k, v)`) on the fused kernel, then the output projection → `[B, Nq, d]`.
    pub fn attend<T: Real>(
        &self,
        tape: &mut Tape<T>,
        heads: usize,
        key_dim: usize,
        (q, k, v): (Var, Var, Var),
        mask: &Mask,
    ) -> Result<Var, NnError> {
        let scale = 1.0 / (key_dim as f64).sqrt();
        let args = Attention::new(q, k, v).mask(mask.clone()).scale(scale);
        let o = tape.attention_heads(args, heads)?.o;
        self.o.apply(tape, o)
    }

    /// Attention of queries projected from `xq` `[B, Nq, d]` over keys and values projected
    /// from `xkv` `[B, Nk, d]` (self-attention when `xq = xkv`).
    pub fn apply<T: Real>(
        &self,
        tape: &mut Tape<T>,
        heads: usize,
        key_dim: usize,
        xq: Var,
        xkv: Var,
        mask: &Mask,
    ) -> Result<Var, NnError> {
        let q = self.q.apply(tape, xq)?;
        let k = self.k.apply(tape, xkv)?;
        let v = self.v.apply(tape, xkv)?;
        self.attend(tape, heads, key_dim, (q, k, v), mask)
    }
}
