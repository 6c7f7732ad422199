//! The paper's experiments (PAPER.md) behind one [`Experiment`] trait: how the data are
//! loaded and split, which models run (one [`RunSpec`] per setting × model, with the paper's
//! figure), and the experiment's own analyses. `efa reproduce`, `efa bench train` and
//! `efa audit` all run experiments through it, so a new experiment is one module here (its
//! options, its [`Experiment`] implementation and its tests) plus one [`ExperimentOptions`]
//! variant.

pub mod analysis;
pub mod attention_maps;
pub mod instacart;
pub mod movielens;
pub mod options;
pub mod synthetic;
pub mod temperature;
pub mod temperature_clean;

pub use analysis::{Analysis, Figure, TrainedRun};
pub use options::{DataOptions, Directions, Models, Protocol};

use crate::batch::Samples;
use crate::efa::ForwardPlan;
use crate::grads::Evaluator;
use crate::history::{EpochLog, FitResult};
use crate::model::ModelConfig;
use crate::objective::Objective;
use crate::recipe::{Batching, TrainConfig};
use crate::train::{fit, FitOptions};
use crate::ModelError;
use efa_nn::params::Params;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One of the paper's experiments.
pub trait Experiment: Send + Sync {
    /// Name in outputs and the default output directory (`out/<name>`), e.g. `synthetic`,
    /// `movielens-ratings-v1`, `temperature-lag0`.
    fn name(&self) -> String;

    /// Lines describing the loaded data and the protocol, printed before training.
    fn describe(&self) -> Vec<String>;

    /// Every run of the experiment under its options, in table order.
    fn runs(&self, settings: &RunSettings) -> Result<Vec<RunSpec>, ModelError>;

    /// The experiment's analyses of its trained runs beyond the test metric (the paper's
    /// extra tables and figures). None by default.
    fn analyse(&self, runs: &[TrainedRun<'_>]) -> Result<Analysis, ModelError> {
        let _ = runs;
        Ok(Analysis::default())
    }
}

/// Settings every experiment's runs share.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RunSettings {
    /// Most epochs per run (`None`: the paper's for the experiment).
    pub epochs: Option<usize>,
    /// Seed of parameter initialisation and minibatch shuffling (the data's own seeds are the
    /// paper's and fixed).
    pub seed: u64,
    /// A forced forward plan for the EFA models (`None`: chosen per micro-batch). Factor
    /// models have a single forward.
    pub plan: Option<ForwardPlan>,
    /// The requested minibatch composition; it applies where the query-stream plan does (a
    /// causal EFA with sequence ids), every other run keeps the paper's sample batches
    /// (`RunSpec::train_config.batching` says what runs).
    pub batching: Batching,
}

impl RunSettings {
    /// Checks the settings, naming the flag: `--epochs` at least 1 (0 would train nothing
    /// and report the initial weights).
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.epochs == Some(0) {
            return Err(ModelError::Config(
                "--epochs 0: must be at least 1 (0 epochs would train nothing)".into(),
            ));
        }
        Ok(())
    }
}

/// The experiment and its options, one variant per experiment (the `efa reproduce`,
/// `efa bench train` and `efa audit` subcommands).
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "experiment", rename_all = "kebab-case")]
#[cfg_attr(feature = "cli", derive(clap::Subcommand))]
pub enum ExperimentOptions {
    /// Synthetic ratings: 10,000 users × 5 movies with order-dependent rating rules (numpy seed
    /// 42, as the paper); EFA and FM, uni- and bidirectional; no download needed.
    Synthetic(synthetic::Options),
    /// MovieLens-100K exp-1 (PAPER.md §3): the held-out / next movie as a category.
    MovielensItems(movielens::ItemsOptions),
    /// MovieLens-100K exp-2 (PAPER.md §4): Poisson ratings, `--variant v1|v2`.
    MovielensRatings(movielens::RatingsOptions),
    /// Instacart baskets (PAPER.md §5), with bought-together items and attention maps.
    Instacart(instacart::Options),
    /// U.S. city temperatures (PAPER.md §6): EFA and the k-nearest-city FM.
    Temperature(temperature::Options),
}

impl ExperimentOptions {
    /// Loads the data and builds the experiment.
    pub fn build(&self) -> Result<Box<dyn Experiment>, ModelError> {
        Ok(match self {
            ExperimentOptions::Synthetic(o) => Box::new(synthetic::Synthetic::new(o)?),
            ExperimentOptions::MovielensItems(o) => Box::new(movielens::Items::new(o)?),
            ExperimentOptions::MovielensRatings(o) => Box::new(movielens::Ratings::new(o)?),
            ExperimentOptions::Instacart(o) => Box::new(instacart::Instacart::new(o)?),
            ExperimentOptions::Temperature(o) => Box::new(temperature::Temperature::new(o)?),
        })
    }
}

/// One model to train and test: a row of an experiment's table.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// Setting, e.g. `"unidirectional"`.
    pub setting: String,
    /// The model.
    pub model: ModelConfig,
    /// Loss and metric.
    pub objective: Objective,
    /// The paper's value of the metric (PAPER.md).
    pub paper: f64,
    /// Training samples.
    pub train: Samples,
    /// Validation samples.
    pub val: Samples,
    /// Test samples.
    pub test: Samples,
    /// Training settings.
    pub train_config: TrainConfig,
    /// Seed of the parameter initialisation.
    pub init_seed: u64,
    /// A forced forward plan (`None`: chosen per micro-batch).
    pub plan: Option<ForwardPlan>,
}

impl RunSpec {
    /// The evaluator of this run (model, objective, plan).
    pub fn evaluator(&self) -> Evaluator<'_> {
        Evaluator::new(&self.model, &self.objective).with_plan(self.plan)
    }
}

/// The outcome of one run: a row of `results.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResult {
    /// Setting, e.g. `"unidirectional"`.
    pub setting: String,
    /// `"efa"` or `"fm"`.
    pub model: String,
    /// Metric name, e.g. `"test_mse"`.
    pub metric: String,
    /// Our value (exact mean over the test split, best-validation weights).
    pub value: f64,
    /// The paper's value.
    pub paper: f64,
    /// Epochs run.
    pub epochs: usize,
    /// Epoch of the best validation loss.
    pub best_epoch: usize,
    /// Wall time of training and testing.
    pub seconds: f64,
    /// Number of trainable parameters.
    pub params: usize,
    /// The minibatch composition that ran (`samples` or `sequences`).
    #[serde(default)]
    pub batching: String,
    /// Training micro-batches computed by each forward plan.
    #[serde(default)]
    pub plans: BTreeMap<String, usize>,
    /// Loss history.
    pub history: Vec<EpochLog>,
}

/// Trains and tests one model; `observer` sees every epoch (progress bars).
pub fn run(
    spec: &RunSpec,
    observer: &mut dyn FnMut(&EpochLog),
) -> Result<(RunResult, Params<f32>), ModelError> {
    spec.model.validate()?;
    spec.train_config.validate()?;
    for (name, s) in [
        ("train", &spec.train),
        ("val", &spec.val),
        ("test", &spec.test),
    ] {
        s.validate(&format!(
            "{} {} {name} split",
            spec.setting,
            spec.model.kind()
        ))
        .map_err(ModelError::Batch)?;
    }
    let start = std::time::Instant::now();
    let mut params = spec.model.init::<f32>(spec.init_seed);
    let eval = spec.evaluator();
    let mut hook = |log: &EpochLog| -> Result<(), ModelError> {
        observer(log);
        Ok(())
    };
    let fit: FitResult = fit(
        &eval,
        &mut params,
        &spec.train,
        &spec.val,
        &spec.train_config,
        FitOptions {
            on_epoch: Some(&mut hook),
            ..FitOptions::default()
        },
    )?;
    let value = eval.evaluate(&params, &spec.test, spec.train_config.eval_batch)?;
    Ok((
        RunResult {
            setting: spec.setting.clone(),
            model: spec.model.kind().to_string(),
            metric: spec.objective.metric().to_string(),
            value,
            paper: spec.paper,
            epochs: fit.epochs,
            best_epoch: fit.best_epoch,
            seconds: start.elapsed().as_secs_f64(),
            params: params.count(),
            batching: spec.train_config.batching.name().to_string(),
            plans: fit.plans,
            history: fit.history,
        },
        params,
    ))
}

/// The plan a run forces: `settings.plan` for an EFA model, nothing for a factor model
/// (which has a single forward).
pub fn plan_of(model: &ModelConfig, settings: &RunSettings) -> Option<ForwardPlan> {
    match model {
        ModelConfig::Efa(_) => settings.plan,
        ModelConfig::Fm(_) => None,
    }
}

/// `"unidirectional"` or `"bidirectional"`.
pub fn direction_name(uni: bool) -> &'static str {
    if uni {
        "unidirectional"
    } else {
        "bidirectional"
    }
}

/// The training batching of a run: `requested` for a causal EFA whose training samples carry
/// sequence ids (where the query stream applies); every other model keeps the paper's sample
/// batches.
pub fn batching_for(requested: Batching, spec: &RunSpec) -> Batching {
    let causal_efa = matches!(&spec.model,
        ModelConfig::Efa(c) if c.direction == crate::efa::Direction::Causal);
    if causal_efa && spec.train.group.is_some() {
        requested
    } else {
        Batching::Samples
    }
}
