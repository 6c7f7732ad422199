//! The inputs of a batch and the first block's shared work: which table rows each position
//! reads, the embedded inputs, the projected tables of the first block, the batch trimmed to
//! what the targets can reach, and the attention masks.

use super::continuous::{self, Sharing};
use super::{EfaConfig, EfaVars, InputVars, Visibility};
use crate::batch::Samples;
use crate::ModelError;
use efa_nn::layers::AttentionVars;
use efa_nn::ops::attention::Mask;
use efa_nn::ops::gather::{Part, NONE};
use efa_nn::TapeNn;
use efa_num::Real;
use efa_tape::{Tape, Var};
use std::borrow::Cow;

/// The inputs at each sample's target position, as single-position rows (the query stream's
/// inputs; their positions are the targets' own, given to `embed` separately).
pub(super) fn target_inputs(batch: &Samples) -> Samples {
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
pub(super) struct InputIds {
    pub(super) item: ndarray::Array2<usize>,
    pub(super) value: Option<ndarray::Array2<usize>>,
    pub(super) position: Option<ndarray::Array2<usize>>,
}

/// The index arrays go back to the thread's cache ([`efa_num::pool`]).
impl Drop for InputIds {
    fn drop(&mut self) {
        let item = std::mem::replace(&mut self.item, ndarray::Array2::default((0, 0)));
        efa_num::pool::give_array(item);
        for a in [self.value.take(), self.position.take()]
            .into_iter()
            .flatten()
        {
            efa_num::pool::give_array(a);
        }
    }
}

/// A copy of an index array in a buffer from [`efa_num::pool`].
fn copy(a: &ndarray::Array2<usize>) -> ndarray::Array2<usize> {
    efa_num::pool::map(a.view(), |&x| x)
}

/// The raw inputs of a batch: the table the item ids read (the item embedding, or for
/// continuous inputs the fused representation of the batch's distinct inputs) and the rows
/// every position reads.
pub(super) struct Inputs {
    pub(super) items: Var,
    pub(super) ids: InputIds,
}

/// The first `w` positions of every per-position field.
pub(super) fn trim(batch: &Samples, w: usize) -> Samples {
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

impl EfaConfig {
    /// `batch` cut to the leading positions any target can reach (see `reach`): the dropped
    /// positions are masked keys for every target and never targets themselves.
    pub(crate) fn trimmed<'b>(&self, batch: &'b Samples) -> Cow<'b, Samples> {
        match self.reach(batch) {
            w if w < batch.width() => Cow::Owned(trim(batch, w)),
            _ => Cow::Borrowed(batch),
        }
    }

    /// The number of leading positions any target of `batch` can reach through attention (all
    /// later positions are masked keys and never targets).
    pub(super) fn reach(&self, batch: &Samples) -> usize {
        let max_pred = batch.pred_idx.iter().max().map_or(0, |p| p + 1);
        let w = match self.direction {
            Visibility::Padding => batch
                .lengths
                .iter()
                .copied()
                .max()
                .unwrap_or(0)
                .max(max_pred),
            Visibility::Causal | Visibility::CausalPadding => max_pred,
        };
        w.max(1)
    }

    /// The raw inputs of `batch` (see [`Inputs`]); `positions` as in [`EfaConfig::input_ids`].
    /// For continuous inputs this runs the branch and fusion MLPs once per position or once
    /// per distinct input (`sharing`).
    pub(super) fn inputs<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &EfaVars,
        batch: &Samples,
        positions: Option<&[usize]>,
        sharing: Sharing,
    ) -> Result<Inputs, ModelError> {
        let mut ids = self.input_ids(batch, positions)?;
        let items = match (&vars.input, &self.continuous) {
            (InputVars::Items(item_emb), _) => *item_emb,
            (InputVars::Continuous(cv), Some(c)) => {
                let (distinct, rows) = continuous::distinct_inputs(c, batch, sharing)?;
                efa_num::pool::give_array(std::mem::replace(&mut ids.item, rows));
                continuous::table(c, cv, tape, &distinct, sharing)?
            }
            (InputVars::Continuous(_), None) => {
                return Err(ModelError::MissingParam(
                    "continuous-input parameters for a model without continuous inputs".into(),
                ))
            }
        };
        Ok(Inputs { items, ids })
    }

    /// Per-position inputs `[B, N, d]`: item (or fused continuous) ‖ value embeddings plus
    /// positions, in one gather-sum node: item rows (none at zeroed padding), value rows after
    /// them, position rows over the whole width (none at padding when only valid positions).
    pub(super) fn embed<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &EfaVars,
        inputs: &Inputs,
    ) -> Result<Var, ModelError> {
        let ids = &inputs.ids;
        let mut tables = vec![inputs.items];
        let mut parts = vec![Part {
            ids: copy(&ids.item),
            col: 0,
        }];
        if let Some(v) = &ids.value {
            tables.push(required(vars.value_emb, "value_emb")?);
            parts.push(Part {
                ids: copy(v),
                col: self.item_dim,
            });
        }
        if let Some(p) = &ids.position {
            tables.push(required(vars.pos_emb, "pos_emb")?);
            parts.push(Part {
                ids: copy(p),
                col: 0,
            });
        }
        Ok(tape.gather_sum(&tables, parts, None, self.d_model(), 1)?[0])
    }

    /// The table rows the inputs read at every position: the item (or [`NONE`] at padding
    /// when padding is zeroed), the value row, and the position (`0..N`, or the given position
    /// of each single-position row; [`NONE`] at padding when only valid positions are embedded).
    pub(super) fn input_ids(
        &self,
        batch: &Samples,
        positions: Option<&[usize]>,
    ) -> Result<InputIds, ModelError> {
        let (b, n) = batch.tokens.dim();
        let item = efa_num::pool::map(batch.tokens.view(), |&t| {
            if self.zero_padding && t == 0 {
                NONE
            } else {
                t
            }
        });
        let value = match (&self.values, &batch.values) {
            (None, _) => None,
            (Some(_), Some(rows)) => Some(copy(rows)),
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
        let position = efa_num::pool::from_fn2((b, n), |(bi, ni)| {
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

    /// The first block's projections `names` (of [`Proj::Q`], [`Proj::K`], [`Proj::V`]) of
    /// the raw inputs, each `[B, N, H·K]`, gathered from projected tables: for
    /// `x = item_emb[t] ‖ value_emb[r] + pos_emb[j]`, `x·W + b = (item_emb·W_item)[t] +
    /// (value_emb·W_value)[r] + (pos_emb·W)[j] + b`, with a zero row where the input row is
    /// zeroed (padding). For continuous inputs the item table is the fused table of the
    /// distinct inputs.
    pub(super) fn table_projections<T: Real, const M: usize>(
        &self,
        tape: &mut Tape<T>,
        vars: &EfaVars,
        inputs: &Inputs,
        attn: &AttentionVars,
        names: [Proj; M],
    ) -> Result<[Var; M], ModelError> {
        let (h, k) = (self.heads, self.key_dim);
        let hk = h * k;
        let d_item = self.item_dim;
        // One kernel [d, M·hk] and bias [M·hk] for all requested projections.
        let mut ws = Vec::with_capacity(M);
        let mut bs = Vec::with_capacity(M);
        for name in names {
            let p = match name {
                Proj::Q => &attn.q,
                Proj::K => &attn.k,
                Proj::V => &attn.v,
            };
            ws.push(p.w);
            bs.push(required(p.b, "attention projection bias")?);
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
            ids: copy(&ids.item),
            col: 0,
        }];
        if let Some(v) = &ids.value {
            let w_val = tape.slice(w, 0, d_item, self.d_model())?;
            tables.push(tape.matmul(
                required(vars.value_emb, "value_emb")?,
                w_val,
                false,
                false,
            )?);
            parts.push(Part {
                ids: copy(v),
                col: 0,
            });
        }
        if let Some(p) = &ids.position {
            tables.push(tape.matmul(required(vars.pos_emb, "pos_emb")?, w, false, false)?);
            parts.push(Part {
                ids: copy(p),
                col: 0,
            });
        }
        let outs = tape.gather_sum(&tables, parts, Some(bias), M * hk, M)?;
        let mut out = [outs[0]; M];
        out.copy_from_slice(&outs);
        Ok(out)
    }

    /// The keys every position sees in a full (not target-only) block.
    pub(super) fn mask(&self, batch: &Samples) -> Mask {
        match self.direction {
            Visibility::Padding => Mask::none().key_lengths(&batch.lengths),
            Visibility::Causal => Mask::causal(),
            Visibility::CausalPadding => Mask::causal().key_lengths(&batch.lengths),
        }
    }

    /// The keys the target row `pred_idx` sees: padding → `j < length`; causal → `j ≤ pred`;
    /// both → `j < min(length, pred + 1)`.
    pub(super) fn target_mask(&self, batch: &Samples) -> Mask {
        let causal = || batch.pred_idx.iter().map(|&p| p + 1);
        let lengths = match self.direction {
            Visibility::Padding => batch.lengths.clone(),
            Visibility::Causal => causal().collect(),
            Visibility::CausalPadding => causal()
                .zip(&batch.lengths)
                .map(|(c, &l)| c.min(l))
                .collect(),
        };
        Mask::none().key_lengths(lengths)
    }
}

/// One of the attention projections (for [`EfaConfig::table_projections`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Proj {
    /// Query.
    Q,
    /// Key.
    K,
    /// Value.
    V,
}

/// The handle of an optional parameter the configuration requires here.
fn required(v: Option<Var>, name: &str) -> Result<Var, ModelError> {
    v.ok_or_else(|| ModelError::MissingParam(format!("{name} (declared by the configuration)")))
}
