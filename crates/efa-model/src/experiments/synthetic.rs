//! The synthetic ratings experiment (PAPER.md §2): 10,000 users × 5 movies from numpy's
//! seed 42, every position a masked target, EFA and FM, unidirectional and bidirectional.

use super::{direction_name, plan_of, Directions, Experiment, Models, RunSettings, RunSpec};
use crate::batch::{Samples, Targets};
use crate::efa::{Direction, EfaConfig, Positions, ValueTable};
use crate::fm::FmConfig;
use crate::objective::Objective;
use crate::train::TrainConfig;
use crate::{ModelConfig, ModelError};
use efa_data::samples::{
    CompactRatingTable, Direction as DataDir, EfaSample, FmSample, RatingData, Split,
};
use efa_data::synthetic::{generate_synthetic, sequences_by_user, SyntheticConfig};
use ndarray::Array2;

/// Users 1..=7500 are train+val, the rest test (PAPER.md §2.1).
pub const TRAINVAL_USERS: usize = 7500;
/// Movies per user.
pub const MOVIES: usize = 5;

/// The paper's test MSE per (direction, model) (PAPER.md §2.5).
pub fn paper_value(uni: bool, efa: bool) -> f64 {
    match (uni, efa) {
        (true, false) => 4.519,
        (true, true) => 1.033,
        (false, false) => 2.636,
        (false, true) => 1.038,
    }
}

/// The generated data with the paper's split (seed 42 everywhere).
pub fn data(n_users: usize) -> Result<RatingData, ModelError> {
    let rows = generate_synthetic(&SyntheticConfig {
        n_users,
        seed: 42,
        sigma: 1.0,
    });
    let (users, seqs) = sequences_by_user(&rows).map_err(|e| ModelError::Batch(e.to_string()))?;
    let cut = users
        .iter()
        .position(|&u| u as usize > TRAINVAL_USERS * n_users / 10_000)
        .unwrap_or(users.len());
    let (trainval, test) = seqs.split_at(cut);
    RatingData::new(trainval.to_vec(), test.to_vec(), Some(MOVIES), 42)
        .map_err(|e| ModelError::Batch(e.to_string()))
}

/// The value table of the EFA models: one row per `trunc(rating)` key that occurs (MASK
/// values included), equivalent to the paper's 50,002-row table.
pub fn rating_table(data: &RatingData) -> Result<CompactRatingTable, ModelError> {
    let values = data
        .trainval
        .iter()
        .chain(data.test.iter())
        .flat_map(|s| s.iter().map(|&(_, r)| r))
        .chain([data.trainval_mask, data.test_mask]);
    CompactRatingTable::new(values).map_err(|e| ModelError::Batch(e.to_string()))
}

/// EFA samples as model input: movie tokens, rating rows, lengths, target positions.
pub fn efa_samples(
    samples: &[EfaSample],
    table: &CompactRatingTable,
) -> Result<Samples, ModelError> {
    let n = samples.len();
    let w = samples.first().map_or(0, |s| s.movies.len());
    let mut tokens = Array2::zeros((n, w));
    let mut values = Array2::zeros((n, w));
    for (i, s) in samples.iter().enumerate() {
        for j in 0..w {
            tokens[[i, j]] = s.movies[j];
            values[[i, j]] = table
                .row(s.ratings[j])
                .map_err(|e| ModelError::Batch(format!("sample {i}: {e}")))?;
        }
    }
    Ok(Samples {
        tokens,
        values: Some(values),
        weights: None,
        center: None,
        lengths: samples.iter().map(|s| s.length).collect(),
        pred_idx: samples.iter().map(|s| s.pred_idx).collect(),
        targets: Targets::Real(samples.iter().map(|s| s.target).collect()),
        group: None,
    })
}

/// FM samples as model input: context movies and ratings, center movie, context size.
pub fn fm_samples(samples: &[FmSample]) -> Samples {
    let n = samples.len();
    let w = samples.first().map_or(0, |s| s.context_movies.len());
    Samples {
        tokens: Array2::from_shape_fn((n, w), |(i, j)| samples[i].context_movies[j]),
        values: None,
        weights: Some(Array2::from_shape_fn((n, w), |(i, j)| {
            samples[i].context_ratings[j]
        })),
        center: Some(samples.iter().map(|s| s.center).collect()),
        lengths: samples.iter().map(|s| s.length).collect(),
        pred_idx: vec![0; n],
        targets: Targets::Real(samples.iter().map(|s| s.target).collect()),
        group: None,
    }
}

/// The paper's EFA for rating data (PAPER.md §2.3): movie 32 ‖ rating 32, positions added
/// everywhere, 2 × MHA(2 heads × 16) with residuals, gather, Dense 32 ReLU, Dense 1.
pub fn efa_config(items: usize, value_rows: usize, max_len: usize) -> EfaConfig {
    EfaConfig {
        items,
        item_dim: 32,
        zero_padding: false,
        values: Some(ValueTable {
            rows: value_rows,
            dim: 32,
        }),
        positions: Some(Positions {
            max_len,
            only_valid: false,
        }),
        layers: 2,
        heads: 2,
        key_dim: 16,
        ffn: None,
        norm: crate::efa::Norm::None,
        ln_eps: 1e-3,
        head_hidden: vec![32],
        out_dim: 1,
        out_bias: true,
        direction: Direction::Padding,
        continuous: None,
    }
}

/// Builds the run for one (direction, model) of the synthetic experiment.
pub fn spec(
    data: &RatingData,
    uni: bool,
    efa: bool,
    train_config: TrainConfig,
    init_seed: u64,
) -> Result<RunSpec, ModelError> {
    let dir = if uni { DataDir::Uni } else { DataDir::Bi };
    let err = |e: efa_data::DataError| ModelError::Batch(e.to_string());
    let (model, train, val, test) = if efa {
        let table = rating_table(data)?;
        let model = ModelConfig::Efa(efa_config(MOVIES + 1, table.rows(), MOVIES));
        let build = |split| -> Result<Samples, ModelError> {
            efa_samples(&data.efa_samples(split, dir).map_err(err)?, &table)
        };
        (
            model,
            build(Split::Train)?,
            build(Split::Val)?,
            build(Split::Test)?,
        )
    } else {
        let model = ModelConfig::Fm(FmConfig::Rating {
            items: MOVIES + 1,
            dim: 32,
        });
        let build = |split| -> Result<Samples, ModelError> {
            Ok(fm_samples(&data.fm_samples(split, dir).map_err(err)?))
        };
        (
            model,
            build(Split::Train)?,
            build(Split::Val)?,
            build(Split::Test)?,
        )
    };
    Ok(RunSpec {
        setting: direction_name(uni).to_string(),
        model,
        objective: Objective::Mse,
        paper: paper_value(uni, efa),
        train,
        val,
        test,
        train_config,
        init_seed,
        plan: None,
    })
}

/// A small seeded batch of the synthetic experiment for gradient audits: the first `n`
/// training samples of the given direction and model, from 40 generated users.
pub fn audit_batch(uni: bool, efa: bool, n: usize) -> Result<(ModelConfig, Samples), ModelError> {
    let data = data(100)?;
    let spec = spec(&data, uni, efa, TrainConfig::paper(1, 0), 0)?;
    let idx: Vec<usize> = (0..n.min(spec.train.len())).collect();
    Ok((spec.model, spec.train.select(&idx)))
}

/// Most `--users`: 1,000,000, a hundred times the paper's 10,000 (the generated splits take
/// memory in proportion).
pub const MAX_USERS: usize = 1_000_000;

/// Options of the synthetic experiment.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct Options {
    /// Directions to run.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = Directions::Both))]
    pub direction: Directions,
    /// Models to run.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = Models::Both))]
    pub model: Models,
    /// Number of users to generate (the paper: 10,000; smaller values are for quick checks,
    /// with the same 75/25 user split; a multiple of 4, at least 8, at most 1,000,000).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 10_000))]
    pub users: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            direction: Directions::Both,
            model: Models::Both,
            users: 10_000,
        }
    }
}

/// The synthetic experiment with its generated data.
pub struct Synthetic {
    options: Options,
    data: RatingData,
}

impl Synthetic {
    /// Generates the data (numpy seed 42).
    pub fn new(options: &Options) -> Result<Self, ModelError> {
        if options.users < 8 || !options.users.is_multiple_of(4) || options.users > MAX_USERS {
            return Err(ModelError::Config(format!(
                "--users {}: must be a multiple of 4, at least 8 and at most {MAX_USERS}",
                options.users
            )));
        }
        Ok(Self {
            options: options.clone(),
            data: data(options.users)?,
        })
    }
}

impl Experiment for Synthetic {
    fn name(&self) -> String {
        "synthetic".into()
    }

    fn describe(&self) -> Vec<String> {
        vec![format!(
            "synthetic data: {} train / {} val / {} test samples (numpy seed 42)",
            self.data.train.len(),
            self.data.val.len(),
            self.data.test_samples.len()
        )]
    }

    fn runs(&self, s: &RunSettings) -> Result<Vec<RunSpec>, ModelError> {
        s.validate()?;
        let epochs = s.epochs.unwrap_or(1000);
        let mut out = Vec::new();
        for &uni in self.options.direction.unidirectional() {
            for &efa in self.options.model.is_efa() {
                let cfg = TrainConfig::paper(epochs, s.seed);
                let mut spec = spec(&self.data, uni, efa, cfg, s.seed)?;
                spec.train_config.batching = super::batching_for(s.batching, &spec);
                spec.plan = plan_of(&spec.model, s);
                out.push(spec);
            }
        }
        Ok(out)
    }
}
