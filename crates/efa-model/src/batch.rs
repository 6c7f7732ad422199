//! Sample sets and minibatches: the plain arrays a model reads, with no tape in sight.

use ndarray::{Array2, Axis};

/// What a sample predicts.
#[derive(Clone, Debug, PartialEq)]
pub enum Targets {
    /// A real value per sample (ratings, temperatures, counts).
    Real(Vec<f64>),
    /// A class index per sample (next item).
    Class(Vec<usize>),
    /// A real observation per sample with the exponential family it follows (data sets that
    /// mix families: each target uses its family's slice of η and link; see
    /// [`crate::Objective::MixedNll`]).
    Mixed {
        /// The observation per sample.
        y: Vec<f64>,
        /// The family per sample.
        families: Vec<efa_expfam::Family>,
    },
}

impl Targets {
    /// Number of samples.
    pub fn len(&self) -> usize {
        match self {
            Targets::Real(v) => v.len(),
            Targets::Class(v) => v.len(),
            Targets::Mixed { y, .. } => y.len(),
        }
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn select(&self, idx: &[usize]) -> Targets {
        match self {
            Targets::Real(v) => Targets::Real(idx.iter().map(|&i| v[i]).collect()),
            Targets::Class(v) => Targets::Class(idx.iter().map(|&i| v[i]).collect()),
            Targets::Mixed { y, families } => Targets::Mixed {
                y: idx.iter().map(|&i| y[i]).collect(),
                families: idx.iter().map(|&i| families[i]).collect(),
            },
        }
    }
}

/// A set of samples (or a minibatch of them): one row per sample.
///
/// * EFA models read `tokens` (the item at each position, 0 = padding), optionally `values`
///   (the row of the value table at each position, the target's being the \[MASK\] row),
///   `lengths` (positions `< length` are valid keys) and `pred_idx` (the target position).
/// * Factor models read `tokens` as the context items, `weights` as per-context multipliers
///   (ratings, or 1), `center` as the target's own item, and `lengths` as the context size.
#[derive(Clone, Debug)]
pub struct Samples {
    /// Item ids `[n, len]`.
    pub tokens: Array2<usize>,
    /// Value-table rows `[n, len]` (EFA with an observed value per position).
    pub values: Option<Array2<usize>>,
    /// Real context weights `[n, len]` (factor models over rated items).
    pub weights: Option<Array2<f64>>,
    /// The target's own item (factor models over rated items).
    pub center: Option<Vec<usize>>,
    /// Valid length per sample.
    pub lengths: Vec<usize>,
    /// Target position per sample.
    pub pred_idx: Vec<usize>,
    /// Targets.
    pub targets: Targets,
    /// Sequence id per sample (optional): samples with the same id are different targets of
    /// one sequence, so their inputs agree everywhere except at their own target position.
    /// Causal EFA models then share the sequence's content stream among them (the query-stream
    /// shortcut of [`crate::efa`]); `None` means every sample stands alone.
    pub group: Option<Vec<usize>>,
}

impl Samples {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.tokens.nrows()
    }

    /// True when there are no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sequence width.
    pub fn width(&self) -> usize {
        self.tokens.ncols()
    }

    /// Gives the per-position arrays' buffers to the thread's cache ([`efa_num::pool`]), where
    /// the next [`Samples::select`] takes them (the training loop's micro-batches).
    pub fn recycle(self) {
        efa_num::pool::give_array(self.tokens);
        for a in [self.values].into_iter().flatten() {
            efa_num::pool::give_array(a);
        }
        if let Some(w) = self.weights {
            efa_num::pool::give_array(w);
        }
    }

    /// The samples at `idx`, in that order (a minibatch).
    pub fn select(&self, idx: &[usize]) -> Samples {
        Samples {
            tokens: select_rows(&self.tokens, idx),
            values: self.values.as_ref().map(|v| select_rows(v, idx)),
            weights: self.weights.as_ref().map(|w| select_rows(w, idx)),
            center: self
                .center
                .as_ref()
                .map(|c| idx.iter().map(|&i| c[i]).collect()),
            lengths: idx.iter().map(|&i| self.lengths[i]).collect(),
            pred_idx: idx.iter().map(|&i| self.pred_idx[i]).collect(),
            targets: self.targets.select(idx),
            group: self
                .group
                .as_ref()
                .map(|g| idx.iter().map(|&i| g[i]).collect()),
        }
    }

    /// Checks that every per-sample array has `len()` rows and every index is in range,
    /// naming the first offending field and row.
    pub fn validate(&self, what: &str) -> Result<(), String> {
        let n = self.len();
        let w = self.width();
        let fail = |field: &str, detail: String| Err(format!("{what}: field `{field}`: {detail}"));
        if let Some(v) = &self.values {
            if v.dim() != (n, w) {
                return fail(
                    "values",
                    format!("shape {:?}, expected [{n}, {w}]", v.shape()),
                );
            }
        }
        if let Some(v) = &self.weights {
            if v.dim() != (n, w) {
                return fail(
                    "weights",
                    format!("shape {:?}, expected [{n}, {w}]", v.shape()),
                );
            }
        }
        if let Some(c) = &self.center {
            if c.len() != n {
                return fail("center", format!("{} entries, expected {n}", c.len()));
            }
        }
        if let Some(g) = &self.group {
            if g.len() != n {
                return fail("group", format!("{} entries, expected {n}", g.len()));
            }
        }
        if self.lengths.len() != n || self.pred_idx.len() != n || self.targets.len() != n {
            return fail(
                "lengths/pred_idx/targets",
                format!(
                    "{}/{}/{} entries, expected {n}",
                    self.lengths.len(),
                    self.pred_idx.len(),
                    self.targets.len()
                ),
            );
        }
        for i in 0..n {
            if self.lengths[i] > w {
                return fail(
                    "lengths",
                    format!("row {i}: {} > width {w}", self.lengths[i]),
                );
            }
            if self.pred_idx[i] >= w.max(1) {
                return fail(
                    "pred_idx",
                    format!("row {i}: {} >= width {w}", self.pred_idx[i]),
                );
            }
        }
        Ok(())
    }
}

/// A set of samples that training, evaluation and prediction draw minibatches from: the dense
/// [`Samples`] of the paper's experiments, or a set that keeps shared sequences once and
/// builds each minibatch on demand (user data), so memory scales with the data, not with
/// samples × longest sequence.
pub trait SampleSet: Sync {
    /// Number of samples.
    fn len(&self) -> usize;

    /// True when there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Valid length of sample `i`.
    fn length(&self, i: usize) -> usize;

    /// Target position of sample `i`.
    fn target_position(&self, i: usize) -> usize;

    /// Sequence id of sample `i`, if the set has sequence ids.
    fn sequence(&self, i: usize) -> Option<usize>;

    /// True when every sample has a sequence id.
    fn has_sequences(&self) -> bool;

    /// The samples at `idx`, in that order, as a dense minibatch.
    fn select(&self, idx: &[usize]) -> Samples;
}

impl SampleSet for Samples {
    fn len(&self) -> usize {
        Samples::len(self)
    }

    fn length(&self, i: usize) -> usize {
        self.lengths[i]
    }

    fn target_position(&self, i: usize) -> usize {
        self.pred_idx[i]
    }

    fn sequence(&self, i: usize) -> Option<usize> {
        self.group.as_ref().map(|g| g[i])
    }

    fn has_sequences(&self) -> bool {
        self.group.is_some()
    }

    fn select(&self, idx: &[usize]) -> Samples {
        Samples::select(self, idx)
    }
}

/// `a.select(Axis(0), idx)`: rows of a row-major array copied whole (ndarray's general
/// `select` goes element by element through views, which is most of a small minibatch's cost).
fn select_rows<A: Clone>(a: &Array2<A>, idx: &[usize]) -> Array2<A> {
    let w = a.ncols();
    let Some(s) = a.as_slice() else {
        return a.select(Axis(0), idx);
    };
    let mut out = efa_num::pool::take(idx.len() * w);
    for &i in idx {
        assert!(i < a.nrows(), "select_rows: row {i} of {}", a.nrows());
        out.extend_from_slice(&s[i * w..(i + 1) * w]);
    }
    Array2::from_shape_vec((idx.len(), w), out).expect("sizes match")
}

/// The order in which micro-batches are cut from the samples `idx` of `set`: by valid length,
/// then sequence, then target position (ties by index), so that each micro-batch can be
/// trimmed to its own longest sample and the targets of one sequence stay together.
pub fn length_order(set: &dyn SampleSet, idx: &[usize]) -> Vec<usize> {
    // The keys once per sample (not once per comparison); they end in the index, so they are
    // distinct and an unstable sort gives the one order.
    let mut keyed: Vec<(usize, usize, usize, usize)> = idx
        .iter()
        .map(|&i| {
            (
                set.length(i),
                set.sequence(i).unwrap_or(i),
                set.target_position(i),
                i,
            )
        })
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|k| k.3).collect()
}

/// Cuts `order` (sample indices of `set`) into consecutive pieces of at most `max_samples`
/// samples and at most `max_positions` positions, greedily from the front. A piece's
/// positions are its sample count times its longest valid length (the width it is built
/// at); a sample longer than the budget alone is a piece of its own. Returns the pieces as
/// ranges of `order`.
///
/// With samples no longer than `max_positions / max_samples` the budget never binds and the
/// pieces are exactly `order.chunks(max_samples)`.
pub fn micro_batches(
    set: &dyn SampleSet,
    order: &[usize],
    max_samples: usize,
    max_positions: usize,
) -> Vec<std::ops::Range<usize>> {
    let max_samples = max_samples.max(1);
    let mut pieces = Vec::new();
    let (mut start, mut widest) = (0, 0usize);
    for (k, &i) in order.iter().enumerate() {
        let w = widest.max(set.length(i));
        let count = k - start + 1;
        if count > 1 && (count > max_samples || count.saturating_mul(w) > max_positions) {
            pieces.push(start..k);
            start = k;
            widest = set.length(i);
        } else {
            widest = w;
        }
    }
    if start < order.len() {
        pieces.push(start..order.len());
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whole-row copies equal ndarray's `select`, for a row-major array (with repeats and a
    /// reversed order) and a transposed one (the fallback), and for zero columns.
    #[test]
    fn select_rows_is_ndarray_select() {
        let a = Array2::from_shape_fn((6, 4), |(i, j)| i * 10 + j);
        let idx = [5, 0, 3, 3, 1];
        assert_eq!(select_rows(&a, &idx), a.select(Axis(0), &idx));
        let t = a.t().to_owned();
        let tv = a.t();
        assert_eq!(select_rows(&t, &[2, 1]), t.select(Axis(0), &[2, 1]));
        let strided = tv.to_owned().reversed_axes();
        assert_eq!(select_rows(&strided, &idx), a.select(Axis(0), &idx));
        let empty = Array2::<f64>::zeros((3, 0));
        assert_eq!(select_rows(&empty, &[2, 0]).dim(), (2, 0));
    }

    /// The order by (length, sequence, target position, index), checked against a sort with
    /// the keys computed per comparison, on samples with ties in every key but the index.
    #[test]
    fn length_order_sorts_by_length_sequence_target_index() {
        let n = 40;
        let s = Samples {
            tokens: Array2::zeros((n, 3)),
            values: None,
            weights: None,
            center: None,
            lengths: (0..n).map(|i| 1 + (i * 7) % 3).collect(),
            pred_idx: (0..n).map(|i| (i * 5) % 2).collect(),
            targets: Targets::Real(vec![0.0; n]),
            group: Some((0..n).map(|i| (i * 11) % 4).collect()),
        };
        let idx: Vec<usize> = (0..n).rev().chain([3, 17]).collect();
        let mut want = idx.clone();
        want.sort_by_key(|&i| (s.lengths[i], s.group.as_ref().unwrap()[i], s.pred_idx[i], i));
        assert_eq!(length_order(&s, &idx), want);
    }
}
