//! `efa reproduce <experiment>`: train every run of one of the paper's experiments behind a
//! progress bar, print ours beside the paper's numbers, and write `results.json`, the loss
//! curves and the experiment's own figures.

use crate::common::{cli, set_threads};
use crate::report::{print_table, train_with_bar, write_outputs};
use crate::CliError;
use clap::Args;
use efa_model::experiments::{ExperimentOptions, RunSettings, TrainedRun};
use efa_model::train::Batching;
use efa_model::ForwardPlan;
use serde_json::json;
use std::path::PathBuf;

/// Arguments of `efa reproduce`.
#[derive(Args)]
pub struct ReproduceArgs {
    #[command(subcommand)]
    experiment: ExperimentOptions,
    /// Most epochs per model (default: the paper's for the experiment; early stopping usually
    /// ends runs sooner).
    #[arg(long, global = true)]
    epochs: Option<usize>,
    /// Seed of parameter initialisation and minibatch shuffling (the data's own seeds are the
    /// paper's and fixed).
    #[arg(long, global = true, default_value_t = 0)]
    seed: u64,
    /// Forward plan of the EFA models (default: chosen per micro-batch; factor models have a
    /// single forward). Every plan computes the same function; `general` is the definition.
    #[arg(long, global = true, value_enum)]
    plan: Option<ForwardPlan>,
    /// Minibatch composition: the paper's shuffled samples, or shuffled whole sequences of at
    /// most 256 samples where the query-stream plan applies (a causal EFA with sequence ids:
    /// the unidirectional item EFAs; same per-sample losses, different minibatch composition).
    /// Every other run keeps sample batches; results.json says what ran.
    #[arg(long, global = true, value_enum, default_value_t = Batching::Samples)]
    batching: Batching,
    /// Worker threads (default: all cores).
    #[arg(long, global = true)]
    threads: Option<usize>,
    /// Output directory for results.json and the SVG plots (default: out/<experiment>).
    #[arg(long, global = true)]
    out: Option<PathBuf>,
    /// No progress bars.
    #[arg(long, global = true)]
    quiet: bool,
}

/// Runs `efa reproduce`.
pub fn run(a: ReproduceArgs) -> Result<(), CliError> {
    set_threads(a.threads)?;
    let settings = RunSettings {
        epochs: a.epochs,
        seed: a.seed,
        plan: a.plan,
        batching: a.batching,
    };
    // Bad settings (`--epochs 0`) fail before any data are read.
    settings.validate().map_err(cli)?;
    let exp = a.experiment.build().map_err(cli)?;
    for line in exp.describe() {
        errln!("{line}");
    }
    let specs = exp.runs(&settings).map_err(cli)?;
    let mut done = Vec::with_capacity(specs.len());
    for spec in &specs {
        done.push(train_with_bar(spec, a.quiet)?);
    }
    let trained: Vec<TrainedRun<'_>> = specs
        .iter()
        .zip(&done)
        .map(|(spec, (result, params))| TrainedRun {
            spec,
            result,
            params,
        })
        .collect();
    let analysis = exp.analyse(&trained).map_err(cli)?;
    let rows: Vec<_> = done.iter().map(|(r, _)| r.clone()).collect();
    print_table(&rows)?;
    for line in &analysis.lines {
        outln!("{line}")?;
    }
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("out").join(exp.name()));
    let mut config =
        serde_json::to_value(&a.experiment).map_err(|e| CliError::new(e.to_string()))?;
    config["epochs"] = json!(a.epochs);
    config["seed"] = json!(a.seed);
    config["plan"] = json!(a.plan.map(ForwardPlan::name));
    config["threads"] = json!(a.threads);
    config["batching"] = json!(a.batching.name());
    write_outputs(&out, &exp.name(), &rows, &config, &analysis)?;
    errln!("wrote {}/results.json and loss_curves.svg", out.display());
    Ok(())
}
