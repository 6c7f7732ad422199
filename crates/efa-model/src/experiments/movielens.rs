//! MovieLens-100K experiments: exp-1, the next / held-out movie as a category (PAPER.md §3),
//! and exp-2, Poisson ratings (§4). The categorical item models built here are shared with
//! Instacart ([`super::instacart`]).

use super::RunSpec;
use crate::batch::{Samples, Targets};
use crate::efa::{Direction, EfaConfig, Norm, Positions};
use crate::fm::FmConfig;
use crate::objective::Objective;
use crate::params::Params;
use crate::train::{predict, TrainConfig};
use crate::{ModelConfig, ModelError};
use efa_data::item_samples::{
    item_efa_samples, item_fm_bi_samples, item_fm_uni_samples, ItemEfaSample, ItemFmSample,
};
use efa_data::movielens::{
    buggy_user_split, exp1_baskets, load_u_data, preprocess, MlExperiment, MlPrepared, MlUserSplit,
};
use efa_data::rng::{train_test_split, NumpyRng};
use efa_data::samples::{Direction as DataDir, RatingData, SampleRef, Split};
use ndarray::Array2;
use std::path::{Path, PathBuf};

/// How the data are split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Exactly as the notebooks ran it, quirks included (PAPER.md §7: the MovieLens user split
    /// that drops every user id ≥ the number of users; exp-2's per-sample validation split).
    Paper,
    /// Every kept user used (a correct random user split, numpy seed 42) and the validation
    /// split made by user, so no user's ratings are in both train and validation.
    Clean,
}

fn data_err(e: efa_data::DataError) -> ModelError {
    ModelError::Batch(e.to_string())
}

/// `DIR/movielens/u.data`, or an error saying where to get it.
pub fn u_data_path(dir: &Path) -> Result<PathBuf, ModelError> {
    let p = dir.join("movielens").join("u.data");
    if p.is_file() {
        Ok(p)
    } else {
        Err(ModelError::Config(format!(
            "MovieLens data not found: {} does not exist. Download MovieLens 100K from GroupLens \
             (https://grouplens.org/datasets/movielens/100k/, ml-100k.zip) and put its u.data there.",
            p.display()
        )))
    }
}

/// Loads `u.data` from `DIR/movielens` and applies the experiment's preprocessing (§3.1 / §4.1).
pub fn load(dir: &Path, exp: MlExperiment) -> Result<MlPrepared, ModelError> {
    let raw = load_u_data(&u_data_path(dir)?).map_err(data_err)?;
    preprocess(&raw, exp).map_err(data_err)
}

/// The user split of `protocol`: the notebooks' buggy one, or a correct random split of all
/// kept users (`RandomState(42).permutation(n)`, first 3n/4 train+val).
pub fn user_split(prep: &MlPrepared, protocol: Protocol) -> MlUserSplit {
    match protocol {
        Protocol::Paper => buggy_user_split(prep, 42),
        Protocol::Clean => {
            let n = prep.users.len();
            let perm = NumpyRng::seed(42).permutation(n);
            let pick = |idx: &[usize]| {
                let mut v: Vec<u32> = idx.iter().map(|&i| prep.users[i]).collect();
                v.sort_unstable();
                v
            };
            MlUserSplit {
                trainval: pick(&perm[..3 * n / 4]),
                test: pick(&perm[3 * n / 4..]),
                dropped: Vec::new(),
            }
        }
    }
}

/// Baskets of a categorical item experiment, split three ways.
#[derive(Clone, Debug)]
pub struct ItemData {
    /// Training baskets (item ids 1..=n_items), in split order.
    pub train: Vec<Vec<usize>>,
    /// Validation baskets.
    pub val: Vec<Vec<usize>>,
    /// Test baskets.
    pub test: Vec<Vec<usize>>,
    /// Number of items (classes).
    pub n_items: usize,
    /// Longest basket (the EFA context width).
    pub max_len: usize,
}

impl ItemData {
    /// Number of per-position samples in `baskets`.
    pub fn samples(baskets: &[Vec<usize>]) -> usize {
        baskets.iter().map(Vec::len).sum()
    }
}

/// Exp-1 baskets (§3.2): with the paper protocol 480 / 161 / 219 users, 7,252 / 2,484 / 3,408
/// samples, max_len 44.
pub fn exp1_data(dir: &Path, protocol: Protocol) -> Result<ItemData, ModelError> {
    let prep = load(dir, MlExperiment::Exp1)?;
    let split = user_split(&prep, protocol);
    let b = exp1_baskets(&prep, &split).map_err(data_err)?;
    let strip = |v: Vec<(u32, Vec<usize>)>| v.into_iter().map(|(_, b)| b).collect::<Vec<_>>();
    Ok(ItemData {
        train: strip(b.train),
        val: strip(b.val),
        test: strip(b.test),
        n_items: 50,
        max_len: b.max_len,
    })
}

/// The paper's exp-1 test cross-entropy per (direction, model) (§3.5).
pub fn exp1_paper_value(uni: bool, efa: bool) -> f64 {
    match (uni, efa) {
        (true, false) => 3.534,
        (true, true) => 3.444,
        (false, false) => 3.566,
        (false, true) => 3.483,
    }
}

/// The item EFA of §3.4: α `(n_items + 2) × 32` (0 pad, items, MASK) zeroed on padding,
/// positions `max_len × 32` added only at non-pad positions, 2 × MHA(2 × 16) with residuals,
/// no LN / FFN, gather, Dense(n_items, no bias). Bidirectional = key-padding mask, unidirectional
/// = causal mask only.
pub fn item_efa_config(n_items: usize, max_len: usize, uni: bool) -> EfaConfig {
    EfaConfig {
        items: n_items + 2,
        item_dim: 32,
        zero_padding: true,
        values: None,
        positions: Some(Positions {
            max_len,
            only_valid: true,
        }),
        layers: 2,
        heads: 2,
        key_dim: 16,
        ffn: None,
        norm: Norm::None,
        ln_eps: 1e-3,
        head_hidden: Vec::new(),
        out_dim: n_items,
        out_bias: false,
        direction: if uni {
            Direction::Causal
        } else {
            Direction::Padding
        },
        continuous: None,
    }
}

/// The item FMs of §3.4: bidirectional sums the other items' α (`n_items + 1` rows, no MASK);
/// unidirectional sums the previous items' α plus a learned MASK row (`n_items + 2` rows).
pub fn item_fm_config(n_items: usize, uni: bool) -> FmConfig {
    FmConfig::Item {
        tokens: n_items + if uni { 2 } else { 1 },
        dim: 32,
        classes: n_items,
    }
}

/// EFA samples as model input (`lengths` = basket length, the key-padding mask).
pub fn item_efa_input(samples: &[ItemEfaSample]) -> Samples {
    let n = samples.len();
    let w = samples.first().map_or(0, |s| s.tokens.len());
    Samples {
        tokens: Array2::from_shape_fn((n, w), |(i, j)| samples[i].tokens[j]),
        values: None,
        weights: None,
        center: None,
        lengths: samples.iter().map(|s| s.length).collect(),
        pred_idx: samples.iter().map(|s| s.masked_idx).collect(),
        targets: Targets::Class(samples.iter().map(|s| s.target).collect()),
        group: None,
    }
}

/// FM samples as model input (`lengths` = number of non-pad context tokens, at least 1).
pub fn item_fm_input(samples: &[ItemFmSample]) -> Samples {
    let n = samples.len();
    let w = samples.first().map_or(0, |s| s.context.len());
    Samples {
        tokens: Array2::from_shape_fn((n, w), |(i, j)| samples[i].context[j]),
        values: None,
        weights: None,
        center: None,
        lengths: samples
            .iter()
            .map(|s| s.context.iter().filter(|&&t| t != 0).count().max(1).min(w))
            .collect(),
        pred_idx: vec![0; n],
        targets: Targets::Class(samples.iter().map(|s| s.target).collect()),
        group: None,
    }
}

/// Model input of one split of an item experiment.
pub fn item_input(
    baskets: &[Vec<usize>],
    n_items: usize,
    max_len: usize,
    uni: bool,
    efa: bool,
) -> Result<Samples, ModelError> {
    Ok(match (efa, uni) {
        (true, _) => {
            let mut s =
                item_efa_input(&item_efa_samples(baskets, n_items, max_len).map_err(data_err)?);
            // Samples come basket by basket, one per position: the basket is the sequence id.
            s.group = Some(
                baskets
                    .iter()
                    .enumerate()
                    .flat_map(|(i, b)| std::iter::repeat_n(i, b.len()))
                    .collect(),
            );
            s
        }
        (false, false) => {
            item_fm_input(&item_fm_bi_samples(baskets, n_items, max_len).map_err(data_err)?)
        }
        (false, true) => {
            item_fm_input(&item_fm_uni_samples(baskets, n_items, max_len).map_err(data_err)?)
        }
    })
}

/// The run of one (direction, model) of a categorical item experiment (cross-entropy).
pub fn item_spec(
    data: &ItemData,
    uni: bool,
    efa: bool,
    paper: f64,
    train_config: TrainConfig,
    init_seed: u64,
) -> Result<RunSpec, ModelError> {
    let (n, m) = (data.n_items, data.max_len);
    let model = if efa {
        ModelConfig::Efa(item_efa_config(n, m, uni))
    } else {
        ModelConfig::Fm(item_fm_config(n, uni))
    };
    Ok(RunSpec {
        setting: if uni {
            "unidirectional"
        } else {
            "bidirectional"
        }
        .to_string(),
        model,
        objective: Objective::CrossEntropy,
        paper,
        train: item_input(&data.train, n, m, uni, efa)?,
        val: item_input(&data.val, n, m, uni, efa)?,
        test: item_input(&data.test, n, m, uni, efa)?,
        train_config,
        init_seed,
    })
}

/// The exp-2 loss variant (§4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// y − 1 ~ Poisson(e^η) ([`Objective::PoissonShifted`]).
    V1,
    /// y ~ Poisson(1 + e^η) ([`Objective::PoissonOnePlus`]).
    V2,
}

impl Variant {
    /// The training / test loss.
    pub fn objective(self) -> Objective {
        match self {
            Variant::V1 => Objective::PoissonShifted,
            Variant::V2 => Objective::PoissonOnePlus,
        }
    }
}

/// The paper's exp-2 test loss per (variant, direction, model) (§4.4).
pub fn exp2_paper_value(v: Variant, uni: bool, efa: bool) -> f64 {
    match (v, uni, efa) {
        (Variant::V1, false, false) => 0.971,
        (Variant::V1, false, true) => 0.945,
        (Variant::V1, true, false) => 0.972,
        (Variant::V1, true, true) => 0.953,
        (Variant::V2, false, false) => 0.507,
        (Variant::V2, false, true) => 0.494,
        (Variant::V2, true, false) => 0.508,
        (Variant::V2, true, true) => 0.499,
    }
}

/// The notebooks' mean predicted rating for true ratings 1 / 2 / 3 (§4.4, Table 2).
pub fn exp2_paper_means(v: Variant, uni: bool, efa: bool) -> [f64; 3] {
    match (v, uni, efa) {
        (Variant::V1, false, false) => [2.0597, 2.1014, 2.2145],
        (Variant::V1, false, true) => [1.9282, 2.0613, 2.2993],
        (Variant::V1, true, false) => [2.0584, 2.0926, 2.1976],
        (Variant::V1, true, true) => [1.9785, 2.0907, 2.2926],
        (Variant::V2, false, false) => [2.0592, 2.0996, 2.2093],
        (Variant::V2, false, true) => [1.9442, 2.0777, 2.3128],
        (Variant::V2, true, false) => [2.0612, 2.0958, 2.2032],
        (Variant::V2, true, true) => [1.9821, 2.0895, 2.2865],
    }
}

/// Exp-2 rating data (§4.2): paper protocol = buggy user split, per-sample validation split
/// (6,530 / 2,177 / 3,038 samples); clean = all users, validation split by user.
pub fn exp2_data(dir: &Path, protocol: Protocol) -> Result<RatingData, ModelError> {
    let prep = load(dir, MlExperiment::Exp2)?;
    let split = user_split(&prep, protocol);
    let seqs = |us: &[u32]| {
        us.iter()
            .map(|&u| prep.user(u).cloned().unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let max_ctx = prep.sequences.iter().map(Vec::len).max();
    let mut data =
        RatingData::new(seqs(&split.trainval), seqs(&split.test), max_ctx, 42).map_err(data_err)?;
    if protocol == Protocol::Clean {
        let (tr, va) = train_test_split(data.trainval.len(), 42).map_err(data_err)?;
        let refs = |users: &[usize]| -> Vec<SampleRef> {
            users
                .iter()
                .flat_map(|&s| {
                    (0..data.trainval[s].len()).map(move |pos| SampleRef { seq: s, pos })
                })
                .collect()
        };
        let (train, val) = (refs(&tr), refs(&va));
        data.train = train;
        data.val = val;
    }
    Ok(data)
}

/// The run of one (direction, model) of exp-2: the synthetic experiment's models (§2.3–§2.4)
/// with 50 movies, a 5-row rating table and positions 44; η = the last Dense(1) (EFA) or
/// ⟨ρ, c⟩ (FM), and the objective applies the exponential.
pub fn exp2_spec(
    data: &RatingData,
    v: Variant,
    uni: bool,
    efa: bool,
    train_config: TrainConfig,
    init_seed: u64,
) -> Result<RunSpec, ModelError> {
    use super::synthetic::{efa_config, efa_samples, fm_samples, rating_table};
    let dir = if uni { DataDir::Uni } else { DataDir::Bi };
    let (model, train, val, test) = if efa {
        let table = rating_table(data)?;
        let model = ModelConfig::Efa(efa_config(51, table.rows(), data.max_ctx));
        let build = |s| efa_samples(&data.efa_samples(s, dir).map_err(data_err)?, &table);
        (
            model,
            build(Split::Train)?,
            build(Split::Val)?,
            build(Split::Test)?,
        )
    } else {
        let model = ModelConfig::Fm(FmConfig::Rating { items: 51, dim: 32 });
        let build = |s| -> Result<Samples, ModelError> {
            Ok(fm_samples(&data.fm_samples(s, dir).map_err(data_err)?))
        };
        (
            model,
            build(Split::Train)?,
            build(Split::Val)?,
            build(Split::Test)?,
        )
    };
    Ok(RunSpec {
        setting: format!(
            "{} {}",
            if uni {
                "unidirectional"
            } else {
                "bidirectional"
            },
            if v == Variant::V1 { "v1" } else { "v2" }
        ),
        model,
        objective: v.objective(),
        paper: exp2_paper_value(v, uni, efa),
        train,
        val,
        test,
        train_config,
        init_seed,
    })
}

/// Mean predicted rating `1 + e^η` (v1: λ + 1; v2: μ) over the samples whose true rating is
/// 1, 2 and 3, with the number of such samples.
pub fn mean_prediction_by_rating(
    model: &ModelConfig,
    params: &Params<f32>,
    samples: &Samples,
) -> Result<([f64; 3], [usize; 3]), ModelError> {
    let Targets::Real(y) = &samples.targets else {
        return Err(ModelError::Batch(
            "mean prediction by rating needs real targets".into(),
        ));
    };
    let eta = predict(model, params, samples, 1024)?;
    let (mut sum, mut count) = ([0.0; 3], [0usize; 3]);
    for (i, &t) in y.iter().enumerate() {
        let k = t.round() as i64 - 1;
        if !(0..3).contains(&k) || (t - t.round()).abs() > 1e-9 {
            return Err(ModelError::Batch(format!(
                "test sample {i}: rating {t} is not one of 1, 2, 3"
            )));
        }
        sum[k as usize] += 1.0 + eta[[i, 0]].exp();
        count[k as usize] += 1;
    }
    let mean = std::array::from_fn(|k| {
        if count[k] > 0 {
            sum[k] / count[k] as f64
        } else {
            f64::NAN
        }
    });
    Ok((mean, count))
}
