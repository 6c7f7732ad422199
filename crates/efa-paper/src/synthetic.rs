//! The synthetic ratings experiment (docs/paper.md §2): 10,000 users × 5 movies from numpy's
//! seed 42, every position a masked target, EFA and FM, unidirectional and bidirectional.

use crate::{Directions, Experiment, ModelKind, Models, PaperError, RunKey, RunSettings, RunSpec};
use efa_data::samples::{CompactRatingTable, Direction, EfaSample, FmSample, RatingData, Split};
use efa_data::synthetic::{generate_synthetic, sequences_by_user, SyntheticConfig};
use efa_model::batch::{Samples, Targets};
use efa_model::efa::{EfaConfig, Positions, ValueTable, Visibility};
use efa_model::fm::FmConfig;
use efa_model::objective::Objective;
use efa_model::ModelConfig;
use efa_train::recipe::TrainConfig;
use ndarray::Array2;

/// Users 1..=7500 are train+val, the rest test (docs/paper.md §2.1).
pub const TRAINVAL_USERS: usize = 7500;
/// Movies per user.
pub const MOVIES: usize = 5;

/// The paper's test MSE per (direction, model) (docs/paper.md §2.5).
pub fn paper_value(dir: Direction, model: ModelKind) -> f64 {
    match (dir, model) {
        (Direction::Uni, ModelKind::Fm) => 4.519,
        (Direction::Uni, ModelKind::Efa) => 1.033,
        (Direction::Bi, ModelKind::Fm) => 2.636,
        (Direction::Bi, ModelKind::Efa) => 1.038,
    }
}

/// The generated data with the paper's split (seed 42 everywhere).
pub fn data(n_users: usize) -> Result<RatingData, PaperError> {
    let rows = generate_synthetic(&SyntheticConfig {
        n_users,
        seed: 42,
        sigma: 1.0,
    });
    let (users, seqs) = sequences_by_user(&rows)?;
    let cut = users
        .iter()
        .position(|&u| u as usize > TRAINVAL_USERS * n_users / 10_000)
        .unwrap_or(users.len());
    let (trainval, test) = seqs.split_at(cut);
    Ok(RatingData::new(
        trainval.to_vec(),
        test.to_vec(),
        Some(MOVIES),
        42,
    )?)
}

/// The value table of the EFA models: one row per `trunc(rating)` key that occurs (MASK
/// values included), equivalent to the paper's 50,002-row table.
pub fn rating_table(data: &RatingData) -> Result<CompactRatingTable, PaperError> {
    let values = data
        .trainval
        .iter()
        .chain(data.test.iter())
        .flat_map(|s| s.iter().map(|&(_, r)| r))
        .chain([data.trainval_mask, data.test_mask]);
    Ok(CompactRatingTable::new(values)?)
}

/// EFA samples as model input: movie tokens, rating rows, lengths, target positions.
pub fn efa_samples(
    samples: &[EfaSample],
    table: &CompactRatingTable,
) -> Result<Samples, PaperError> {
    let n = samples.len();
    let w = samples.first().map_or(0, |s| s.movies.len());
    let mut tokens = Array2::zeros((n, w));
    let mut values = Array2::zeros((n, w));
    for (i, s) in samples.iter().enumerate() {
        for j in 0..w {
            tokens[[i, j]] = s.movies[j];
            values[[i, j]] = table
                .row(s.ratings[j])
                .map_err(|e| PaperError::Samples(format!("sample {i}: {e}")))?;
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

/// The paper's EFA for rating data (docs/paper.md §2.3): movie 32 ‖ rating 32, positions added
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
        norm: efa_model::efa::Norm::None,
        ln_eps: 1e-3,
        head_hidden: vec![32],
        out_dim: 1,
        out_bias: true,
        direction: Visibility::Padding,
        continuous: None,
    }
}

/// Builds the run for one (direction, model) of the synthetic experiment.
pub fn spec(
    data: &RatingData,
    dir: Direction,
    kind: ModelKind,
    train_config: TrainConfig,
    init_seed: u64,
) -> Result<RunSpec, PaperError> {
    let (model, train, val, test) = if kind == ModelKind::Efa {
        let table = rating_table(data)?;
        let model = ModelConfig::Efa(efa_config(MOVIES + 1, table.rows(), MOVIES));
        let build = |split| -> Result<Samples, PaperError> {
            efa_samples(&data.efa_samples(split, dir)?, &table)
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
        let build = |split| -> Result<Samples, PaperError> {
            Ok(fm_samples(&data.fm_samples(split, dir)?))
        };
        (
            model,
            build(Split::Train)?,
            build(Split::Val)?,
            build(Split::Test)?,
        )
    };
    Ok(RunSpec {
        key: RunKey::directed(kind, dir),
        model,
        objective: Objective::Mse,
        paper: paper_value(dir, kind),
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
pub fn audit_batch(
    dir: Direction,
    kind: ModelKind,
    n: usize,
) -> Result<(ModelConfig, Samples), PaperError> {
    let data = data(100)?;
    let spec = spec(&data, dir, kind, TrainConfig::paper(1, 0), 0)?;
    let idx: Vec<usize> = (0..n.min(spec.train.len())).collect();
    Ok((spec.model, spec.train.select(&idx)))
}

/// Most `--users`: 1,000,000, a hundred times the paper's 10,000 (the generated splits take
/// memory in proportion).
pub const MAX_USERS: usize = 1_000_000;

/// `users` a multiple of 4, at least 8 and at most [`MAX_USERS`].
pub fn check_users(users: usize) -> Result<(), PaperError> {
    if users < 8 || !users.is_multiple_of(4) || users > MAX_USERS {
        return Err(PaperError::setting(
            "users",
            users,
            format!("must be a multiple of 4, at least 8 and at most {MAX_USERS}"),
        ));
    }
    Ok(())
}

/// Options of the synthetic experiment.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, clap::Args)]
pub struct Options {
    /// Directions to run.
    #[arg(long, value_enum, default_value_t = Directions::Both)]
    pub direction: Directions,
    /// Models to run.
    #[arg(long, value_enum, default_value_t = Models::Both)]
    pub model: Models,
    /// Number of users to generate (the paper: 10,000; smaller values are for quick checks,
    /// with the same 75/25 user split; a multiple of 4, at least 8, at most 1,000,000).
    #[arg(long, default_value_t = 10_000,
        value_parser = |s: &str| crate::options::parse_checked(s, |&u| check_users(u)))]
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
    pub fn new(options: &Options) -> Result<Self, PaperError> {
        check_users(options.users)?;
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

    fn grid(&self, s: &RunSettings) -> Result<Vec<RunSpec>, PaperError> {
        let epochs = s.epochs.unwrap_or(1000);
        let mut out = Vec::new();
        for &dir in self.options.direction.directions() {
            for &kind in self.options.model.kinds() {
                let cfg = TrainConfig::paper(epochs, s.seed);
                out.push(spec(&self.data, dir, kind, cfg, s.seed)?);
            }
        }
        Ok(out)
    }
}
