//! [`UserSet`]: the samples of a user CSV kept as its sequences (each row stored once), each
//! minibatch built on demand at the width of its own longest member.

use super::{Direction, UserConfig, UserData};
use efa_expfam::Family;
use efa_model::batch::{SampleSet, Samples, Targets};
use efa_model::model::ModelConfig;
use ndarray::Array2;

/// What a sample's inputs are built as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// EFA: the sequence's items (the prefix up to the target for `uni`), with value-table
    /// rows `value + 1` and the target's replaced by `mask_row` when there is a table.
    Efa {
        /// The \[MASK\] row of the value table, if the model has one.
        mask_row: Option<usize>,
    },
    /// Rating FM: the context items with their values as weights, the target's item as
    /// center.
    Fm,
    /// EFA with continuous inputs: the items as tokens (site ids), the values as `weights`
    /// (the target's 0), the lags as `values` when the model has a lag embedding.
    Continuous {
        /// The model has a lag embedding.
        lags: bool,
    },
}

/// The samples of a user CSV (one per target row, see [`crate::userdata`]), stored as the
/// sequences' rows once plus one `(sequence, target)` pair per sample: memory grows with the
/// rows, not with samples × longest sequence. [`SampleSet::select`] builds a dense minibatch
/// at the width of its longest member (the same arrays the dense layout has on those
/// positions; every position beyond a sample's length is padding 0).
///
/// Sample `i`'s valid length is, for EFA models, the sequence length (`bi`) or the target
/// position + 1 (`uni`); for rating FMs the number of context rows (length − 1, or the target
/// position for `uni`).
#[derive(Clone, Debug)]
pub struct UserSet {
    layout: Layout,
    uni: bool,
    /// Item of every row, sequence after sequence.
    items: Vec<usize>,
    /// Value of every row.
    values: Vec<f64>,
    /// Lag of every row.
    lags: Vec<usize>,
    /// Start of each sequence in `items`/`values`, and the end as the last entry.
    starts: Vec<usize>,
    /// `(sequence, target position)` per sample.
    cases: Vec<(usize, usize)>,
    /// The family of each sample's target, with `[[family]]` ranges (mixed targets).
    families: Option<Vec<Family>>,
}

impl UserSet {
    /// The samples of `data` under `cfg`: one per target row ([`super::Row::target`]), in
    /// file order of sequences and then by `order`.
    pub fn new(data: &UserData, cfg: &UserConfig) -> Self {
        let uni = cfg.direction == Direction::Uni;
        let layout = match &cfg.model {
            ModelConfig::Efa(c) => match &c.continuous {
                Some(ci) => Layout::Continuous {
                    lags: ci.lag_rows.is_some(),
                },
                None => Layout::Efa {
                    mask_row: c.values.as_ref().map(|v| v.rows - 1),
                },
            },
            ModelConfig::Fm(_) => Layout::Fm,
        };
        let list = cfg.family.list();
        let rows: usize = data.sequences.iter().map(Vec::len).sum();
        let mut set = UserSet {
            layout,
            uni,
            items: Vec::with_capacity(rows),
            values: Vec::with_capacity(rows),
            lags: Vec::with_capacity(rows),
            starts: Vec::with_capacity(data.sequences.len() + 1),
            cases: Vec::with_capacity(rows),
            families: cfg.family.is_mixed().then(Vec::new),
        };
        for (k, s) in data.sequences.iter().enumerate() {
            set.starts.push(set.items.len());
            set.items.extend(s.iter().map(|r| r.item));
            set.values.extend(s.iter().map(|r| r.value));
            set.lags.extend(s.iter().map(|r| r.lag));
            for (t, r) in s.iter().enumerate().filter(|(_, r)| r.target) {
                set.cases.push((k, t));
                if let Some(f) = set.families.as_mut() {
                    f.push(list[r.family].family());
                }
            }
        }
        set.starts.push(set.items.len());
        set
    }

    /// `(sequence, target position)` of every sample.
    pub fn cases(&self) -> &[(usize, usize)] {
        &self.cases
    }

    /// The targets of the samples `idx`: their observations, with their families when the
    /// data mix families.
    fn targets(&self, idx: &[usize]) -> Targets {
        let y = idx
            .iter()
            .map(|&i| {
                let (k, t) = self.cases[i];
                self.values[self.starts[k] + t]
            })
            .collect();
        match &self.families {
            Some(f) => Targets::Mixed {
                y,
                families: idx.iter().map(|&i| f[i]).collect(),
            },
            None => Targets::Real(y),
        }
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.cases.len()
    }

    /// True when there are no samples.
    pub fn is_empty(&self) -> bool {
        self.cases.is_empty()
    }

    /// Rows stored (the CSV's rows).
    pub fn rows(&self) -> usize {
        self.items.len()
    }

    /// The longest valid length of any sample (the width of a minibatch of all samples).
    pub fn longest(&self) -> usize {
        (0..self.len()).map(|i| self.length(i)).max().unwrap_or(0)
    }

    /// Rows of sequence `k`.
    fn sequence_rows(&self, k: usize) -> std::ops::Range<usize> {
        self.starts[k]..self.starts[k + 1]
    }

    /// Valid length of sample `i` (see the type docs).
    pub fn length(&self, i: usize) -> usize {
        let (k, t) = self.cases[i];
        let len = self.sequence_rows(k).len();
        match (self.layout, self.uni) {
            (Layout::Efa { .. } | Layout::Continuous { .. }, false) => len,
            (Layout::Efa { .. } | Layout::Continuous { .. }, true) => t + 1,
            (Layout::Fm, false) => len - 1,
            (Layout::Fm, true) => t,
        }
    }

    /// The samples at `idx`, in that order, as a dense minibatch of width
    /// `max(length(i) for i in idx)`.
    pub fn select(&self, idx: &[usize]) -> Samples {
        let n = idx.len();
        let width = idx.iter().map(|&i| self.length(i)).max().unwrap_or(0);
        let mut tokens = Array2::zeros((n, width));
        let mut lengths = Vec::with_capacity(n);
        let targets = self.targets(idx);
        match self.layout {
            Layout::Efa { mask_row } => {
                let mut values = mask_row.map(|_| Array2::zeros((n, width)));
                for (r, &i) in idx.iter().enumerate() {
                    let (k, t) = self.cases[i];
                    let s = self.sequence_rows(k).start;
                    let len = self.length(i);
                    for j in 0..len {
                        tokens[[r, j]] = self.items[s + j];
                        if let (Some(v), Some(mask)) = (values.as_mut(), mask_row) {
                            v[[r, j]] = if j == t {
                                mask
                            } else {
                                self.values[s + j] as usize + 1
                            };
                        }
                    }
                    lengths.push(len);
                }
                Samples {
                    tokens,
                    values,
                    weights: None,
                    center: None,
                    lengths,
                    pred_idx: idx.iter().map(|&i| self.cases[i].1).collect(),
                    targets,
                    // A sequence's samples share every input but their own target's.
                    group: Some(idx.iter().map(|&i| self.cases[i].0).collect()),
                }
            }
            Layout::Continuous { lags } => {
                let mut weights = Array2::zeros((n, width));
                let mut lag_ids = lags.then(|| Array2::zeros((n, width)));
                for (r, &i) in idx.iter().enumerate() {
                    let (k, t) = self.cases[i];
                    let s = self.sequence_rows(k).start;
                    let len = self.length(i);
                    for j in 0..len {
                        tokens[[r, j]] = self.items[s + j];
                        if j != t {
                            weights[[r, j]] = self.values[s + j];
                        }
                        if let Some(l) = lag_ids.as_mut() {
                            l[[r, j]] = self.lags[s + j];
                        }
                    }
                    lengths.push(len);
                }
                Samples {
                    tokens,
                    values: lag_ids,
                    weights: Some(weights),
                    center: None,
                    lengths,
                    pred_idx: idx.iter().map(|&i| self.cases[i].1).collect(),
                    targets,
                    // A sequence's samples share every input but their own target's.
                    group: Some(idx.iter().map(|&i| self.cases[i].0).collect()),
                }
            }
            Layout::Fm => {
                let mut weights = Array2::zeros((n, width));
                let mut center = Vec::with_capacity(n);
                for (r, &i) in idx.iter().enumerate() {
                    let (k, t) = self.cases[i];
                    let rows = self.sequence_rows(k);
                    let end = if self.uni { rows.start + t } else { rows.end };
                    let mut c = 0;
                    for row in (rows.start..end).filter(|&row| row != rows.start + t) {
                        tokens[[r, c]] = self.items[row];
                        weights[[r, c]] = self.values[row];
                        c += 1;
                    }
                    lengths.push(c);
                    center.push(self.items[rows.start + t]);
                }
                Samples {
                    tokens,
                    values: None,
                    weights: Some(weights),
                    center: Some(center),
                    lengths,
                    pred_idx: vec![0; n],
                    targets,
                    group: None,
                }
            }
        }
    }

    /// Every sample as one dense [`Samples`] of width [`UserSet::longest`] (memory: samples ×
    /// longest; for small data and tests).
    pub fn dense(&self) -> Samples {
        self.select(&(0..self.len()).collect::<Vec<_>>())
    }
}

impl SampleSet for UserSet {
    fn len(&self) -> usize {
        UserSet::len(self)
    }

    fn length(&self, i: usize) -> usize {
        UserSet::length(self, i)
    }

    fn target_position(&self, i: usize) -> usize {
        match self.layout {
            Layout::Efa { .. } | Layout::Continuous { .. } => self.cases[i].1,
            Layout::Fm => 0,
        }
    }

    fn sequence(&self, _: usize) -> Option<usize> {
        None
    }

    fn has_sequences(&self) -> bool {
        false
    }

    fn select(&self, idx: &[usize]) -> Samples {
        UserSet::select(self, idx)
    }
}
