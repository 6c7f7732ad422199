//! The Exponential Family Attention model (docs/design.md §6; docs/paper.md §2.3, §3.4, §6.2).
//!
//! Per position, an item embedding is concatenated with the embedding of the observed value
//! (the target's value replaced by a learned \[MASK\] row); a learned position embedding is
//! added; `L` blocks of multi-head attention on the fused kernel with residual connections
//! (optionally a feed-forward block and layer norm) follow; the target position is gathered
//! and a head MLP maps it to the natural parameter η of the chosen family.
//!
//! * [`EfaConfig`]: the serialisable configuration, its checks and its parameter declaration
//!   ([`EfaConfig::declare`] → [`EfaVars`], typed handles resolved once);
//! * [`ForwardPlan`]: the named ways of computing the same forward (the general definition
//!   and its exact shortcuts), chosen in one documented function
//!   ([`EfaConfig::choose_plan`]) and forceable ([`EfaConfig::forward`] takes the plan);
//! * the pieces every plan is built from: inputs and embeddings (`inputs`), the continuous
//!   input stage (`continuous`), blocks and the head (`block`).

mod block;
mod continuous;
mod inputs;
mod plan;

pub use block::{BlockVars, HeadVars};
pub use continuous::ContinuousVars;
pub use plan::{ForwardPlan, LayerTrace};

use crate::ModelError;
use efa_nn::layers::{AttentionVars, DenseVars, LayerNormVars, MlpVars};
use efa_nn::params::{InitKind, ParamSink};
use efa_tape::Var;
use serde::{Deserialize, Serialize};

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

/// Which keys a query of the model's attention sees (written as the `direction` key of
/// `[model.efa]`: `"padding"`, `"causal"`, `"causal_padding"`). Not to be confused with a
/// sample's context direction (`efa_data::samples::Direction`, bi / uni), which decides the
/// rows a sample holds; a unidirectional rating model holds only the earlier rows and still
/// attends with `Padding`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
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
/// docs/paper.md §6.2–§6.3). Per position `j` of sample `b`:
/// * value branch: `v = Dense(dim)(relu(Dense(hidden)(y_bj)))` on the scalar `Samples::weights[b, j]`;
///   at the target (`j = pred_idx[b]`) it is replaced by a learned mask row:
///   `v·(1 − m) + mask_emb[m]·m` with `m = [j = pred_idx[b]]` (a 2-row table; row 0 is unused,
///   as in the paper);
/// * site branch: `s = Dense(dim)(relu(Dense(hidden)(sites[tokens[b, j]])))`, the per-site
///   features (e.g. latitude, longitude in degrees) selected by `Samples::tokens`; the MLP runs
///   once per site the batch reads and is gathered, which equals running it at every position;
/// * optional lag branch: `lag_emb[values[b, j]]` with the indicators in `Samples::values`;
/// * optional item branch (`item_embedding`): `item_emb[tokens[b, j]]`, a learned row per
///   token, so that tokens with the same site features (a thermometer and a rain gauge at one
///   place) stay distinguishable;
/// * fusion: `Dense(item_dim)(relu(Dense(fuse)([v ‖ s ‖ lag ‖ item])))`, so the model width is
///   `item_dim`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContinuousInputs {
    /// Hidden width of the value and site MLPs (128 in the paper).
    pub hidden: usize,
    /// Output width of each branch and of the lag embedding (32).
    pub dim: usize,
    /// Site feature table: one row per site id (every row the same width). May be left out of
    /// a configuration file whose table comes from elsewhere (an item-feature CSV); a model
    /// needs it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sites: Vec<Vec<f64>>,
    /// Rows of the lag-indicator embedding (2 or 3 in the paper's lag models; none without lags).
    #[serde(default)]
    pub lag_rows: Option<usize>,
    /// Hidden width of the fusion MLP (64).
    pub fuse: usize,
    /// Add a learned embedding of the token (`item_emb`, `[items, dim]`, declared after the
    /// fusion MLP) to the fusion input. Off in the paper's temperature model.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub item_embedding: bool,
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
    /// Attention blocks, 1..=[`crate::size::MAX_LAYERS`] (without one a target sees no
    /// context).
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
    /// Which keys each query sees (the `direction` key; default `padding`).
    #[serde(default)]
    pub direction: Visibility,
    /// Continuous inputs instead of the item table (temperature model); `item_dim` is then the
    /// width of the fused representation and `items` is unused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuous: Option<ContinuousInputs>,
}

fn default_ln_eps() -> f64 {
    1e-3
}

/// The input tables of an EFA model: the item embedding, or the continuous-input stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InputVars<H = Var> {
    /// `item_emb` `[items, item_dim]`.
    Items(H),
    /// The continuous-input stage (value, site and fusion MLPs, mask and lag tables).
    Continuous(ContinuousVars<H>),
}

/// Every parameter of an EFA model as a typed handle, in declaration order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EfaVars<H = Var> {
    /// Item table or continuous-input stage.
    pub input: InputVars<H>,
    /// `value_emb` `[rows, dim]`, with a value table.
    pub value_emb: Option<H>,
    /// `pos_emb` `[max_len, d]`, with learned positions.
    pub pos_emb: Option<H>,
    /// `block{l}.*`, one per layer.
    pub blocks: Vec<BlockVars<H>>,
    /// `head{i}.*` and `out.*`.
    pub head: HeadVars<H>,
}

impl EfaConfig {
    /// Model width: item width plus value width.
    pub fn d_model(&self) -> usize {
        self.item_dim + self.values.as_ref().map_or(0, |v| v.dim)
    }

    /// Checks the configuration for impossible shapes (sizes are [`crate::size`]'s): an error
    /// names the field (`efa.<field>`).
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |field: &str, why: &str| Err(ModelError::config(format!("efa.{field}"), why));
        if self.items == 0 {
            return bad("items", "must be at least 1");
        }
        if self.item_dim == 0 {
            return bad("item_dim", "must be at least 1");
        }
        if self.layers == 0 {
            return Err(ModelError::config(
                "efa.layers",
                format!(
                    "0 blocks; must be in 1..={} (without an attention block a target's \
                     representation is its own [MASK] embedding: it sees no context)",
                    crate::size::MAX_LAYERS
                ),
            ));
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
        if !(self.ln_eps > 0.0 && self.ln_eps.is_finite()) {
            return bad("ln_eps", "must be a finite positive number");
        }
        if let Some(c) = &self.continuous {
            continuous::validate(c, self.values.is_some())?;
        }
        Ok(())
    }

    /// Creates the parameters with the Keras default initialisers (docs/paper.md §1), in the
    /// declaration order of [`EfaConfig::declare`].
    pub fn init<T: efa_num::Real>(&self, seed: u64) -> crate::Params<T> {
        let mut init = efa_nn::params::Initialiser::new(seed);
        self.declare(&mut init)
            .expect("declaring parameters to an initialiser cannot fail");
        init.params
    }

    /// Declares every parameter, in the order of the paper's Keras models (which is also the
    /// order of model files, checkpoints and optimizer state): the input stage (`item_emb`, or
    /// the continuous MLPs and tables), `value_emb`, `pos_emb`, per block the attention
    /// projections, `ln1`, the feed-forward `ffn1`/`ffn2` and `ln2`, then `head{i}` and `out`.
    pub fn declare<S: ParamSink>(&self, s: &mut S) -> Result<EfaVars<S::Handle>, ModelError> {
        let d = self.d_model();
        let input = match &self.continuous {
            None => InputVars::Items(s.param(
                "item_emb",
                &[self.items, self.item_dim],
                InitKind::Embedding,
            )?),
            Some(c) => {
                InputVars::Continuous(ContinuousVars::declare(s, c, self.item_dim, self.items)?)
            }
        };
        let value_emb = match &self.values {
            Some(v) => Some(s.param("value_emb", &[v.rows, v.dim], InitKind::Embedding)?),
            None => None,
        };
        let pos_emb = match &self.positions {
            Some(p) => Some(s.param(
                "pos_emb",
                &[p.max_len, d],
                InitKind::Glorot {
                    fan_in: p.max_len,
                    fan_out: d,
                },
            )?),
            None => None,
        };
        let norm = self.norm != Norm::None;
        let mut blocks = Vec::with_capacity(self.layers);
        for l in 0..self.layers {
            let attn =
                AttentionVars::declare(s, &format!("block{l}.attn"), self.heads, self.key_dim, d)?;
            let ln1 = if norm {
                Some(LayerNormVars::declare(s, &format!("block{l}.ln1"), d)?)
            } else {
                None
            };
            let (ffn, ln2) = match self.ffn {
                Some(h) => {
                    let ffn = MlpVars::declare(s, &format!("block{l}.ffn"), d, h, d)?;
                    let ln2 = if norm {
                        Some(LayerNormVars::declare(s, &format!("block{l}.ln2"), d)?)
                    } else {
                        None
                    };
                    (Some(ffn), ln2)
                }
                None => (None, None),
            };
            blocks.push(BlockVars {
                attn,
                ln1,
                ffn,
                ln2,
            });
        }
        let mut hidden = Vec::with_capacity(self.head_hidden.len());
        let mut width = d;
        for (i, &h) in self.head_hidden.iter().enumerate() {
            hidden.push(DenseVars::declare(s, &format!("head{i}"), width, h, true)?);
            width = h;
        }
        let out = DenseVars::declare(s, "out", width, self.out_dim, self.out_bias)?;
        Ok(EfaVars {
            input,
            value_emb,
            pos_emb,
            blocks,
            head: HeadVars { hidden, out },
        })
    }
}
