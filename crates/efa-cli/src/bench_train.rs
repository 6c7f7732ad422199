//! `efa bench train <experiment>`: steady-state training throughput of the paper's EFA models
//! (samples/s and achieved GFLOP/s) beside a matrixmultiply sgemm ceiling measured in the same
//! run on the same thread pool.
//!
//! Each model trains exactly as `efa reproduce` trains it (same spec, Adam, batch 256,
//! shuffles): one warm-up epoch, then timed epochs through `efa_model::train::train_epoch`.
//! samples/s is the training-set size over the median timed epoch; GFLOP/s is the
//! `efa_tape::stats` FLOP count of the timed epochs (matmul and attention FLOPs only, see
//! that module) over their total time, so it is a lower bound on the arithmetic rate.

use crate::bench_cmd::sgemm_ceiling_n;
use crate::reproduce_cmd::Directions;
use crate::reproduce_real::{batching_name, cli, resolve_data_dir, BatchingArg};
use crate::CliError;
use clap::{Args, ValueEnum};
use efa_model::experiments::{instacart, movielens as ml, synthetic, RunSpec};
use efa_model::train::{new_adam, train_epoch, Loss, TrainConfig};
use rand::SeedableRng;
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

/// Experiment whose EFA models are timed.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Experiment {
    /// Synthetic ratings (PAPER.md §2); generated, no data needed.
    Synthetic,
    /// MovieLens next item (exp-1, paper protocol); needs DATA/movielens/u.data.
    MovielensItems,
    /// Instacart next item; needs DATA/instacart/{items,baskets_train,baskets_test}.csv.
    Instacart,
}

impl Experiment {
    fn name(self) -> &'static str {
        match self {
            Experiment::Synthetic => "synthetic",
            Experiment::MovielensItems => "movielens-items",
            Experiment::Instacart => "instacart",
        }
    }
}

/// `efa bench train` options.
#[derive(Args)]
pub struct TrainBenchArgs {
    /// Experiment.
    #[arg(value_enum)]
    experiment: Experiment,
    /// Directions to time.
    #[arg(long, value_enum, default_value_t = Directions::Both)]
    direction: Directions,
    /// Threads of the rayon pool (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Print one JSON object per model, one per line.
    #[arg(long)]
    json: bool,
    /// Timed epochs per model (default: as many as fill about 3 s, at least 3), after one
    /// warm-up epoch.
    #[arg(long)]
    epochs: Option<usize>,
    /// Data directory holding movielens/ and instacart/ (default ../shared/data).
    #[arg(long)]
    data: Option<PathBuf>,
    /// How minibatches are formed.
    #[arg(long, value_enum, default_value_t = BatchingArg::Samples)]
    batching: BatchingArg,
    /// Users of the synthetic experiment (the paper: 10,000; a multiple of 4, at least 8).
    #[arg(long, default_value_t = 10_000)]
    users: usize,
    /// Seed of parameter initialisation and minibatch shuffling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Size n of the n³ sgemm ceiling (smaller is faster but further from the peak; for tests).
    #[arg(long, default_value_t = 2048)]
    sgemm_size: usize,
    /// Skip the sgemm ceiling (sgemm_gflops is then null).
    #[arg(long)]
    no_baselines: bool,
}

/// One timed model.
struct Row {
    direction: &'static str,
    /// The batching applied (sequences only where the query stream applies).
    batching: &'static str,
    batch: usize,
    train_samples: usize,
    timed_epochs: usize,
    epoch_s: f64,
    samples_per_s: f64,
    gflops: f64,
}

/// Builds the EFA run specs of the selected directions exactly as `efa reproduce` does.
fn specs(a: &TrainBenchArgs) -> Result<Vec<(bool, RunSpec)>, CliError> {
    let dirs = a.direction.unidirectional();
    // The timed loop calls train_epoch directly, so max_epochs only labels the config.
    let epochs = 1;
    let mut out = Vec::new();
    match a.experiment {
        Experiment::Synthetic => {
            if a.users < 8 || !a.users.is_multiple_of(4) {
                return Err(CliError::new(format!(
                    "--users {}: must be a multiple of 4, at least 8",
                    a.users
                )));
            }
            let data = synthetic::data(a.users).map_err(cli)?;
            for &uni in dirs {
                let cfg = TrainConfig::paper(epochs, a.seed);
                out.push((
                    uni,
                    synthetic::spec(&data, uni, true, cfg, a.seed).map_err(cli)?,
                ));
            }
        }
        Experiment::MovielensItems => {
            let dir = resolve_data_dir(a.data.as_ref())?;
            let data = ml::exp1_data(&dir, ml::Protocol::Paper).map_err(cli)?;
            for &uni in dirs {
                let cfg = TrainConfig::paper(epochs, a.seed);
                let paper = ml::exp1_paper_value(uni, true);
                out.push((
                    uni,
                    ml::item_spec(&data, uni, true, paper, cfg, a.seed).map_err(cli)?,
                ));
            }
        }
        Experiment::Instacart => {
            let dir = resolve_data_dir(a.data.as_ref())?;
            let exp = instacart::load(&dir).map_err(cli)?;
            for &uni in dirs {
                let cfg = instacart::train_config(epochs, a.seed);
                out.push((
                    uni,
                    instacart::spec(&exp, uni, true, cfg, a.seed).map_err(cli)?,
                ));
            }
        }
    }
    for (_, spec) in &mut out {
        spec.train_config.batching = a.batching.for_spec(spec);
    }
    Ok(out)
}

/// Warm-up epoch, then timed epochs of one model.
fn time_model(a: &TrainBenchArgs, uni: bool, spec: &RunSpec) -> Result<Row, CliError> {
    let cfg = &spec.train_config;
    let train = &spec.train;
    let direction = if uni { "uni" } else { "bi" };
    if train.is_empty() {
        return Err(CliError::new(format!(
            "{} {direction}: no training samples",
            a.experiment.name()
        )));
    }
    let mut params = spec.model.init::<f32>(spec.init_seed);
    let mut adam = new_adam(cfg).map_err(cli)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
    let mut order: Vec<usize> = (0..train.len()).collect();
    let loss = Loss::Objective(&spec.objective);
    let mut epoch = || -> Result<f64, CliError> {
        let start = Instant::now();
        train_epoch(
            &spec.model,
            &loss,
            &mut params,
            &mut adam,
            train,
            cfg,
            &mut rng,
            &mut order,
            false,
        )
        .map_err(cli)?;
        Ok(start.elapsed().as_secs_f64())
    };
    let warm = epoch()?;
    if !a.json {
        eprintln!(
            "{} {direction}: {} training samples, warm-up epoch {warm:.2} s",
            a.experiment.name(),
            train.len()
        );
    }
    let flops0 = efa_tape::flops();
    let mut times = Vec::new();
    loop {
        times.push(epoch()?);
        let done = match a.epochs {
            Some(e) => times.len() >= e.max(1),
            None => times.len() >= 3 && times.iter().sum::<f64>() >= 3.0,
        };
        if done {
            break;
        }
    }
    let flops = efa_tape::flops() - flops0;
    let total: f64 = times.iter().sum();
    let mut sorted = times.clone();
    sorted.sort_by(|x, y| x.total_cmp(y));
    let epoch_s = sorted[sorted.len() / 2];
    Ok(Row {
        direction,
        batching: batching_name(cfg.batching),
        batch: cfg.batch_size,
        train_samples: train.len(),
        timed_epochs: times.len(),
        epoch_s,
        samples_per_s: train.len() as f64 / epoch_s,
        gflops: flops as f64 / total / 1e9,
    })
}

/// Runs `efa bench train`.
pub fn run(a: TrainBenchArgs) -> Result<(), CliError> {
    let threads = a.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    if threads == 0 {
        return Err(CliError::new("efa bench train: --threads must be positive"));
    }
    if a.epochs == Some(0) {
        return Err(CliError::new("efa bench train: --epochs must be positive"));
    }
    if a.sgemm_size == 0 {
        return Err(CliError::new(
            "efa bench train: --sgemm-size must be positive",
        ));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| CliError::new(format!("efa bench train: thread pool: {e}")))?;
    let (rows, sgemm) = pool.install(|| -> Result<_, CliError> {
        let specs = specs(&a)?;
        let rows = specs
            .iter()
            .map(|(uni, spec)| time_model(&a, *uni, spec))
            .collect::<Result<Vec<_>, _>>()?;
        let sgemm = (!a.no_baselines).then(|| sgemm_ceiling_n(a.sgemm_size));
        Ok((rows, sgemm))
    })?;
    let requested = batching_name(a.batching.requested());
    if a.json {
        for r in &rows {
            println!(
                "{}",
                json!({
                    "experiment": a.experiment.name(), "model": "efa", "direction": r.direction,
                    "threads": threads, "batch": r.batch, "samples_per_s": r.samples_per_s,
                    "gflops": r.gflops, "sgemm_gflops": sgemm, "epoch_s": r.epoch_s,
                    "train_samples": r.train_samples, "timed_epochs": r.timed_epochs,
                    "batching": r.batching, "batching_requested": requested,
                    "sgemm_size": a.sgemm_size,
                })
            );
        }
        return Ok(());
    }
    println!(
        "{:<16} {:<5} {:<4} {:<9} {:>7} {:>5} {:>11} {:>8} {:>8} {:>9} {:>6}",
        "experiment",
        "model",
        "dir",
        "batching",
        "threads",
        "batch",
        "samples/s",
        "GFLOP/s",
        "% sgemm",
        "epoch s",
        "epochs"
    );
    for r in &rows {
        let pct = sgemm.map_or_else(
            || "-".to_string(),
            |s| format!("{:.1}", 100.0 * r.gflops / s),
        );
        println!(
            "{:<16} {:<5} {:<4} {:<9} {:>7} {:>5} {:>11.0} {:>8.2} {:>8} {:>9.3} {:>6}",
            a.experiment.name(),
            "efa",
            r.direction,
            r.batching,
            threads,
            r.batch,
            r.samples_per_s,
            r.gflops,
            pct,
            r.epoch_s,
            r.timed_epochs
        );
    }
    match sgemm {
        Some(s) => println!(
            "sgemm {n}³ ceiling: {s:.1} GFLOP/s (same pool, same run); batching requested: {requested}; \
             GFLOP/s counts matmul and attention FLOPs only",
            n = a.sgemm_size
        ),
        None => println!("sgemm ceiling skipped (--no-baselines); batching requested: {requested}"),
    }
    Ok(())
}
