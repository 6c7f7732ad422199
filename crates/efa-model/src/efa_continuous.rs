//! The continuous input stage of [`super::EfaConfig`] (the paper's temperature model,
//! PAPER.md §6.2–§6.3); see [`super::ContinuousInputs`] for the formulas.

use super::ContinuousInputs;
use crate::batch::Samples;
use crate::layers::{dense, param, Dense};
use efa_tape::ops::gather::{Part, NONE};
use crate::params::{Init, Params};
use crate::ModelError;
use efa_num::Real;
use efa_tape::{Tape, Var};
use ndarray::Array2;
use std::collections::HashMap;

/// Checks the continuous-input configuration.
pub(super) fn validate(c: &ContinuousInputs, has_values: bool) -> Result<(), ModelError> {
    let bad = |field: &str, why: String| {
        Err(ModelError::Config(format!(
            "EFA config field `continuous.{field}`: {why}"
        )))
    };
    if c.hidden == 0 || c.dim == 0 || c.fuse == 0 {
        return bad("hidden/dim/fuse", "widths must be at least 1".into());
    }
    if has_values {
        return bad(
            "values",
            "a value table cannot be combined with continuous inputs".into(),
        );
    }
    let Some(first) = c.sites.first() else {
        return bad("sites", "needs at least one site".into());
    };
    if first.is_empty() {
        return bad("sites", "site rows need at least one feature".into());
    }
    for (i, row) in c.sites.iter().enumerate() {
        if row.len() != first.len() {
            return bad(
                "sites",
                format!(
                    "row {i} has {} features, row 0 has {}",
                    row.len(),
                    first.len()
                ),
            );
        }
        if let Some(v) = row.iter().find(|v| !v.is_finite()) {
            return bad("sites", format!("row {i} has the non-finite feature {v}"));
        }
    }
    if c.lag_rows == Some(0) {
        return bad("lag_rows", "must be at least 1".into());
    }
    Ok(())
}

/// Adds the input-stage parameters in the Keras model's order: value MLP, mask table, site
/// MLP, lag table, fusion MLP.
pub(super) fn init<T: Real>(
    c: &ContinuousInputs,
    width: usize,
    p: &mut Params<T>,
    init: &mut Init,
) {
    let dense = |p: &mut Params<T>, init: &mut Init, name: &str, fan_in: usize, fan_out: usize| {
        Dense {
            fan_in,
            fan_out,
            bias: true,
        }
        .init(p, init, name)
    };
    dense(p, init, "value_mlp1", 1, c.hidden);
    dense(p, init, "value_mlp2", c.hidden, c.dim);
    p.insert("mask_emb", init.embedding(2, c.dim));
    let features = c.sites.first().map_or(1, Vec::len);
    dense(p, init, "site_mlp1", features, c.hidden);
    dense(p, init, "site_mlp2", c.hidden, c.dim);
    let mut concat = 2 * c.dim;
    if let Some(rows) = c.lag_rows {
        p.insert("lag_emb", init.embedding(rows, c.dim));
        concat += c.dim;
    }
    dense(p, init, "fuse1", concat, c.fuse);
    dense(p, init, "fuse2", c.fuse, width);
}

fn mlp<T: Real>(
    tape: &mut Tape<T>,
    vars: &HashMap<String, Var>,
    a: &str,
    b: &str,
    x: Var,
) -> Result<Var, ModelError> {
    let h = dense(tape, vars, a, x)?;
    let h = tape.relu(h)?;
    dense(tape, vars, b, h)
}

/// The distinct inputs of a batch: a position's fused representation depends only on its
/// value (or on being the target), its site and its lag indicator, so the branch and fusion
/// MLPs run once per distinct combination and are gathered at each position.
pub(super) struct DistinctInputs {
    /// The value of each distinct input; `None` for a target (the mask row).
    value: Vec<Option<f64>>,
    /// Its site id.
    site: Vec<usize>,
    /// Its lag indicator (0 without a lag embedding).
    lag: Vec<usize>,
}

/// The distinct inputs of `batch` and each position's row among them (`[B, N]`), after
/// checking the fields the continuous inputs read.
pub(super) fn distinct_inputs(
    c: &ContinuousInputs,
    batch: &Samples,
) -> Result<(DistinctInputs, Array2<usize>), ModelError> {
    let (b, n) = batch.tokens.dim();
    let y = batch.weights.as_ref().ok_or_else(|| {
        ModelError::Batch(
            "EFA model with continuous inputs needs the per-position values in `weights`".into(),
        )
    })?;
    if y.dim() != (b, n) {
        return Err(ModelError::Batch(format!(
            "field `weights`: shape {:?}, expected [{b}, {n}]",
            y.shape()
        )));
    }
    if let Some(((row, col), &t)) = batch
        .tokens
        .indexed_iter()
        .find(|(_, &t)| t >= c.sites.len())
    {
        return Err(ModelError::Batch(format!(
            "field `tokens` row {row}, position {col}: site id {t} outside 0..{}",
            c.sites.len()
        )));
    }
    if let Some(((row, col), v)) = y.indexed_iter().find(|(_, v)| !v.is_finite()) {
        return Err(ModelError::Batch(format!(
            "field `weights` row {row}, position {col}: non-finite value {v}"
        )));
    }
    let lags = match (c.lag_rows, &batch.values) {
        (None, _) => None,
        (Some(rows), Some(l)) => {
            if l.dim() != (b, n) {
                return Err(ModelError::Batch(format!(
                    "field `values` (lag indicators): shape {:?}, expected [{b}, {n}]",
                    l.shape()
                )));
            }
            if let Some(((row, col), &v)) = l.indexed_iter().find(|(_, &v)| v >= rows) {
                return Err(ModelError::Batch(format!(
                    "field `values` row {row}, position {col}: lag indicator {v} outside 0..{rows}"
                )));
            }
            Some(l)
        }
        (Some(_), None) => {
            return Err(ModelError::Batch(
                "EFA model with a lag embedding needs the lag indicators in `values`".into(),
            ))
        }
    };
    let mut distinct = DistinctInputs {
        value: Vec::new(),
        site: Vec::new(),
        lag: Vec::new(),
    };
    // Key: (value bits, or u64::MAX for the target; site; lag). No finite f64 has the bits
    // u64::MAX (that is a NaN), so targets never collide with values.
    let mut slot: HashMap<(u64, usize, usize), usize> = HashMap::new();
    let ids = Array2::from_shape_fn((b, n), |(i, j)| {
        let target = batch.pred_idx[i] == j;
        let value = (!target).then_some(y[[i, j]]);
        let site = batch.tokens[[i, j]];
        let lag = lags.map_or(0, |l| l[[i, j]]);
        let key = (value.map_or(u64::MAX, f64::to_bits), site, lag);
        *slot.entry(key).or_insert_with(|| {
            distinct.value.push(value);
            distinct.site.push(site);
            distinct.lag.push(lag);
            distinct.value.len() - 1
        })
    });
    Ok((distinct, ids))
}

/// The fused representation `[U, width]` of the distinct inputs: per input, the value MLP (or
/// the mask row for a target) ‖ the site MLP ‖ the lag row, then the fusion MLP.
pub(super) fn table<T: Real>(
    c: &ContinuousInputs,
    tape: &mut Tape<T>,
    vars: &HashMap<String, Var>,
    distinct: &DistinctInputs,
) -> Result<Var, ModelError> {
    let u = distinct.value.len();
    // Value branch once per distinct scalar; the mask table's row 1 is appended after them
    // (row 0 of the mask table is never used, as in the paper).
    let mut scalars: Vec<f64> = Vec::new();
    let mut slot: HashMap<u64, usize> = HashMap::new();
    let value_rows: Vec<Option<usize>> = distinct
        .value
        .iter()
        .map(|v| {
            v.map(|v| {
                *slot.entry(v.to_bits()).or_insert_with(|| {
                    scalars.push(v);
                    scalars.len() - 1
                })
            })
        })
        .collect();
    let yv = tape.constant(
        Array2::from_shape_fn((scalars.len().max(1), 1), |(r, _)| {
            T::from_f64(scalars.get(r).copied().unwrap_or(0.0))
        })
        .into_dyn(),
    );
    let values = mlp(tape, vars, "value_mlp1", "value_mlp2", yv)?;
    let mask_emb = param(vars, "mask_emb")?;
    // Site branch once per site.
    let f = c.sites[0].len();
    let sites = Array2::from_shape_fn((c.sites.len(), f), |(s, k)| T::from_f64(c.sites[s][k]));
    let sites = tape.constant(sites.into_dyn());
    let sites = mlp(tape, vars, "site_mlp1", "site_mlp2", sites)?;
    // [value or mask ‖ site (‖ lag)] in one gather node.
    let col = |ids: Vec<usize>| Array2::from_shape_vec((u, 1), ids).expect("u ids");
    let mut tables = vec![values, mask_emb, sites];
    let mut parts = vec![
        Part {
            ids: col(value_rows.iter().map(|r| r.unwrap_or(NONE)).collect()),
            col: 0,
        },
        Part {
            ids: col(value_rows
                .iter()
                .map(|r| if r.is_some() { NONE } else { 1 })
                .collect()),
            col: 0,
        },
        Part {
            ids: col(distinct.site.clone()),
            col: c.dim,
        },
    ];
    let mut concat = 2 * c.dim;
    if c.lag_rows.is_some() {
        tables.push(param(vars, "lag_emb")?);
        parts.push(Part {
            ids: col(distinct.lag.clone()),
            col: concat,
        });
        concat += c.dim;
    }
    let x = tape.gather_sum(&tables, parts, None, concat, 1)?[0];
    let x = tape.reshape(x, &[u, concat])?;
    mlp(tape, vars, "fuse1", "fuse2", x)
}
