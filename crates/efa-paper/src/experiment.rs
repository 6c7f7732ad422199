//! One [`Experiment`] trait for the paper's experiments: how the data are loaded and split
//! (the constructor), which runs make its table ([`Experiment::grid`], one [`RunSpec`] per
//! setting × model with the paper's figure and a typed [`RunKey`]), and its own analyses.
//! `efa reproduce`, `efa bench train` and `efa audit` all go through [`Experiment::runs`],
//! which validates the shared [`RunSettings`] and applies the batching and forward plan once
//! for every experiment.

use crate::analysis::{Analysis, TrainedRun};
use crate::PaperError;
use efa_data::samples::Direction;
use efa_model::efa::ForwardPlan;
use efa_model::objective::Objective;
use efa_model::{ModelConfig, Samples};
use efa_nn::params::Params;
use efa_train::collective::{Collective, Solo};
use efa_train::evaluator::Evaluator;
use efa_train::fit::{fit, FitOptions};
use efa_train::history::{EpochLog, FitResult};
use efa_train::recipe::{Batching, TrainConfig};
use efa_train::{Threads, TrainError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// One of the paper's experiments.
pub trait Experiment: Send + Sync {
    /// Name in outputs and the default output directory (`out/<name>`), e.g. `synthetic`,
    /// `movielens-ratings-v1`, `temperature-lag0`.
    fn name(&self) -> String;

    /// Lines describing the loaded data and the protocol, printed before training.
    fn describe(&self) -> Vec<String>;

    /// Every run of the experiment in table order, with the paper's recipe for
    /// `settings.epochs` and `settings.seed`. Batching and forward plan are applied by
    /// [`Experiment::runs`]; a run whose recipe fixes its own batching (not
    /// [`Batching::Samples`]) keeps it.
    fn grid(&self, settings: &RunSettings) -> Result<Vec<RunSpec>, PaperError>;

    /// The runs to train: `settings` checked, then [`Experiment::grid`] with the requested
    /// batching where the query stream applies ([`batching_for`]) and the forced plan on the
    /// EFA models ([`plan_of`]).
    fn runs(&self, settings: &RunSettings) -> Result<Vec<RunSpec>, PaperError> {
        settings.validate()?;
        let mut specs = self.grid(settings)?;
        for spec in &mut specs {
            if spec.train_config.batching == Batching::Samples {
                spec.train_config.batching = batching_for(settings.batching, spec);
            }
            spec.plan = plan_of(&spec.model, settings);
        }
        Ok(specs)
    }

    /// The data files that are not the paper's (allowed by `allow_other_data`): when any is
    /// listed, the results are not the paper's. None by default (and for generated data).
    fn other_data(&self) -> &[efa_data::fingerprint::Mismatch] {
        &[]
    }

    /// The experiment's analyses of its trained runs beyond the test metric (the paper's
    /// extra tables and figures). None by default.
    fn analyse(&self, runs: &[TrainedRun<'_>]) -> Result<Analysis, PaperError> {
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
    /// Checks the settings, naming the field: `epochs` at least 1 (0 would train nothing and
    /// report the initial weights).
    pub fn validate(&self) -> Result<(), PaperError> {
        if self.epochs == Some(0) {
            return Err(PaperError::setting(
                "epochs",
                0,
                "must be at least 1 (0 epochs would train nothing)",
            ));
        }
        Ok(())
    }
}

/// The model family of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// An exponential family attention model.
    Efa,
    /// A linear factor model (the paper's baselines).
    Fm,
}

impl ModelKind {
    /// The kind of `model`.
    pub fn of(model: &ModelConfig) -> Self {
        match model {
            ModelConfig::Efa(_) => ModelKind::Efa,
            ModelConfig::Fm(_) => ModelKind::Fm,
        }
    }

    /// `"efa"` or `"fm"`, as in outputs.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Efa => "efa",
            ModelKind::Fm => "fm",
        }
    }
}

/// What identifies a run inside its experiment; analyses select runs by these fields, and
/// [`RunKey::setting`] renders the table's setting column from them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunKey {
    /// The model family.
    pub model: ModelKind,
    /// Context direction of sequence experiments (`None` for the temperature models).
    #[serde(serialize_with = "direction_name_ser")]
    pub direction: Option<Direction>,
    /// A variant of the experiment's loss (MovieLens exp-2: `v1`, `v2`).
    pub variant: Option<&'static str>,
    /// Attention blocks of a temperature EFA.
    pub layers: Option<usize>,
    /// Previous days in a temperature EFA's context (with `layers`).
    pub lag: Option<usize>,
    /// Neighbour count of a temperature FM.
    pub k: Option<usize>,
    /// The seed, when the setting runs over several seeds (a spread); otherwise the run uses
    /// the experiment's one seed and its setting does not name it.
    pub spread_seed: Option<u64>,
}

fn direction_name_ser<S: serde::Serializer>(
    d: &Option<Direction>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(direction_name(*d)),
        None => s.serialize_none(),
    }
}

impl RunKey {
    /// The key of a run of `model` with nothing else set.
    pub fn new(model: ModelKind) -> Self {
        Self {
            model,
            direction: None,
            variant: None,
            layers: None,
            lag: None,
            k: None,
            spread_seed: None,
        }
    }

    /// The key of a sequence experiment's run: `model` in `direction`.
    pub fn directed(model: ModelKind, direction: Direction) -> Self {
        Self {
            direction: Some(direction),
            ..Self::new(model)
        }
    }

    /// Whether the context is unidirectional.
    pub fn is_uni(&self) -> bool {
        self.direction == Some(Direction::Uni)
    }

    /// The setting column of the results table: `unidirectional`, `bidirectional v1`,
    /// `L=4, lag 1`, `L=2 seed 3`, `k=5`.
    pub fn setting(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for RunKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some(d) = self.direction {
            parts.push(direction_name(d).into());
        }
        if let Some(v) = self.variant {
            parts.push(v.into());
        }
        match (self.layers, self.lag) {
            (Some(l), Some(lag)) if lag > 0 => parts.push(format!("L={l}, lag {lag}")),
            (Some(l), _) => parts.push(format!("L={l}")),
            _ => {}
        }
        if let Some(k) = self.k {
            parts.push(format!("k={k}"));
        }
        if let Some(s) = self.spread_seed {
            parts.push(format!("seed {s}"));
        }
        f.write_str(&parts.join(" "))
    }
}

/// `"unidirectional"` or `"bidirectional"`.
pub fn direction_name(d: Direction) -> &'static str {
    match d {
        Direction::Uni => "unidirectional",
        Direction::Bi => "bidirectional",
    }
}

/// One model to train and test: a row of an experiment's table.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// What the run is within its experiment.
    pub key: RunKey,
    /// The model.
    pub model: ModelConfig,
    /// Loss and metric.
    pub objective: Objective,
    /// The paper's value of the metric (docs/paper.md; NaN where the paper reports none).
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

    /// The setting column of the results table ([`RunKey::setting`]).
    pub fn setting(&self) -> String {
        self.key.setting()
    }
}

/// The outcome of one run. It serialises as its row of `results.json` (the loss history is
/// written beside the rows, by setting and model).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResult {
    /// Setting, e.g. `"unidirectional"` ([`RunKey::setting`]).
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
    /// Wall time of training and testing (not in results files, which hold only what the
    /// same run reproduces to the bit; the CLI writes times to `timings.json`).
    #[serde(skip_serializing, default)]
    pub seconds: f64,
    /// Number of trainable parameters.
    pub params: usize,
    /// The minibatch composition that ran (`samples` or `sequences`).
    #[serde(default)]
    pub batching: String,
    /// Training micro-batches computed by each forward plan.
    #[serde(default)]
    pub plans: BTreeMap<ForwardPlan, usize>,
    /// Loss history.
    #[serde(skip_serializing, default)]
    pub history: Vec<EpochLog>,
}

/// Trains and tests one model on `threads`; `observer` sees every epoch (progress bars).
pub fn run(
    spec: &RunSpec,
    threads: &Threads,
    observer: &mut dyn FnMut(&EpochLog),
) -> Result<(RunResult, Params<f32>), PaperError> {
    run_in(spec, threads, &Solo, observer)
}

/// [`run`] as a member of the multi-process job `group`: every member trains the run, each
/// computing its share of every micro-batch wave, and ends with the same bits as one process.
pub fn run_in(
    spec: &RunSpec,
    threads: &Threads,
    group: &dyn Collective,
    observer: &mut dyn FnMut(&EpochLog),
) -> Result<(RunResult, Params<f32>), PaperError> {
    spec.model.validate()?;
    spec.train_config.validate()?;
    let setting = spec.setting();
    for (name, s) in [
        ("train", &spec.train),
        ("val", &spec.val),
        ("test", &spec.test),
    ] {
        s.validate(&format!("{setting} {} {name} split", spec.model.kind()))
            .map_err(PaperError::Samples)?;
    }
    let start = std::time::Instant::now();
    let mut params = spec.model.init::<f32>(spec.init_seed);
    let eval = spec.evaluator().with_threads(threads).with_group(group);
    let mut hook = |log: &EpochLog| -> Result<(), TrainError> {
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
            setting,
            model: spec.key.model.name().to_string(),
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

/// The training batching of a run: `requested` for a causal EFA whose training samples carry
/// sequence ids (where the query stream applies); every other model keeps the paper's sample
/// batches.
pub fn batching_for(requested: Batching, spec: &RunSpec) -> Batching {
    let causal_efa = matches!(&spec.model,
        ModelConfig::Efa(c) if c.direction == efa_model::efa::Visibility::Causal);
    if causal_efa && spec.train.group.is_some() {
        requested
    } else {
        Batching::Samples
    }
}
