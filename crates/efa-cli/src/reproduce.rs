//! `efa reproduce <experiment>` and `efa reproduce all`: train every run of the paper's
//! experiments behind a progress bar each (runs side by side, one per thread), print ours
//! beside the paper's numbers, and write `results.json`, the loss curves and the experiments'
//! own figures.

use crate::cluster::Job;
use crate::common::check_threads;
use crate::report::{create_out_dir, print_table, write_outputs, Bars};
use crate::CliError;
use clap::{Args, Subcommand};
use efa_model::ForwardPlan;
use efa_paper::runner::{run_all_in, workers, Distribute, Quiet, RunObserver};
use efa_paper::{
    temperature, DataOptions, Experiment, ExperimentOptions, Models, Protocol, RunResult,
    RunSettings, RunSpec, TrainedRun,
};
use efa_train::run::{write_timings, RunTimes};
use efa_train::Batching;
use serde_json::json;
use std::path::{Path, PathBuf};

/// Arguments of `efa reproduce`.
#[derive(Args)]
pub struct ReproduceArgs {
    #[command(subcommand)]
    target: Target,
    /// Most epochs per model (default: the paper's for the experiment; early stopping usually
    /// ends runs sooner).
    #[arg(long, global = true, value_parser = crate::common::at_least_one)]
    epochs: Option<usize>,
    /// Seed of parameter initialisation and minibatch shuffling (the data's own seeds are the
    /// paper's and fixed).
    #[arg(long, global = true, default_value_t = 0)]
    seed: u64,
    /// Forward plan of the EFA models (default: chosen per micro-batch; factor models have a
    /// single forward). Every plan computes the same function; `general` is the definition.
    #[arg(long, global = true, value_parser = crate::common::plan_parser())]
    plan: Option<ForwardPlan>,
    /// Minibatch composition: the paper's shuffled samples, or shuffled whole sequences of at
    /// most 256 samples where the query-stream plan applies (a causal EFA with sequence ids:
    /// the unidirectional item EFAs; same per-sample losses, different minibatch composition).
    /// Every other run keeps sample batches; results.json says what ran.
    #[arg(long, global = true, value_parser = crate::common::batching_parser(), default_value = "samples")]
    batching: Batching,
    /// Worker threads (default: all cores). Runs go side by side, one per thread; results do
    /// not depend on the thread count.
    #[arg(long, global = true)]
    threads: Option<usize>,
    /// Output directory for results.json and the SVG plots (default: out/<experiment>).
    #[arg(long, global = true)]
    out: Option<PathBuf>,
    /// No progress bars.
    #[arg(long, global = true)]
    quiet: bool,
    /// In a multi-process job (`mpirun -np N efa reproduce …`, built with the `mpi` feature):
    /// `batches` trains every run on all ranks, each computing its share of every micro-batch
    /// wave; `runs` spreads whole runs over the ranks; `auto` trains the long runs whose
    /// minibatches give every rank micro-batches (the full-batch temperature models) on all
    /// ranks and spreads the others. Default: `batches` for one experiment, `auto` for
    /// `reproduce all`. The results are the same bits in every case.
    #[arg(long, global = true, value_parser = ["batches", "runs", "auto"])]
    distribute: Option<String>,
    /// Draw the loss curves on a logarithmic y axis (losses must be positive; otherwise the
    /// curves are drawn on a linear axis with a warning).
    #[arg(long, global = true)]
    log_y: bool,
}

/// What to reproduce.
#[derive(Subcommand)]
enum Target {
    #[command(flatten)]
    Experiment(ExperimentOptions),
    /// Every experiment of the paper with one seed under the paper protocol, and the
    /// temperature EFAs without lags over several seeds (their paper figures are single runs
    /// of an unstable recipe), also under the clean protocol; one results.json and one summary
    /// table, ours beside the paper.
    All(AllArgs),
}

/// Options of `efa reproduce all`.
#[derive(Args)]
struct AllArgs {
    /// Data directory holding movielens/, instacart/ and temperature/ (default
    /// ../shared/data).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Seeds 0..N of the temperature EFAs without lags (L = 1, 2, 4), reported as a spread
    /// (1 to 100).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    spread_seeds: u64,
    /// Also run the temperature experiment under `--protocol clean` (standardised data,
    /// minibatches of whole days, early stopping): the EFAs without lags over seeds 0..N and
    /// the FM for every k; 0 leaves it out.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(0..=100))]
    clean_seeds: u64,
    /// Run on data files other than the paper's (another size or SHA-256), which are refused
    /// otherwise; the results are marked as not the paper's.
    #[arg(long)]
    allow_other_data: bool,
}

/// `--threads` (checked) or all cores: the runner's threads in all, split over its workers.
fn threads(a: &ReproduceArgs) -> Result<usize, CliError> {
    match a.threads {
        Some(t) => check_threads(t, ""),
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

/// How the ranks of a multi-process job share the runs: `--distribute`, else `default`.
fn distribute(a: &ReproduceArgs, default: Distribute) -> Distribute {
    match a.distribute.as_deref() {
        Some("batches") => Distribute::Batches,
        Some("runs") => Distribute::Runs,
        Some("auto") => Distribute::Auto,
        _ => default,
    }
}

/// Progress bars on rank 0; the other ranks stay quiet.
fn observer(a: &ReproduceArgs, job: &Job) -> Box<dyn RunObserver> {
    match job.leads() {
        true => Box::new(Bars::new(a.quiet)),
        false => Box::new(Quiet),
    }
}

/// The wall-clock times of `done`'s runs, for `timings.json`.
fn times(done: &[(RunResult, efa_model::Params<f32>)]) -> Vec<RunTimes<'_>> {
    done.iter()
        .map(|(r, _)| RunTimes {
            run: format!("{} {}", r.model, r.setting),
            seconds: r.seconds,
            epochs: &r.history,
        })
        .collect()
}

fn settings(a: &ReproduceArgs) -> RunSettings {
    RunSettings {
        epochs: a.epochs,
        seed: a.seed,
        plan: a.plan,
        batching: a.batching,
    }
}

/// `results.json`'s configuration: the experiment's options and the shared settings (not
/// the thread count, which changes no result; it is in `timings.json`).
fn config(a: &ReproduceArgs, options: &ExperimentOptions) -> Result<serde_json::Value, CliError> {
    let mut config = serde_json::to_value(options).map_err(|e| CliError::new(e.to_string()))?;
    config["epochs"] = json!(a.epochs);
    config["seed"] = json!(a.seed);
    config["plan"] = json!(a.plan.map(ForwardPlan::name));
    config["batching"] = json!(a.batching.name());
    Ok(config)
}

/// One experiment's runs done: its analysis, table and files (results.json, timings.json,
/// plots).
fn finish(
    a: &ReproduceArgs,
    job: &Job,
    exp: &dyn Experiment,
    options: &ExperimentOptions,
    specs: &[RunSpec],
    done: &[(RunResult, efa_model::Params<f32>)],
    out: &Path,
) -> Result<serde_json::Value, CliError> {
    let trained: Vec<TrainedRun<'_>> = specs
        .iter()
        .zip(done)
        .map(|(spec, (result, params))| TrainedRun {
            spec,
            result,
            params,
        })
        .collect();
    let analysis = exp.analyse(&trained)?;
    let rows: Vec<RunResult> = done.iter().map(|(r, _)| r.clone()).collect();
    let other = exp.other_data();
    print_table(&rows, other)?;
    for line in &analysis.lines {
        outln!("{line}")?;
    }
    write_outputs(
        out,
        &exp.name(),
        &rows,
        &config(a, options)?,
        &analysis,
        a.log_y,
        other,
    )?;
    write_timings(out, &times(done), job.group().size(), threads(a)?)?;
    errln!(
        "wrote {}/results.json, timings.json and loss_curves.svg",
        out.display()
    );
    let mut summary = json!({"experiment": exp.name(), "rows": rows, "analysis": analysis.json});
    if !other.is_empty() {
        summary["paper_data"] = json!(false);
        summary["other_data"] = json!(other);
    }
    Ok(summary)
}

/// Runs `efa reproduce` as a member of `job` (every rank trains; rank 0 prints and writes).
pub fn run(a: ReproduceArgs, job: &Job) -> Result<(), CliError> {
    // Bad settings fail before any data are read (clap checks the flags' ranges).
    settings(&a).validate()?;
    match &a.target {
        Target::Experiment(options) => {
            let threads = threads(&a)?;
            let exp = options.build()?;
            if job.leads() {
                describe(exp.as_ref());
            }
            let specs = exp.runs(&settings(&a))?;
            let out = a
                .out
                .clone()
                .unwrap_or_else(|| PathBuf::from("out").join(exp.name()));
            // An output directory that cannot be created fails now, not after the runs.
            if job.leads() {
                create_out_dir(&out)?;
            }
            let how = distribute(&a, Distribute::Batches);
            let done = run_all_in(
                &specs,
                threads,
                job.group(),
                how,
                observer(&a, job).as_ref(),
            )?;
            if !job.leads() {
                return Ok(());
            }
            finish(&a, job, exp.as_ref(), options, &specs, &done, &out)?;
            Ok(())
        }
        Target::All(all) => reproduce_all(&a, all, job),
    }
}

/// Prints what `exp` loaded, and a warning per data file that is not the paper's.
fn describe(exp: &dyn Experiment) {
    for line in exp.describe() {
        errln!("{line}");
    }
    for m in exp.other_data() {
        errln!("warning: {m}: not the paper's file (--allow-other-data); results are marked so");
    }
}

/// The experiments of `efa reproduce all`, in table order.
fn all_experiments(all: &AllArgs) -> Vec<ExperimentOptions> {
    use efa_paper::{instacart, movielens, synthetic};
    let data = DataOptions {
        data: all.data.clone(),
        allow_other_data: all.allow_other_data,
        ..DataOptions::default()
    };
    let temp = |lag: usize, model: Models, seeds: Vec<u64>| {
        ExperimentOptions::Temperature(temperature::Options {
            lag,
            model,
            seeds,
            data: data.clone(),
            ..temperature::Options::default()
        })
    };
    let ratings = |variant| {
        ExperimentOptions::MovielensRatings(movielens::RatingsOptions {
            variant,
            data: data.clone(),
            ..movielens::RatingsOptions::default()
        })
    };
    let mut out = vec![
        ExperimentOptions::Synthetic(synthetic::Options::default()),
        ExperimentOptions::MovielensItems(movielens::ItemsOptions {
            data: data.clone(),
            ..movielens::ItemsOptions::default()
        }),
        ratings(movielens::Variant::V1),
        ratings(movielens::Variant::V2),
        ExperimentOptions::Instacart(instacart::Options {
            data: data.clone(),
            ..instacart::Options::default()
        }),
        temp(0, Models::Both, (0..all.spread_seeds).collect()),
        temp(1, Models::Efa, Vec::new()),
        temp(2, Models::Efa, Vec::new()),
    ];
    if all.clean_seeds > 0 {
        out.push(ExperimentOptions::Temperature(temperature::Options {
            seeds: (0..all.clean_seeds).collect(),
            data: DataOptions {
                protocol: Protocol::Clean,
                ..data.clone()
            },
            ..temperature::Options::default()
        }));
    }
    out
}

/// Runs `efa reproduce all`: every run of every experiment in one queue (runs side by side,
/// longest first), then each experiment's outputs under `OUT/<experiment>/` and the summary in
/// `OUT/results.json`.
fn reproduce_all(a: &ReproduceArgs, all: &AllArgs, job: &Job) -> Result<(), CliError> {
    let start = std::time::Instant::now();
    let threads = threads(a)?;
    let options = all_experiments(all);
    let mut exps: Vec<Box<dyn Experiment>> = Vec::new();
    let mut specs: Vec<RunSpec> = Vec::new();
    let mut ranges = Vec::new();
    for o in &options {
        let exp = o.build()?;
        if job.leads() {
            describe(exp.as_ref());
        }
        let runs = exp.runs(&settings(a))?;
        ranges.push(specs.len()..specs.len() + runs.len());
        specs.extend(runs);
        exps.push(exp);
    }
    let out = a.out.clone().unwrap_or_else(|| PathBuf::from("out/all"));
    // Output directories that cannot be created fail now, not after hours of runs.
    if job.leads() {
        for exp in &exps {
            create_out_dir(&out.join(exp.name()))?;
        }
    }
    let size = job.group().size();
    if job.leads() {
        errln!(
            "reproduce all: {} runs of {} experiments, {} side by side{}",
            specs.len(),
            exps.len(),
            workers(threads, specs.len()),
            if size > 1 {
                format!(" on each of {size} ranks")
            } else {
                String::new()
            }
        );
    }
    let how = distribute(a, Distribute::Auto);
    let done = run_all_in(&specs, threads, job.group(), how, observer(a, job).as_ref())?;
    if !job.leads() {
        return Ok(());
    }
    let mut summary = Vec::new();
    let mut experiments = Vec::new();
    let mut other = Vec::new();
    for ((exp, o), range) in exps.iter().zip(&options).zip(ranges) {
        for m in exp.other_data() {
            if !other.contains(m) {
                other.push(m.clone());
            }
        }
        outln!("\n{}", exp.name())?;
        let dir = out.join(exp.name());
        experiments.push(finish(
            a,
            job,
            exp.as_ref(),
            o,
            &specs[range.clone()],
            &done[range.clone()],
            &dir,
        )?);
        for (r, _) in &done[range] {
            summary.push((exp.name(), r.clone()));
        }
    }
    outln!("\nsummary (ours beside the paper; the temperature EFAs without lags over seeds):")?;
    if !other.is_empty() {
        outln!("{}", crate::report::not_the_papers(&other))?;
    }
    outln!(
        "{:<22} {:<22} {:<5} {:<10} {:>12} {:>10} {:>8}",
        "experiment",
        "setting",
        "model",
        "metric",
        "ours",
        "paper",
        "ours/paper"
    )?;
    for (name, r) in &summary {
        outln!(
            "{:<22} {:<22} {:<5} {:<10} {:>12.6} {:>10.3} {:>8.4}",
            name,
            r.setting,
            r.model,
            r.metric,
            r.value,
            r.paper,
            r.value / r.paper
        )?;
    }
    let seconds = start.elapsed().as_secs_f64();
    outln!(
        "wall time {:.1} min with {threads} thread(s){}",
        seconds / 60.0,
        if size > 1 {
            format!(" on each of {size} ranks")
        } else {
            String::new()
        }
    )?;
    std::fs::create_dir_all(&out)
        .map_err(|e| CliError::new(format!("cannot create {}: {e}", out.display())))?;
    // Only what a run reproduces to the bit: times go to timings.json.
    let mut json = json!({ "experiments": experiments });
    if !other.is_empty() {
        json["paper_data"] = json!(false);
    }
    crate::report::write_file(
        &out.join("results.json"),
        &serde_json::to_string_pretty(&json).map_err(|e| CliError::new(e.to_string()))?,
    )?;
    let timing = json!({"wall_seconds": seconds, "ranks": size, "threads_per_rank": threads});
    crate::report::write_file(
        &out.join("timings.json"),
        &serde_json::to_string_pretty(&timing).map_err(|e| CliError::new(e.to_string()))?,
    )?;
    errln!("wrote {}/results.json and timings.json", out.display());
    Ok(())
}
