//! `efa reproduce …`: the paper's experiments, one command each.

use crate::report::{print_table, train_with_bar, write_outputs};
use crate::CliError;
use clap::{Args, Subcommand, ValueEnum};
use efa_model::experiments::{synthetic, RunResult};
use efa_model::train::TrainConfig;
use serde::Serialize;
use std::path::PathBuf;

/// Arguments of `efa reproduce`.
#[derive(Args)]
pub struct ReproduceArgs {
    #[command(subcommand)]
    experiment: Experiment,
}

#[derive(Subcommand)]
enum Experiment {
    /// Synthetic ratings: 10,000 users × 5 movies with order-dependent rating rules (numpy seed
    /// 42, as the paper); EFA and FM, uni- and bidirectional; no download needed.
    Synthetic(SyntheticArgs),
    /// MovieLens-100K exp-1 (PAPER.md §3): the held-out / next movie as a category.
    MovielensItems(crate::reproduce_real::MlItemsArgs),
    /// MovieLens-100K exp-2 (PAPER.md §4): Poisson ratings, `--variant v1|v2`.
    MovielensRatings(crate::reproduce_real::MlRatingsArgs),
    /// Instacart baskets (PAPER.md §5), with bought-together items and attention maps.
    Instacart(crate::reproduce_real::InstacartArgs),
    /// U.S. city temperatures (PAPER.md §6): EFA and the k-nearest-city FM.
    Temperature(crate::reproduce_real::TemperatureArgs),
}

/// Which directions to run.
#[derive(Clone, Copy, Debug, ValueEnum, Serialize, PartialEq, Eq)]
pub enum Directions {
    /// Unidirectional only.
    Uni,
    /// Bidirectional only.
    Bi,
    /// Both.
    Both,
}

impl Directions {
    /// The selected directions as "is unidirectional" flags, unidirectional first.
    pub fn unidirectional(self) -> &'static [bool] {
        match self {
            Directions::Uni => &[true],
            Directions::Bi => &[false],
            Directions::Both => &[true, false],
        }
    }
}

/// Which model families to run.
#[derive(Clone, Copy, Debug, ValueEnum, Serialize, PartialEq, Eq)]
pub enum Models {
    /// EFA only.
    Efa,
    /// Factor model only.
    Fm,
    /// Both.
    Both,
}

impl Models {
    /// The selected families as "is EFA" flags, the factor model first.
    pub fn is_efa(self) -> &'static [bool] {
        match self {
            Models::Efa => &[true],
            Models::Fm => &[false],
            Models::Both => &[false, true],
        }
    }
}

/// Options shared by every experiment.
#[derive(Args, Serialize)]
pub struct Common {
    /// Most epochs per model (early stopping usually ends runs sooner).
    #[arg(long, default_value_t = 1000)]
    epochs: usize,
    /// Seed of parameter initialisation and minibatch shuffling (the data's own seeds are the
    /// paper's and fixed).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Output directory for results.json and the SVG plots.
    #[arg(long)]
    out: Option<PathBuf>,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args, Serialize)]
struct SyntheticArgs {
    /// Directions to run.
    #[arg(long, value_enum, default_value_t = Directions::Both)]
    direction: Directions,
    /// Models to run.
    #[arg(long, value_enum, default_value_t = Models::Both)]
    model: Models,
    /// Number of users to generate (the paper: 10,000; smaller values are for quick checks,
    /// with the same 75/25 user split).
    #[arg(long, default_value_t = 10_000)]
    users: usize,
    #[command(flatten)]
    #[serde(flatten)]
    common: Common,
}

/// Runs `efa reproduce`.
pub fn run_cmd(args: ReproduceArgs) -> Result<(), CliError> {
    match args.experiment {
        Experiment::Synthetic(a) => synthetic_cmd(a),
        Experiment::MovielensItems(a) => crate::reproduce_real::movielens_items(a),
        Experiment::MovielensRatings(a) => crate::reproduce_real::movielens_ratings(a),
        Experiment::Instacart(a) => crate::reproduce_real::instacart_cmd(a),
        Experiment::Temperature(a) => crate::reproduce_real::temperature_cmd(a),
    }
}

/// Configures rayon's global pool once.
pub fn set_threads(threads: Option<usize>) -> Result<(), CliError> {
    if let Some(t) = threads {
        if t == 0 {
            return Err(CliError::new("--threads must be at least 1"));
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .map_err(|e| CliError::new(format!("cannot start {t} threads: {e}")))?;
    }
    Ok(())
}

fn synthetic_cmd(a: SyntheticArgs) -> Result<(), CliError> {
    set_threads(a.common.threads)?;
    if a.users < 8 || !a.users.is_multiple_of(4) {
        return Err(CliError::new(format!(
            "--users {}: must be a multiple of 4, at least 8",
            a.users
        )));
    }
    let data = synthetic::data(a.users).map_err(|e| CliError::new(e.to_string()))?;
    eprintln!(
        "synthetic data: {} train / {} val / {} test samples (numpy seed 42)",
        data.train.len(),
        data.val.len(),
        data.test_samples.len()
    );
    let (dirs, models) = (a.direction.unidirectional(), a.model.is_efa());
    let mut rows: Vec<RunResult> = Vec::new();
    for &uni in dirs {
        for &efa in models {
            let cfg = TrainConfig::paper(a.common.epochs, a.common.seed);
            let spec = synthetic::spec(&data, uni, efa, cfg, a.common.seed)
                .map_err(|e| CliError::new(e.to_string()))?;
            let (result, _) = train_with_bar(&spec, a.common.epochs, a.common.quiet)?;
            rows.push(result);
        }
    }
    print_table(&rows);
    let out = a
        .common
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("out/synthetic"));
    write_outputs(&out, "synthetic", &rows, &a)?;
    eprintln!("wrote {}/results.json and loss_curves.svg", out.display());
    Ok(())
}
