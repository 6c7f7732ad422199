//! Per-position samples for the rating experiments (synthetic §2.2, MovieLens exp-2 §4.3).
//!
//! Every position of every user sequence is the masked target once. Samples are enumerated
//! users ascending, then positions `0..n`; the train+val samples are split per sample with
//! `train_test_split(test_size = 0.25, random_state = seed)` and kept in the permuted order the
//! split returns.

use crate::rng::train_test_split;
use crate::DataError;
use serde::{Deserialize, Serialize};

/// A user's ratings in time order: `(movie id ≥ 1, rating)`.
pub type Sequence = Vec<(usize, f64)>;

/// Which split a sample belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// Training samples.
    Train,
    /// Validation samples (per-sample split of the train+val users).
    Val,
    /// Test samples (disjoint users).
    Test,
}

/// Context direction of a sample: which rows of its sequence a target sees. Written `"bi"` /
/// `"uni"` in configuration files (the `direction` key of `efa train`'s `model.toml`, default
/// `"bi"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Bidirectional: the whole sequence (every other row) is context.
    #[default]
    Bi,
    /// Unidirectional: only positions before the target (plus the target's item for EFA).
    Uni,
}

/// Reference to one sample: `(sequence index within its frame, target position)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleRef {
    /// Index of the user sequence in its frame (train+val frame or test frame).
    pub seq: usize,
    /// Target position within the sequence.
    pub pos: usize,
}

/// One EFA sample (plain data, no tape).
#[derive(Clone, Debug, PartialEq)]
pub struct EfaSample {
    /// Movie ids, length `max_ctx`, 0 = padding.
    pub movies: Vec<usize>,
    /// Ratings, length `max_ctx`; the target's replaced by the frame's MASK value, 0 = padding.
    pub ratings: Vec<f64>,
    /// Number of valid (attendable) positions.
    pub length: usize,
    /// Target position.
    pub pred_idx: usize,
    /// The true rating at `pred_idx`.
    pub target: f64,
}

/// One factor-model sample (plain data).
#[derive(Clone, Debug, PartialEq)]
pub struct FmSample {
    /// Movie id at the target position.
    pub center: usize,
    /// Context movie ids, length `max_ctx − 1`, 0 = padding.
    pub context_movies: Vec<usize>,
    /// Context ratings, length `max_ctx − 1`, 0 = padding.
    pub context_ratings: Vec<f64>,
    /// Divisor of the context average: number of context entries, but at least 1 (so an empty
    /// context, e.g. unidir position 0, gives `c = 0` and prediction 0).
    pub length: usize,
    /// The true rating.
    pub target: f64,
}

/// Train+val and test frames with their per-sample split, for the rating experiments.
#[derive(Clone, Debug)]
pub struct RatingData {
    /// Train+val user sequences, users ascending.
    pub trainval: Vec<Sequence>,
    /// Test user sequences, users ascending.
    pub test: Vec<Sequence>,
    /// MASK rating for train and val samples: max rating of the train+val frame + 1.
    pub trainval_mask: f64,
    /// MASK rating for test samples: max rating of the test frame + 1.
    pub test_mask: f64,
    /// Context width of EFA samples (FM samples use `max_ctx − 1`).
    pub max_ctx: usize,
    /// Train samples in the order `train_test_split` returns them.
    pub train: Vec<SampleRef>,
    /// Validation samples in split order.
    pub val: Vec<SampleRef>,
    /// Test samples, users ascending then positions.
    pub test_samples: Vec<SampleRef>,
}

fn enumerate(seqs: &[Sequence]) -> Vec<SampleRef> {
    seqs.iter()
        .enumerate()
        .flat_map(|(s, q)| (0..q.len()).map(move |pos| SampleRef { seq: s, pos }))
        .collect()
}

fn frame_max(seqs: &[Sequence], name: &str) -> Result<f64, DataError> {
    let mut max = f64::NEG_INFINITY;
    for (s, q) in seqs.iter().enumerate() {
        for (p, &(m, r)) in q.iter().enumerate() {
            if !r.is_finite() {
                return Err(DataError::invalid(format!(
                    "{name} sequence {s} position {p}: rating {r} is not finite"
                )));
            }
            if m == 0 {
                return Err(DataError::invalid(format!(
                    "{name} sequence {s} position {p}: movie id 0 is reserved for padding"
                )));
            }
            max = max.max(r);
        }
    }
    if max == f64::NEG_INFINITY {
        return Err(DataError::invalid(format!("{name} frame has no ratings")));
    }
    Ok(max)
}

impl RatingData {
    /// Builds the samples. `max_ctx` defaults to the longest sequence in either frame; a
    /// sequence longer than an explicit `max_ctx` is an error. The train/val split is
    /// `train_test_split(n_trainval_samples, 0.25, seed)`.
    pub fn new(
        trainval: Vec<Sequence>,
        test: Vec<Sequence>,
        max_ctx: Option<usize>,
        seed: u32,
    ) -> Result<Self, DataError> {
        let trainval_mask = frame_max(&trainval, "train+val")? + 1.0;
        let test_mask = frame_max(&test, "test")? + 1.0;
        let longest = trainval
            .iter()
            .chain(test.iter())
            .map(Vec::len)
            .max()
            .unwrap_or(0);
        let max_ctx = match max_ctx {
            Some(m) if m < longest => {
                return Err(DataError::invalid(format!(
                    "max_ctx = {m} is shorter than the longest sequence ({longest})"
                )))
            }
            Some(m) => m,
            None => longest,
        };
        let all = enumerate(&trainval);
        let (tr, va) = train_test_split(all.len(), seed)?;
        let train = tr.into_iter().map(|i| all[i]).collect();
        let val = va.into_iter().map(|i| all[i]).collect();
        let test_samples = enumerate(&test);
        Ok(RatingData {
            trainval,
            test,
            trainval_mask,
            test_mask,
            max_ctx,
            train,
            val,
            test_samples,
        })
    }

    /// The sample references, frame and MASK value of `split`.
    pub fn split(&self, split: Split) -> (&[SampleRef], &[Sequence], f64) {
        match split {
            Split::Train => (&self.train, &self.trainval, self.trainval_mask),
            Split::Val => (&self.val, &self.trainval, self.trainval_mask),
            Split::Test => (&self.test_samples, &self.test, self.test_mask),
        }
    }

    /// All EFA samples of `split` in split order.
    pub fn efa_samples(&self, split: Split, dir: Direction) -> Result<Vec<EfaSample>, DataError> {
        let (refs, seqs, mask) = self.split(split);
        refs.iter()
            .map(|r| efa_sample(&seqs[r.seq], r.pos, self.max_ctx, mask, dir))
            .collect()
    }

    /// All FM samples of `split` in split order (context width `max_ctx − 1`).
    pub fn fm_samples(&self, split: Split, dir: Direction) -> Result<Vec<FmSample>, DataError> {
        let (refs, seqs, _) = self.split(split);
        refs.iter()
            .map(|r| fm_sample(&seqs[r.seq], r.pos, self.max_ctx.saturating_sub(1), dir))
            .collect()
    }
}

/// The EFA sample for target `idx` of `seq` (`idx < seq.len() ≤ max_ctx`, checked by the caller):
/// * bi: movies = all, ratings = all with `ratings[idx] = mask`, length = `seq.len()`;
/// * uni: movies `0..=idx`, ratings `0..idx` then `mask` at `idx`, zeros after, length `idx + 1`.
///
/// Fails if `idx ≥ seq.len()` or `seq.len() > max_ctx`.
pub fn efa_sample(
    seq: &[(usize, f64)],
    idx: usize,
    max_ctx: usize,
    mask: f64,
    dir: Direction,
) -> Result<EfaSample, DataError> {
    check_idx(seq, idx, max_ctx)?;
    let mut movies = vec![0usize; max_ctx];
    let mut ratings = vec![0.0f64; max_ctx];
    let length = match dir {
        Direction::Bi => seq.len(),
        Direction::Uni => idx + 1,
    };
    for p in 0..length {
        movies[p] = seq[p].0;
        ratings[p] = seq[p].1;
    }
    ratings[idx] = mask;
    Ok(EfaSample {
        movies,
        ratings,
        length,
        pred_idx: idx,
        target: seq[idx].1,
    })
}

fn check_idx(seq: &[(usize, f64)], idx: usize, max_ctx: usize) -> Result<(), DataError> {
    if idx >= seq.len() || seq.len() > max_ctx {
        return Err(DataError::invalid(format!(
            "sample: target position {idx} in a sequence of length {} with max_ctx {max_ctx}",
            seq.len()
        )));
    }
    Ok(())
}

/// The FM sample for target `idx` of `seq`, context width `width` (= max_ctx − 1):
/// * bi: context = every other position in order, length = `n − 1` (at least 1);
/// * uni: context = positions `0..idx`, length = `idx` (or 1 when `idx = 0`: empty context).
///
/// Fails if `idx ≥ seq.len()` or `seq.len() > width + 1`.
pub fn fm_sample(
    seq: &[(usize, f64)],
    idx: usize,
    width: usize,
    dir: Direction,
) -> Result<FmSample, DataError> {
    check_idx(seq, idx, width + 1)?;
    let mut context_movies = vec![0usize; width];
    let mut context_ratings = vec![0.0f64; width];
    let ctx: Vec<&(usize, f64)> = match dir {
        Direction::Bi => seq
            .iter()
            .enumerate()
            .filter(|&(p, _)| p != idx)
            .map(|(_, x)| x)
            .collect(),
        Direction::Uni => seq[..idx].iter().collect(),
    };
    for (k, &&(m, r)) in ctx.iter().enumerate() {
        context_movies[k] = m;
        context_ratings[k] = r;
    }
    Ok(FmSample {
        center: seq[idx].0,
        context_movies,
        context_ratings,
        length: ctx.len().max(1),
        target: seq[idx].1,
    })
}

/// The Keras 3 `Embedding` row a float rating selects in a table of `table_rows` rows:
/// `k = trunc(r)` (toward zero, as the int32 cast); a negative `k` wraps to `k + table_rows`
/// (the TF backend's `take`). So in the paper's 50,002-row table, −2.5 → 50,000, −1.2 → 50,001,
/// 0.7 → 0 (the padding row), 8.9 → 8, MASK 9.38 → 9.
///
/// Fails if the rating is not finite or the index falls outside `0..table_rows`.
pub fn rating_row(r: f64, table_rows: usize) -> Result<usize, DataError> {
    if !r.is_finite() {
        return Err(DataError::invalid(format!(
            "rating_row: rating {r} is not finite"
        )));
    }
    let k = r.trunc();
    let n = table_rows as f64;
    let idx = if k < 0.0 { k + n } else { k };
    if idx < 0.0 || idx >= n {
        return Err(DataError::invalid(format!(
            "rating_row: rating {r} gives row {k} outside a {table_rows}-row table"
        )));
    }
    Ok(idx as usize)
}

/// A compact rating-embedding table exactly equivalent to the paper's huge one.
///
/// The paper's row is a function of `trunc(r)` only (see [`rating_row`]), and that function is
/// injective on the keys that occur, so a table with one row per distinct key is the same model
/// with the never-used rows removed (they get zero gradient and Adam never moves them). Row 0
/// is key 0: padding and every |r| < 1 share it, as in the paper. Negative keys (−2, −1 in the
/// synthetic data) get their own rows; the MASK value's key gets its own row unless a real
/// rating truncates to the same key (then it is shared, exactly as in the paper).
#[derive(Clone, Debug, PartialEq)]
pub struct CompactRatingTable {
    /// The keys `trunc(r)` in row order; `keys[0] = 0`, the rest ascending.
    pub keys: Vec<i64>,
}

impl CompactRatingTable {
    /// Builds the table from every rating the model will see, MASK values included.
    pub fn new(values: impl IntoIterator<Item = f64>) -> Result<Self, DataError> {
        let mut keys = std::collections::BTreeSet::new();
        for r in values {
            if !r.is_finite() {
                return Err(DataError::invalid(format!(
                    "CompactRatingTable: rating {r} is not finite"
                )));
            }
            keys.insert(r.trunc() as i64);
        }
        keys.remove(&0);
        let mut v = vec![0i64];
        v.extend(keys);
        Ok(CompactRatingTable { keys: v })
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.keys.len()
    }

    /// The row of rating `r`: the position of `trunc(r)` in [`CompactRatingTable::keys`].
    /// Fails on a key the table was not built with.
    pub fn row(&self, r: f64) -> Result<usize, DataError> {
        if !r.is_finite() {
            return Err(DataError::invalid(format!(
                "CompactRatingTable::row: rating {r} is not finite"
            )));
        }
        let k = r.trunc() as i64;
        self.keys.iter().position(|&x| x == k).ok_or_else(|| {
            DataError::invalid(format!(
                "CompactRatingTable::row: rating {r} (key {k}) is not in the table"
            ))
        })
    }
}
