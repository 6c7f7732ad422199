//! The Exponential Family Attention model (DESIGN §6; PAPER.md §2.3, §3.4, §6.2).
//!
//! Per position, an item embedding is concatenated with the embedding of the observed value
//! (the target's value replaced by a learned \[MASK\] row); a learned position embedding is
//! added; `L` blocks of multi-head attention on the fused kernel with residual connections
//! (optionally a feed-forward block and layer norm) follow; the target position is gathered
//! and a head MLP maps it to the natural parameter η of the chosen family.

#[path = "efa_continuous.rs"]
mod continuous;

use crate::batch::Samples;
use crate::layers::{dense, mha, mha_cross, Dense, Mha};
use crate::ops::attention::AttentionMask;
use crate::params::{zeros, Init, Params};
use crate::ModelError;
use efa_num::Real;
use efa_tape::{Tape, Var};
use ndarray::{ArrayD, IxDyn};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// An observed value at each position, embedded by a lookup table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValueTable {
    /// Rows of the table (value classes, padding and the \[MASK\] row).
    pub rows: usize,
    /// Embedding width.
    pub dim: usize,
}

/// Learned position embeddings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Positions {
    /// Longest sequence.
    pub max_len: usize,
    /// Add the position embedding only where the token is not padding (item models); when
    /// false it is added everywhere, padding included (rating models).
    #[serde(default)]
    pub only_valid: bool,
}

/// Layer-norm placement in each block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Norm {
    /// No layer norm (the paper's sequence models).
    #[default]
    None,
    /// x + f(LN(x)).
    Pre,
    /// LN(x + f(x)) (the paper's temperature model).
    Post,
}

/// How attention is restricted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Keys at positions `< length` (bidirectional pseudo-likelihood, or the rating models'
    /// truncated "unidirectional" contexts).
    #[default]
    Padding,
    /// Query i sees keys j ≤ i only (unidirectional item models).
    Causal,
    /// Both: j ≤ i and j < length.
    CausalPadding,
}

/// Continuous per-position inputs replacing the item embedding (the paper's temperature model,
/// PAPER.md §6.2–§6.3). Per position `j` of sample `b`:
/// * value branch: `v = Dense(dim)(relu(Dense(hidden)(y_bj)))` on the scalar `Samples::weights[b, j]`;
///   at the target (`j = pred_idx[b]`) it is replaced by a learned mask row:
///   `v·(1 − m) + mask_emb[m]·m` with `m = [j = pred_idx[b]]` (a 2-row table; row 0 is unused,
///   as in the paper);
/// * site branch: `s = Dense(dim)(relu(Dense(hidden)(sites[tokens[b, j]])))`, the per-site
///   features (e.g. latitude, longitude in degrees) selected by `Samples::tokens`; the MLP runs
///   once per site and is gathered, which equals running it at every position;
/// * optional lag branch: `lag_emb[values[b, j]]` with the indicators in `Samples::values`;
/// * fusion: `Dense(item_dim)(relu(Dense(fuse)([v ‖ s ‖ lag])))`, so the model width is `item_dim`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContinuousInputs {
    /// Hidden width of the value and site MLPs (128 in the paper).
    pub hidden: usize,
    /// Output width of each branch and of the lag embedding (32).
    pub dim: usize,
    /// Site feature table: one row per site id (every row the same width).
    pub sites: Vec<Vec<f64>>,
    /// Rows of the lag-indicator embedding (2 or 3 in the paper's lag models; none without lags).
    #[serde(default)]
    pub lag_rows: Option<usize>,
    /// Hidden width of the fusion MLP (64).
    pub fuse: usize,
}

/// Configuration of an EFA model (serialisable as TOML or JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EfaConfig {
    /// Rows of the item table (padding 0, items, any \[MASK\] token).
    pub items: usize,
    /// Item embedding width.
    pub item_dim: usize,
    /// Zero the item embedding where the token is 0 (padding).
    #[serde(default)]
    pub zero_padding: bool,
    /// Observed-value embedding, concatenated after the item embedding.
    #[serde(default)]
    pub values: Option<ValueTable>,
    /// Learned positions.
    #[serde(default)]
    pub positions: Option<Positions>,
    /// Attention blocks.
    pub layers: usize,
    /// Heads per block.
    pub heads: usize,
    /// Query/key/value width per head.
    pub key_dim: usize,
    /// Hidden width of a feed-forward block after each attention (none if absent).
    #[serde(default)]
    pub ffn: Option<usize>,
    /// Layer-norm placement.
    #[serde(default)]
    pub norm: Norm,
    /// Layer-norm ε (Keras default 1e-3).
    #[serde(default = "default_ln_eps")]
    pub ln_eps: f64,
    /// Hidden widths of the head MLP (ReLU).
    #[serde(default)]
    pub head_hidden: Vec<usize>,
    /// Width of the natural parameter η.
    pub out_dim: usize,
    /// Bias on the output layer.
    #[serde(default)]
    pub out_bias: bool,
    /// Attention restriction.
    #[serde(default)]
    pub direction: Direction,
    /// Continuous inputs instead of the item table (temperature model); `item_dim` is then the
    /// width of the fused representation and `items` is unused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuous: Option<ContinuousInputs>,
}

fn default_ln_eps() -> f64 {
    1e-3
}

impl EfaConfig {
    /// Model width: item width plus value width.
    pub fn d_model(&self) -> usize {
        self.item_dim + self.values.as_ref().map_or(0, |v| v.dim)
    }

    /// Checks the configuration for impossible shapes.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |field: &str, why: &str| {
            Err(ModelError::Config(format!(
                "EFA config field `{field}`: {why}"
            )))
        };
        if self.items == 0 {
            return bad("items", "must be at least 1");
        }
        if self.item_dim == 0 {
            return bad("item_dim", "must be at least 1");
        }
        if self.heads == 0 || self.key_dim == 0 {
            return bad("heads/key_dim", "must be at least 1");
        }
        if self.out_dim == 0 {
            return bad("out_dim", "must be at least 1");
        }
        if let Some(v) = &self.values {
            if v.rows == 0 || v.dim == 0 {
                return bad("values", "rows and dim must be at least 1");
            }
        }
        if let Some(p) = &self.positions {
            if p.max_len == 0 {
                return bad("positions.max_len", "must be at least 1");
            }
        }
        if self.head_hidden.contains(&0) || self.ffn == Some(0) {
            return bad("head_hidden/ffn", "widths must be at least 1");
        }
        if self.ln_eps.is_nan() || self.ln_eps <= 0.0 {
            return bad("ln_eps", "must be positive");
        }
        if let Some(c) = &self.continuous {
            continuous::validate(c, self.values.is_some())?;
        }
        Ok(())
    }

    /// Creates the parameters with the Keras default initialisers (PAPER.md §1).
    pub fn init<T: Real>(&self, seed: u64) -> Params<T> {
        let mut init = Init::new(seed);
        let mut p = Params::new();
        let d = self.d_model();
        match &self.continuous {
            None => p.insert("item_emb", init.embedding(self.items, self.item_dim)),
            Some(c) => continuous::init(c, self.item_dim, &mut p, &mut init),
        }
        if let Some(v) = &self.values {
            p.insert("value_emb", init.embedding(v.rows, v.dim));
        }
        if let Some(pos) = &self.positions {
            p.insert("pos_emb", init.glorot(&[pos.max_len, d], pos.max_len, d));
        }
        for l in 0..self.layers {
            Mha {
                heads: self.heads,
                key_dim: self.key_dim,
                d_model: d,
            }
            .init(&mut p, &mut init, &format!("block{l}.attn"));
            if self.norm != Norm::None {
                p.insert(
                    &format!("block{l}.ln1.gain"),
                    ArrayD::from_elem(IxDyn(&[d]), T::ONE),
                );
                p.insert(&format!("block{l}.ln1.bias"), zeros(&[d]));
            }
            if let Some(h) = self.ffn {
                Dense {
                    fan_in: d,
                    fan_out: h,
                    bias: true,
                }
                .init(&mut p, &mut init, &format!("block{l}.ffn1"));
                Dense {
                    fan_in: h,
                    fan_out: d,
                    bias: true,
                }
                .init(&mut p, &mut init, &format!("block{l}.ffn2"));
                if self.norm != Norm::None {
                    p.insert(
                        &format!("block{l}.ln2.gain"),
                        ArrayD::from_elem(IxDyn(&[d]), T::ONE),
                    );
                    p.insert(&format!("block{l}.ln2.bias"), zeros(&[d]));
                }
            }
        }
        let mut width = d;
        for (i, &h) in self.head_hidden.iter().enumerate() {
            Dense {
                fan_in: width,
                fan_out: h,
                bias: true,
            }
            .init(&mut p, &mut init, &format!("head{i}"));
            width = h;
        }
        Dense {
            fan_in: width,
            fan_out: self.out_dim,
            bias: self.out_bias,
        }
        .init(&mut p, &mut init, "out");
        p
    }

    /// Builds η `[B, out_dim]` for a minibatch on `tape`, reading parameters from `vars`.
    pub fn forward<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &HashMap<String, Var>,
        batch: &Samples,
    ) -> Result<Var, ModelError> {
        let get = |name: &str| {
            vars.get(name)
                .copied()
                .ok_or_else(|| ModelError::MissingParam(name.to_string()))
        };
        let (b, n) = batch.tokens.dim();
        let d = self.d_model();

        // Inputs: item ‖ value embeddings, [B, N, d].
        let tokens = batch.tokens.clone().into_dyn();
        let pad = tokens.mapv(|t| t == 0).insert_axis(ndarray::Axis(2));
        let mut x = match &self.continuous {
            Some(c) => continuous::forward(c, tape, vars, batch)?,
            None => tape.embedding(get("item_emb")?, &tokens)?,
        };
        if self.zero_padding {
            x = tape.masked_fill(x, &pad, T::ZERO)?;
        }
        if let Some(_v) = &self.values {
            let rows = batch.values.as_ref().ok_or_else(|| {
                ModelError::Batch("EFA model with a value table needs `values`".into())
            })?;
            let e = tape.embedding(get("value_emb")?, &rows.clone().into_dyn())?;
            x = tape.concat(&[x, e], 2)?;
        }
        if let Some(pos) = &self.positions {
            if n > pos.max_len {
                return Err(ModelError::Batch(format!(
                    "sequence width {n} exceeds positions.max_len {}",
                    pos.max_len
                )));
            }
            let table = tape.slice(get("pos_emb")?, 0, 0, n)?;
            let mut pe = tape.reshape(table, &[1, n, d])?;
            if pos.only_valid {
                pe = tape.broadcast_to(pe, &[b, n, d])?;
                pe = tape.masked_fill(pe, &pad, T::ZERO)?;
            }
            x = tape.add(x, pe)?;
        }

        // Attention blocks.
        let mask = match self.direction {
            Direction::Padding => AttentionMask::padding(batch.lengths.clone()),
            Direction::Causal => AttentionMask::causal(),
            Direction::CausalPadding => AttentionMask::causal_padding(batch.lengths.clone()),
        };
        let attn = Mha {
            heads: self.heads,
            key_dim: self.key_dim,
            d_model: d,
        };
        // Only the target position is read after the last attention, and everything after it
        // is per position (residual, layer norm, feed-forward, head), so the last block runs
        // its queries for the target row alone: exact, and L−1 full blocks plus one row.
        let target_mask = self.target_mask(batch);
        let mut gathered = false;
        for l in 0..self.layers {
            let ln1 = format!("block{l}.ln1");
            let pre = self.norm == Norm::Pre;
            let h = if pre {
                self.layer_norm(tape, vars, &ln1, x)?
            } else {
                x
            };
            let prefix = format!("block{l}.attn");
            let a = if l + 1 == self.layers {
                let rows = tape.gather_positions(x, &batch.pred_idx)?;
                x = tape.reshape(rows, &[b, 1, d])?;
                let hq = if pre {
                    let rows = tape.gather_positions(h, &batch.pred_idx)?;
                    tape.reshape(rows, &[b, 1, d])?
                } else {
                    x
                };
                gathered = true;
                mha_cross(tape, vars, &attn, &prefix, hq, h, &target_mask)?
            } else {
                mha(tape, vars, &attn, &prefix, h, &mask)?
            };
            x = tape.add(x, a)?;
            if self.norm == Norm::Post {
                x = self.layer_norm(tape, vars, &ln1, x)?;
            }
            if let Some(hidden) = self.ffn {
                let ln2 = format!("block{l}.ln2");
                let h = if pre {
                    self.layer_norm(tape, vars, &ln2, x)?
                } else {
                    x
                };
                let f = dense(tape, vars, &format!("block{l}.ffn1"), h)?;
                let f = tape.relu(f)?;
                let f = dense(tape, vars, &format!("block{l}.ffn2"), f)?;
                debug_assert_eq!(tape.shape(f)[2], d, "ffn width {hidden}");
                x = tape.add(x, f)?;
                if self.norm == Norm::Post {
                    x = self.layer_norm(tape, vars, &ln2, x)?;
                }
            }
        }

        // Target position → head MLP → η.
        let mut h = if gathered {
            tape.reshape(x, &[b, d])?
        } else {
            tape.gather_positions(x, &batch.pred_idx)?
        };
        for i in 0..self.head_hidden.len() {
            h = dense(tape, vars, &format!("head{i}"), h)?;
            h = tape.relu(h)?;
        }
        dense(tape, vars, "out", h)
    }

    /// The keys the target row `pred_idx` sees: padding → `j < length`; causal → `j ≤ pred`;
    /// both → `j < min(length, pred + 1)`.
    fn target_mask(&self, batch: &Samples) -> AttentionMask {
        let causal = || batch.pred_idx.iter().map(|&p| p + 1);
        let lengths = match self.direction {
            Direction::Padding => batch.lengths.clone(),
            Direction::Causal => causal().collect(),
            Direction::CausalPadding => causal()
                .zip(&batch.lengths)
                .map(|(c, &l)| c.min(l))
                .collect(),
        };
        AttentionMask::padding(lengths)
    }

    fn layer_norm<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &HashMap<String, Var>,
        prefix: &str,
        x: Var,
    ) -> Result<Var, ModelError> {
        let g = *vars
            .get(&format!("{prefix}.gain"))
            .ok_or_else(|| ModelError::MissingParam(format!("{prefix}.gain")))?;
        let b = *vars
            .get(&format!("{prefix}.bias"))
            .ok_or_else(|| ModelError::MissingParam(format!("{prefix}.bias")))?;
        Ok(tape.layer_norm(x, g, b, T::from_f64(self.ln_eps))?)
    }
}
