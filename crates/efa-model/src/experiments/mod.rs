//! The paper's experiments (PAPER.md): data → per-model runs → a results table beside the
//! paper's numbers.

pub mod instacart;
pub mod movielens;
pub mod synthetic;
pub mod temperature;

use crate::batch::Samples;
use crate::objective::Objective;
use crate::params::Params;
use crate::train::{evaluate, fit, EpochLog, FitResult, TrainConfig};
use crate::{ModelConfig, ModelError};
use serde::{Deserialize, Serialize};

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
    /// Loss history.
    pub history: Vec<EpochLog>,
}

/// Trains and tests one model.
pub fn run(
    spec: &RunSpec,
    observer: &mut dyn FnMut(&EpochLog),
) -> Result<(RunResult, Params<f32>), ModelError> {
    spec.model.validate()?;
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
    let fit: FitResult = fit(
        &spec.model,
        &spec.objective,
        &mut params,
        &spec.train,
        &spec.val,
        &spec.train_config,
        observer,
    )?;
    let value = evaluate(
        &spec.model,
        &spec.objective,
        &params,
        &spec.test,
        spec.train_config.eval_batch,
    )?;
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
            history: fit.history,
        },
        params,
    ))
}
