//! The continuous input stage of [`super::EfaConfig`] (the paper's temperature model,
//! docs/paper.md §6.2–§6.3); see [`super::ContinuousInputs`] for the formulas.

use super::ContinuousInputs;
use crate::batch::Samples;
use crate::ModelError;
use efa_nn::layers::MlpVars;
use efa_nn::ops::gather::{Part, NONE};
use efa_nn::params::{InitKind, ParamSink};
use efa_nn::TapeNn;
use efa_num::{pool, Real};
use efa_tape::{Tape, Var};
use ndarray::Array2;
use std::cell::RefCell;
use std::collections::HashMap;

thread_local! {
    /// The thread's maps from an input to its row among the distinct inputs, and from a
    /// scalar to its row among the distinct scalars, reused from batch to batch.
    static INPUT_SLOTS: RefCell<HashMap<(u64, usize, usize), usize>> = RefCell::default();
    static SCALAR_SLOTS: RefCell<HashMap<u64, usize>> = RefCell::default();
}

/// The parameters of the continuous input stage: `value_mlp{1,2}`, `mask_emb` (2 rows; row 1
/// is the \[MASK\] row), `site_mlp{1,2}`, `lag_emb` (with lags) and `fuse{1,2}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContinuousVars<H = Var> {
    /// Value branch: scalar → `hidden` → `dim`.
    pub value_mlp: MlpVars<H>,
    /// \[MASK\] rows `[2, dim]` replacing the value branch at the target.
    pub mask_emb: H,
    /// Site branch: site features → `hidden` → `dim`.
    pub site_mlp: MlpVars<H>,
    /// Lag-indicator rows `[lag_rows, dim]`.
    pub lag_emb: Option<H>,
    /// Fusion: `[value ‖ site (‖ lag) (‖ item)]` → `fuse` → model width.
    pub fuse: MlpVars<H>,
    /// Token rows `[items, dim]`, with `item_embedding`.
    pub item_emb: Option<H>,
}

impl<H: Copy> ContinuousVars<H> {
    /// Declares the stage in the Keras model's order: value MLP, mask table, site MLP, lag
    /// table, fusion MLP, then (with `item_embedding`) the token table of `items` rows;
    /// `width` is the model width.
    pub(super) fn declare<S: ParamSink<Handle = H>>(
        s: &mut S,
        c: &ContinuousInputs,
        width: usize,
        items: usize,
    ) -> Result<Self, ModelError> {
        let value_mlp = MlpVars::declare(s, "value_mlp", 1, c.hidden, c.dim)?;
        let mask_emb = s.param("mask_emb", &[2, c.dim], InitKind::Embedding)?;
        let features = c.sites.first().map_or(1, Vec::len);
        let site_mlp = MlpVars::declare(s, "site_mlp", features, c.hidden, c.dim)?;
        let mut concat = 2 * c.dim;
        let lag_emb = match c.lag_rows {
            Some(rows) => {
                concat += c.dim;
                Some(s.param("lag_emb", &[rows, c.dim], InitKind::Embedding)?)
            }
            None => None,
        };
        if c.item_embedding {
            concat += c.dim;
        }
        let fuse = MlpVars::declare(s, "fuse", concat, c.fuse, width)?;
        let item_emb = match c.item_embedding {
            true => Some(s.param("item_emb", &[items, c.dim], InitKind::Embedding)?),
            false => None,
        };
        Ok(Self {
            value_mlp,
            mask_emb,
            site_mlp,
            lag_emb,
            fuse,
            item_emb,
        })
    }
}

/// Checks the continuous-input configuration.
pub(super) fn validate(c: &ContinuousInputs, has_values: bool) -> Result<(), ModelError> {
    let bad =
        |field: &str, why: String| Err(ModelError::config(format!("efa.continuous.{field}"), why));
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

/// How the continuous input stage runs over a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sharing {
    /// Once per position: the definition (the general plan).
    PerPosition,
    /// Once per distinct input: a position's fused representation depends only on its value
    /// (or on being the target), its site and its lag indicator, so the branch and fusion
    /// MLPs run once per distinct combination (the value MLP once per distinct value, the
    /// site MLP once per site the batch reads) and are gathered at each position. Exact.
    Distinct,
}

/// The inputs the stage runs on, one row each, and which positions read which row.
pub(super) struct DistinctInputs {
    /// The value of each distinct input; `None` for a target (the mask row).
    value: Vec<Option<f64>>,
    /// Its site id.
    site: Vec<usize>,
    /// Its lag indicator (0 without a lag embedding).
    lag: Vec<usize>,
}

/// The vectors go back to the thread's cache ([`pool`]).
impl Drop for DistinctInputs {
    fn drop(&mut self) {
        pool::give(std::mem::take(&mut self.value));
        pool::give(std::mem::take(&mut self.site));
        pool::give(std::mem::take(&mut self.lag));
    }
}

/// The inputs of `batch` (one per position, or one per distinct input) and each position's
/// row among them (`[B, N]`), after checking the fields the continuous inputs read.
pub(super) fn distinct_inputs(
    c: &ContinuousInputs,
    batch: &Samples,
    sharing: Sharing,
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
        value: pool::take(b * n),
        site: pool::take(b * n),
        lag: pool::take(b * n),
    };
    // Key: (value bits, or u64::MAX for the target; site; lag). No finite f64 has the bits
    // u64::MAX (that is a NaN), so targets never collide with values. The map is the
    // thread's, reused from batch to batch (cleared, its room kept).
    let ids = INPUT_SLOTS.with_borrow_mut(|slot| {
        slot.clear();
        distinct_ids(batch, (y, lags), sharing, &mut distinct, slot)
    });
    Ok((distinct, ids))
}

/// The row of every position among the distinct inputs (see [`distinct_inputs`]).
fn distinct_ids(
    batch: &Samples,
    (y, lags): (&Array2<f64>, Option<&Array2<usize>>),
    sharing: Sharing,
    distinct: &mut DistinctInputs,
    slot: &mut HashMap<(u64, usize, usize), usize>,
) -> Array2<usize> {
    pool::from_fn2(batch.tokens.dim(), |(i, j)| {
        let target = batch.pred_idx[i] == j;
        let value = (!target).then_some(y[[i, j]]);
        let site = batch.tokens[[i, j]];
        let lag = lags.map_or(0, |l| l[[i, j]]);
        let mut push = || {
            distinct.value.push(value);
            distinct.site.push(site);
            distinct.lag.push(lag);
            distinct.value.len() - 1
        };
        match sharing {
            Sharing::PerPosition => push(),
            Sharing::Distinct => {
                let key = (value.map_or(u64::MAX, f64::to_bits), site, lag);
                *slot.entry(key).or_insert_with(push)
            }
        }
    })
}

/// The fused representation `[U, width]` of the inputs: per input, the value MLP (or the
/// mask row for a target) ‖ the site MLP ‖ the lag row, then the fusion MLP. With
/// [`Sharing::Distinct`] the value MLP runs once per distinct value and the site MLP once per
/// site the batch reads (gathered); with [`Sharing::PerPosition`] both run once per input row.
pub(super) fn table<T: Real>(
    c: &ContinuousInputs,
    vars: &ContinuousVars,
    tape: &mut Tape<T>,
    inputs: &DistinctInputs,
    sharing: Sharing,
) -> Result<Var, ModelError> {
    let u = inputs.value.len();
    // Value branch once per scalar (distinct scalars when shared); the mask table's row 1 is
    // gathered at targets instead (row 0 of the mask table is never used, as in the paper).
    let mut scalars: Vec<f64> = pool::take(u);
    let value_rows: Vec<Option<usize>> = SCALAR_SLOTS.with_borrow_mut(|slot| {
        slot.clear();
        let rows = inputs.value.iter().map(|v| {
            v.map(|v| match sharing {
                Sharing::PerPosition => {
                    scalars.push(v);
                    scalars.len() - 1
                }
                Sharing::Distinct => *slot.entry(v.to_bits()).or_insert_with(|| {
                    scalars.push(v);
                    scalars.len() - 1
                }),
            })
        });
        pool::collect(u, rows)
    });
    let yv = tape.constant(
        pool::from_fn2((scalars.len().max(1), 1), |(r, _)| {
            T::from_f64(scalars.get(r).copied().unwrap_or(0.0))
        })
        .into_dyn(),
    );
    pool::give(scalars);
    let values = vars.value_mlp.apply(tape, yv)?;
    // Site branch once per site the batch reads (gathered), or once per input row.
    let f = c.sites[0].len();
    let (site_rows, site_ids) = match sharing {
        Sharing::Distinct => {
            // The sites the batch reads, in increasing order: the site MLP runs over those
            // rows, not over the whole table (which may hold millions of sites for a batch
            // of a few hundred positions). A row's output depends on its own features only,
            // and a site no position reads would take a zero gradient.
            let mut used = pool::collect(u, inputs.site.iter().copied());
            used.sort_unstable();
            used.dedup();
            if used.is_empty() {
                used.push(0);
            }
            let rows = pool::from_fn2((used.len(), f), |(s, k)| T::from_f64(c.sites[used[s]][k]));
            let ids = pool::collect(
                u,
                inputs
                    .site
                    .iter()
                    .map(|s| used.binary_search(s).expect("every site read is in `used`")),
            );
            pool::give(used);
            (rows, ids)
        }
        Sharing::PerPosition => (
            pool::from_fn2((u.max(1), f), |(r, k)| {
                inputs
                    .site
                    .get(r)
                    .map_or(T::ZERO, |&s| T::from_f64(c.sites[s][k]))
            }),
            pool::collect(u, 0..u),
        ),
    };
    let sites = tape.constant(site_rows.into_dyn());
    let sites = vars.site_mlp.apply(tape, sites)?;
    // [value or mask ‖ site (‖ lag)] in one gather node.
    let col = |ids: Vec<usize>| Array2::from_shape_vec((u, 1), ids).expect("u ids");
    let mut tables = vec![values, vars.mask_emb, sites];
    let mut parts = vec![
        Part {
            ids: col(pool::collect(
                u,
                value_rows.iter().map(|r| r.unwrap_or(NONE)),
            )),
            col: 0,
        },
        Part {
            ids: col(pool::collect(
                u,
                value_rows
                    .iter()
                    .map(|r| if r.is_some() { NONE } else { 1 }),
            )),
            col: 0,
        },
        Part {
            ids: col(site_ids),
            col: c.dim,
        },
    ];
    let mut concat = 2 * c.dim;
    if let Some(lag_emb) = vars.lag_emb {
        tables.push(lag_emb);
        parts.push(Part {
            ids: col(pool::collect(u, inputs.lag.iter().copied())),
            col: concat,
        });
        concat += c.dim;
    }
    if let Some(item_emb) = vars.item_emb {
        tables.push(item_emb);
        parts.push(Part {
            ids: col(pool::collect(u, inputs.site.iter().copied())),
            col: concat,
        });
        concat += c.dim;
    }
    pool::give(value_rows);
    let x = tape.gather_sum(&tables, parts, None, concat, 1)?[0];
    let x = tape.reshape(x, &[u, concat])?;
    Ok(vars.fuse.apply(tape, x)?)
}
