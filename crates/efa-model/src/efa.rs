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
use crate::layers::{dense, mha, mha_cross, param, Dense, Mha};
use efa_tape::ops::attention::AttentionMask;
use efa_tape::ops::gather::{Part, NONE};
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

/// The inputs at each sample's target position, as single-position rows (the query stream's
/// inputs; their positions are the targets' own, given to `embed` separately).
fn target_inputs(batch: &Samples) -> Samples {
    let n = batch.len();
    let at = |x: &ndarray::Array2<usize>| {
        ndarray::Array2::from_shape_fn((n, 1), |(s, _)| x[[s, batch.pred_idx[s]]])
    };
    Samples {
        tokens: at(&batch.tokens),
        values: batch.values.as_ref().map(at),
        weights: None,
        center: None,
        lengths: vec![1; n],
        pred_idx: vec![0; n],
        targets: crate::Targets::Class(vec![0; n]),
        group: None,
    }
}

/// The table rows the raw inputs read at every position (see `EfaConfig::input_ids`).
struct InputIds {
    item: ndarray::Array2<usize>,
    value: Option<ndarray::Array2<usize>>,
    position: Option<ndarray::Array2<usize>>,
}

/// The raw inputs of a batch: the table the item ids read (the item embedding, or for
/// continuous inputs the fused representation of the batch's distinct inputs) and the rows
/// every position reads.
struct Inputs {
    items: Var,
    ids: InputIds,
}

/// The first `w` positions of every per-position field.
fn trim(batch: &Samples, w: usize) -> Samples {
    let cols = ndarray::s![.., ..w];
    Samples {
        tokens: batch.tokens.slice(cols).to_owned(),
        values: batch.values.as_ref().map(|v| v.slice(cols).to_owned()),
        weights: batch.weights.as_ref().map(|v| v.slice(cols).to_owned()),
        center: batch.center.clone(),
        lengths: batch.lengths.iter().map(|&l| l.min(w)).collect(),
        pred_idx: batch.pred_idx.clone(),
        targets: batch.targets.clone(),
        group: batch.group.clone(),
    }
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
    ///
    /// Four exact shortcuts keep the work proportional to what the targets can see:
    /// * the batch is trimmed to the positions any target can reach (`max(pred_idx) + 1` for
    ///   causal models, the longest valid length otherwise); dropped positions are masked keys;
    /// * when the first block reads the raw inputs (no pre-norm), its query/key/value
    ///   projections are gathered from per-row projected tables (`item_emb·W`,
    ///   `value_emb·W`, `pos_emb·W`): the projection of a sum of embedding rows is the sum of
    ///   the projected rows, so `B·N` row projections become a few table rows (the first
    ///   layer's shared work). Continuous inputs are a table too: the fused representation of
    ///   the batch's distinct (value or target, site, lag) inputs, so the branch and fusion
    ///   MLPs and the first projections run once per distinct input (for the temperature
    ///   model's full batch, once per city and day instead of once per city, day and target);
    /// * the paper's two-block models fold the first block's output projection into the second
    ///   block's keys and values (see [`EfaConfig::forward_two_blocks`]);
    /// * causal models with sequence ids (`Samples::group`) compute every target of a sequence
    ///   in one pass over its unmasked "content" stream plus a one-row "query" stream per target
    ///   (see [`EfaConfig::forward_stream`]).
    pub fn forward<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &HashMap<String, Var>,
        batch: &Samples,
    ) -> Result<Var, ModelError> {
        if self.direction == Direction::Causal && self.continuous.is_none() {
            if let Some(group) = &batch.group {
                // The query stream pays off when sequences hold several targets of the batch;
                // for (mostly) single-target sequences the per-sample pass is cheaper.
                let distinct: std::collections::HashSet<usize> = group.iter().copied().collect();
                if 2 * distinct.len() <= batch.len() {
                    return self.forward_stream(tape, vars, batch);
                }
            }
        }
        let trimmed;
        let batch = match self.reach(batch) {
            w if w < batch.width() => {
                trimmed = trim(batch, w);
                &trimmed
            }
            _ => batch,
        };
        if self.layers == 2
            && self.norm == Norm::None
            && self.ffn.is_none()
            && self.continuous.is_none()
        {
            return self.forward_two_blocks(tape, vars, batch);
        }
        let b = batch.len();
        let d = self.d_model();
        let inputs = self.inputs(tape, vars, batch, None)?;
        let mut x = self.embed(tape, vars, &inputs)?;

        // Attention blocks.
        let mask = self.mask(batch);
        let table_proj = self.norm != Norm::Pre;
        // Only the target position is read after the last attention, and everything after it
        // is per position (residual, layer norm, feed-forward, head), so the last block runs
        // its queries for the target row alone: exact, and L−1 full blocks plus one row.
        let target_mask = self.target_mask(batch);
        for l in 0..self.layers {
            let pre = self.norm == Norm::Pre;
            let h = if pre {
                self.layer_norm(tape, vars, &format!("block{l}.ln1"), x)?
            } else {
                x
            };
            let prefix = format!("block{l}.attn");
            let last = l + 1 == self.layers;
            let a = if last {
                let rows = tape.gather_positions(x, &batch.pred_idx)?;
                x = tape.reshape(rows, &[b, 1, d])?;
                let hq = if pre {
                    let rows = tape.gather_positions(h, &batch.pred_idx)?;
                    tape.reshape(rows, &[b, 1, d])?
                } else {
                    x
                };
                if l == 0 && table_proj {
                    let q = dense(tape, vars, &format!("{prefix}.q"), hq)?;
                    let [k, v] =
                        self.table_projections(tape, vars, &inputs, &prefix, ["k", "v"])?;
                    self.attend(tape, vars, &prefix, q, k, v, &target_mask)?
                } else {
                    mha_cross(tape, vars, &self.mha(), &prefix, hq, h, &target_mask)?
                }
            } else if l == 0 && table_proj {
                let [q, k, v] =
                    self.table_projections(tape, vars, &inputs, &prefix, ["q", "k", "v"])?;
                self.attend(tape, vars, &prefix, q, k, v, &mask)?
            } else {
                mha(tape, vars, &self.mha(), &prefix, h, &mask)?
            };
            x = self.finish_block(tape, vars, l, x, a)?;
        }

        // Target position (already gathered by the last block) → head MLP → η.
        let h = if self.layers > 0 {
            tape.reshape(x, &[b, d])?
        } else {
            tape.gather_positions(x, &batch.pred_idx)?
        };
        self.head(tape, vars, h)
    }

    /// The paper's two-block models (no layer norm, no feed-forward) with the first block's
    /// output projection folded into the second block's keys and values. With
    /// `x₁ = x₀ + o₀·W_o + b_o` (`o₀` the first block's attention output, `[B, N, H·K]`):
    /// * `x₁·W_k + b_k = (x₀·W_k + b_k) + o₀·(W_o·W_k) + b_o·W_k`, where `x₀·W_k + b_k` comes
    ///   from the projected tables (as the first block's projections) and `W_o·W_k` is
    ///   `[H·K, H·K]`; likewise for the values;
    /// * `x₁` itself is needed at the target row only (the second block's query and residual),
    ///   so the output projection runs on `B` rows instead of `B·N`, and `x₀` is embedded at
    ///   the target row only.
    ///
    /// The same function as the block-by-block forward, up to round-off (tested against the
    /// loop reference).
    pub fn forward_two_blocks<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &HashMap<String, Var>,
        batch: &Samples,
    ) -> Result<Var, ModelError> {
        let (b, d) = (batch.len(), self.d_model());
        let mask = self.mask(batch);
        // Block 0 on every position.
        let inputs = self.inputs(tape, vars, batch, None)?;
        let [q0, k0, v0] =
            self.table_projections(tape, vars, &inputs, "block0.attn", ["q", "k", "v"])?;
        let scale = 1.0 / (self.key_dim as f64).sqrt();
        let (o0, _) = tape.attention_heads(q0, k0, v0, self.heads, &mask, scale)?;
        // x₁ at the target rows.
        let at_target = target_inputs(batch);
        let at_target = self.inputs(tape, vars, &at_target, Some(&batch.pred_idx))?;
        let x0_t = self.embed(tape, vars, &at_target)?;
        let x0_t = tape.reshape(x0_t, &[b, d])?;
        let o0_t = tape.gather_positions(o0, &batch.pred_idx)?;
        let a0_t = dense(tape, vars, "block0.attn.o", o0_t)?;
        let x1_t = tape.add(x0_t, a0_t)?;
        let x1_t = tape.reshape(x1_t, &[b, 1, d])?;
        // Block 1: keys and values from the tables plus the folded output projection.
        let [tk, tv] = self.table_projections(tape, vars, &inputs, "block1.attn", ["k", "v"])?;
        let (wo, bo) = (
            param(vars, "block0.attn.o.w")?,
            param(vars, "block0.attn.o.b")?,
        );
        let bo = tape.reshape(bo, &[1, d])?;
        let mut kv = [tk, tv];
        for (slot, name) in kv.iter_mut().zip(["k", "v"]) {
            let w = param(vars, &format!("block1.attn.{name}.w"))?;
            let w_fold = tape.matmul(wo, w, false, false)?;
            let b_fold = tape.matmul(bo, w, false, false)?;
            let hk = tape.shape(w)[1];
            let b_fold = tape.reshape(b_fold, &[hk])?;
            let folded = tape.linear(o0, w_fold, Some(b_fold))?;
            *slot = tape.add(*slot, folded)?;
        }
        let q1 = dense(tape, vars, "block1.attn.q", x1_t)?;
        let a1 = self.attend(
            tape,
            vars,
            "block1.attn",
            q1,
            kv[0],
            kv[1],
            &self.target_mask(batch),
        )?;
        let x2 = tape.add(x1_t, a1)?;
        let h = tape.reshape(x2, &[b, d])?;
        self.head(tape, vars, h)
    }

    /// The query-stream forward of a causal model over a batch with sequence ids.
    ///
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
    pub fn forward_stream<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &HashMap<String, Var>,
        batch: &Samples,
    ) -> Result<Var, ModelError> {
        let group = batch
            .group
            .as_ref()
            .ok_or_else(|| ModelError::Batch("the query stream needs `group`".into()))?;
        let (s_len, width) = batch.tokens.dim();
        let d = self.d_model();
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
            tokens: ndarray::Array2::from_shape_fn((c_len, wc), |(c, j)| {
                batch.tokens[[reps[c], j]]
            }),
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
        let content = self.inputs(tape, vars, &content, None)?;
        let query = self.inputs(tape, vars, &query, Some(&batch.pred_idx))?;
        let mut xc = self.embed(tape, vars, &content)?;
        let mut xq = self.embed(tape, vars, &query)?;
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
        let own_rows = ndarray::Array2::from_shape_fn((s_len, wk), |(s, j)| {
            if j == batch.pred_idx[s] {
                s
            } else {
                NONE
            }
        });
        let key_mask = AttentionMask::padding(batch.pred_idx.iter().map(|p| p + 1).collect());
        let causal = AttentionMask::causal();
        let hk = self.heads * self.key_dim;
        let pre = self.norm == Norm::Pre;
        for l in 0..self.layers {
            let prefix = format!("block{l}.attn");
            let ln1 = format!("block{l}.ln1");
            let hc = if pre {
                self.layer_norm(tape, vars, &ln1, xc)?
            } else {
                xc
            };
            let hq = if pre {
                self.layer_norm(tape, vars, &ln1, xq)?
            } else {
                xq
            };
            let last = l + 1 == self.layers;
            let proj = |tape: &mut Tape<T>, name: &str, x: Var| {
                dense(tape, vars, &format!("{prefix}.{name}"), x)
            };
            // Both streams' keys and values; the query stream's keys gathered from both.
            let (kc, vc) = (proj(tape, "k", hc)?, proj(tape, "v", hc)?);
            let (qq, kq, vq) = (
                proj(tape, "q", hq)?,
                proj(tape, "k", hq)?,
                proj(tape, "v", hq)?,
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
            let aq = self.attend(tape, vars, &prefix, qq, gathered[0], gathered[1], &key_mask)?;
            if !last {
                let qc = proj(tape, "q", hc)?;
                let ac = self.attend(tape, vars, &prefix, qc, kc, vc, &causal)?;
                xc = self.finish_block(tape, vars, l, xc, ac)?;
            }
            xq = self.finish_block(tape, vars, l, xq, aq)?;
        }
        let hq = tape.reshape(xq, &[s_len, d])?;
        self.head(tape, vars, hq)
    }

    fn mha(&self) -> Mha {
        Mha {
            heads: self.heads,
            key_dim: self.key_dim,
            d_model: self.d_model(),
        }
    }

    /// The number of leading positions any target of `batch` can reach through attention (all
    /// later positions are masked keys and never targets).
    fn reach(&self, batch: &Samples) -> usize {
        let max_pred = batch.pred_idx.iter().max().map_or(0, |p| p + 1);
        let w = match self.direction {
            Direction::Padding => batch
                .lengths
                .iter()
                .copied()
                .max()
                .unwrap_or(0)
                .max(max_pred),
            Direction::Causal | Direction::CausalPadding => max_pred,
        };
        w.max(1)
    }

    /// The raw inputs of `batch` (see [`Inputs`]); `positions` as in [`EfaConfig::input_ids`].
    /// For continuous inputs this runs the branch and fusion MLPs once per distinct input.
    fn inputs<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &HashMap<String, Var>,
        batch: &Samples,
        positions: Option<&[usize]>,
    ) -> Result<Inputs, ModelError> {
        let mut ids = self.input_ids(batch, positions)?;
        let items = match &self.continuous {
            None => param(vars, "item_emb")?,
            Some(c) => {
                let (distinct, rows) = continuous::distinct_inputs(c, batch)?;
                ids.item = rows;
                continuous::table(c, tape, vars, &distinct)?
            }
        };
        Ok(Inputs { items, ids })
    }

    /// Per-position inputs `[B, N, d]`: item (or fused continuous) ‖ value embeddings plus
    /// positions, in one gather-sum node: item rows (none at zeroed padding), value rows after
    /// them, position rows over the whole width (none at padding when only valid positions).
    fn embed<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &HashMap<String, Var>,
        inputs: &Inputs,
    ) -> Result<Var, ModelError> {
        let ids = &inputs.ids;
        let mut tables = vec![inputs.items];
        let mut parts = vec![Part {
            ids: ids.item.clone(),
            col: 0,
        }];
        if let Some(v) = &ids.value {
            tables.push(param(vars, "value_emb")?);
            parts.push(Part {
                ids: v.clone(),
                col: self.item_dim,
            });
        }
        if let Some(p) = &ids.position {
            tables.push(param(vars, "pos_emb")?);
            parts.push(Part {
                ids: p.clone(),
                col: 0,
            });
        }
        Ok(tape.gather_sum(&tables, parts, None, self.d_model(), 1)?[0])
    }

    /// The table rows the inputs read at every position: the item (or [`NONE`] at padding
    /// when padding is zeroed), the value row, and the position (`0..N`, or the given position
    /// of each single-position row; [`NONE`] at padding when only valid positions are embedded).
    fn input_ids(
        &self,
        batch: &Samples,
        positions: Option<&[usize]>,
    ) -> Result<InputIds, ModelError> {
        let (b, n) = batch.tokens.dim();
        let item = batch
            .tokens
            .mapv(|t| if self.zero_padding && t == 0 { NONE } else { t });
        let value = match (&self.values, &batch.values) {
            (None, _) => None,
            (Some(_), Some(rows)) => Some(rows.clone()),
            (Some(_), None) => {
                return Err(ModelError::Batch(
                    "EFA model with a value table needs `values`".into(),
                ))
            }
        };
        let Some(pos) = &self.positions else {
            return Ok(InputIds {
                item,
                value,
                position: None,
            });
        };
        match positions {
            Some(p) => {
                if let Some((row, &at)) = p.iter().enumerate().find(|(_, &at)| at + n > pos.max_len)
                {
                    return Err(ModelError::Batch(format!(
                        "row {row}: target position {at} exceeds positions.max_len {}",
                        pos.max_len
                    )));
                }
            }
            None => {
                if n > pos.max_len {
                    return Err(ModelError::Batch(format!(
                        "sequence width {n} exceeds positions.max_len {}",
                        pos.max_len
                    )));
                }
            }
        }
        let position = ndarray::Array2::from_shape_fn((b, n), |(bi, ni)| {
            if pos.only_valid && batch.tokens[[bi, ni]] == 0 {
                NONE
            } else {
                positions.map_or(ni, |p| p[bi] + ni)
            }
        });
        Ok(InputIds {
            item,
            value,
            position: Some(position),
        })
    }

    /// The first block's projections `names` (of `q`, `k`, `v`) of the raw inputs, each
    /// `[B, N, H·K]`, gathered from projected tables: for `x = item_emb[t] ‖ value_emb[r] +
    /// pos_emb[j]`, `x·W + b = (item_emb·W_item)[t] + (value_emb·W_value)[r] +
    /// (pos_emb·W)[j] + b`, with a zero row where the input row is zeroed (padding). For
    /// continuous inputs the item table is the fused table of the distinct inputs.
    fn table_projections<T: Real, const M: usize>(
        &self,
        tape: &mut Tape<T>,
        vars: &HashMap<String, Var>,
        inputs: &Inputs,
        prefix: &str,
        names: [&str; M],
    ) -> Result<[Var; M], ModelError> {
        let (h, k) = (self.heads, self.key_dim);
        let hk = h * k;
        let d_item = self.item_dim;
        // One kernel [d, M·hk] and bias [M·hk] for all requested projections.
        let mut ws = Vec::with_capacity(M);
        let mut bs = Vec::with_capacity(M);
        for name in names {
            ws.push(param(vars, &format!("{prefix}.{name}.w"))?);
            bs.push(param(vars, &format!("{prefix}.{name}.b"))?);
        }
        let w = if M == 1 { ws[0] } else { tape.concat(&ws, 1)? };
        let bias = if M == 1 { bs[0] } else { tape.concat(&bs, 0)? };
        // The projected tables (a few rows each) and the same row indices as the inputs.
        let w_item = if self.values.is_some() {
            tape.slice(w, 0, 0, d_item)?
        } else {
            w
        };
        let ids = &inputs.ids;
        let mut tables = vec![tape.matmul(inputs.items, w_item, false, false)?];
        let mut parts = vec![Part {
            ids: ids.item.clone(),
            col: 0,
        }];
        if let Some(v) = &ids.value {
            let w_val = tape.slice(w, 0, d_item, self.d_model())?;
            tables.push(tape.matmul(param(vars, "value_emb")?, w_val, false, false)?);
            parts.push(Part {
                ids: v.clone(),
                col: 0,
            });
        }
        if let Some(p) = &ids.position {
            tables.push(tape.matmul(param(vars, "pos_emb")?, w, false, false)?);
            parts.push(Part {
                ids: p.clone(),
                col: 0,
            });
        }
        let outs = tape.gather_sum(&tables, parts, Some(bias), M * hk, M)?;
        let mut out = [outs[0]; M];
        out.copy_from_slice(&outs);
        Ok(out)
    }

    /// Attention of projected `q` `[B, Nq, H·K]` over `k`, `v` `[B, Nk, H·K]`, then the
    /// output projection.
    #[allow(clippy::too_many_arguments)]
    fn attend<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &HashMap<String, Var>,
        prefix: &str,
        q: Var,
        k: Var,
        v: Var,
        mask: &AttentionMask,
    ) -> Result<Var, ModelError> {
        let scale = 1.0 / (self.key_dim as f64).sqrt();
        let (o, _lse) = tape.attention_heads(q, k, v, self.heads, mask, scale)?;
        dense(tape, vars, &format!("{prefix}.o"), o)
    }

    /// Residual, post-norm and feed-forward of block `l` after its attention output `a`.
    fn finish_block<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &HashMap<String, Var>,
        l: usize,
        x: Var,
        a: Var,
    ) -> Result<Var, ModelError> {
        let mut x = tape.add(x, a)?;
        if self.norm == Norm::Post {
            x = self.layer_norm(tape, vars, &format!("block{l}.ln1"), x)?;
        }
        if self.ffn.is_some() {
            let ln2 = format!("block{l}.ln2");
            let h = if self.norm == Norm::Pre {
                self.layer_norm(tape, vars, &ln2, x)?
            } else {
                x
            };
            let f = dense(tape, vars, &format!("block{l}.ffn1"), h)?;
            let f = tape.relu(f)?;
            let f = dense(tape, vars, &format!("block{l}.ffn2"), f)?;
            x = tape.add(x, f)?;
            if self.norm == Norm::Post {
                x = self.layer_norm(tape, vars, &ln2, x)?;
            }
        }
        Ok(x)
    }

    /// Head MLP → η `[B, out_dim]` from the target rows `[B, d]`.
    fn head<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &HashMap<String, Var>,
        mut h: Var,
    ) -> Result<Var, ModelError> {
        for i in 0..self.head_hidden.len() {
            h = dense(tape, vars, &format!("head{i}"), h)?;
            h = tape.relu(h)?;
        }
        dense(tape, vars, "out", h)
    }

    /// The keys every position sees in a full (not target-only) block.
    fn mask(&self, batch: &Samples) -> AttentionMask {
        match self.direction {
            Direction::Padding => AttentionMask::padding(batch.lengths.clone()),
            Direction::Causal => AttentionMask::causal(),
            Direction::CausalPadding => AttentionMask::causal_padding(batch.lengths.clone()),
        }
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
        let g = param(vars, &format!("{prefix}.gain"))?;
        let b = param(vars, &format!("{prefix}.bias"))?;
        Ok(tape.layer_norm(x, g, b, T::from_f64(self.ln_eps))?)
    }
}
