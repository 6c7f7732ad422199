//! The continuous input stage of [`super::EfaConfig`] (the paper's temperature model,
//! PAPER.md §6.2–§6.3); see [`super::ContinuousInputs`] for the formulas.

use super::ContinuousInputs;
use crate::batch::Samples;
use crate::layers::{dense, Dense};
use crate::params::{Init, Params};
use crate::ModelError;
use efa_num::Real;
use efa_tape::{Tape, Var};
use ndarray::{Array2, Array3, ArrayD};
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

/// The fused per-position representation `[B, N, width]`.
pub(super) fn forward<T: Real>(
    c: &ContinuousInputs,
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
    if let Some((row, &t)) = batch
        .tokens
        .indexed_iter()
        .find(|(_, &t)| t >= c.sites.len())
    {
        return Err(ModelError::Batch(format!(
            "field `tokens` row {}: site id {t} outside 0..{}",
            row.0,
            c.sites.len()
        )));
    }
    // Value branch on each scalar, then the mask row at the target. The MLP runs once per
    // distinct value and is gathered at each position: the same function of each scalar as
    // running it at every position (temperatures have few distinct values).
    let mut distinct: Vec<f64> = Vec::new();
    let mut slot: HashMap<u64, usize> = HashMap::new();
    let ids = y.mapv(|v| {
        *slot.entry(v.to_bits()).or_insert_with(|| {
            distinct.push(v);
            distinct.len() - 1
        })
    });
    if let Some(v) = distinct.iter().find(|v| !v.is_finite()) {
        return Err(ModelError::Batch(format!(
            "field `weights`: non-finite value {v}"
        )));
    }
    let yv = tape.constant(
        Array2::from_shape_fn((distinct.len(), 1), |(u, _)| T::from_f64(distinct[u])).into_dyn(),
    );
    let v = mlp(tape, vars, "value_mlp1", "value_mlp2", yv)?;
    let v = tape.embedding(v, &ids.into_dyn())?;
    let m = Array3::from_shape_fn((b, n, 1), |(i, j, _)| {
        if batch.pred_idx[i] == j {
            T::ONE
        } else {
            T::ZERO
        }
    });
    let keep = tape.constant(m.mapv(|x| T::ONE - x).into_dyn());
    let m_ids: ArrayD<usize> = m
        .mapv(|x| usize::from(x == T::ONE))
        .into_shape_with_order((b, n))
        .map_err(|e| ModelError::Batch(e.to_string()))?
        .into_dyn();
    let m = tape.constant(m.into_dyn());
    let v = tape.mul(v, keep)?;
    let me = tape.embedding(get("mask_emb")?, &m_ids)?;
    let me = tape.mul(me, m)?;
    let v = tape.add(v, me)?;
    // Site branch: the MLP once per site, gathered at each position.
    let f = c.sites[0].len();
    let sites = Array2::from_shape_fn((c.sites.len(), f), |(s, k)| T::from_f64(c.sites[s][k]));
    let sites = tape.constant(sites.into_dyn());
    let s = mlp(tape, vars, "site_mlp1", "site_mlp2", sites)?;
    let s = tape.embedding(s, &batch.tokens.clone().into_dyn())?;
    let mut parts = vec![v, s];
    if c.lag_rows.is_some() {
        let lags = batch.values.as_ref().ok_or_else(|| {
            ModelError::Batch(
                "EFA model with a lag embedding needs the lag indicators in `values`".into(),
            )
        })?;
        parts.push(tape.embedding(get("lag_emb")?, &lags.clone().into_dyn())?);
    }
    let x = tape.concat(&parts, 2)?;
    mlp(tape, vars, "fuse1", "fuse2", x)
}
