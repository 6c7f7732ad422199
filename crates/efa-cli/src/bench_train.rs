//! `efa bench train <experiment>`: steady-state training throughput of the paper's EFA models
//! (samples/s and achieved GFLOP/s, and its fraction of the measured FMA peak) beside the
//! ceilings measured in the same run on the same thread pool: the FMA peak and an n³ sgemm
//! through efa's own GEMM and through matrixmultiply.
//!
//! Each model trains exactly as `efa reproduce` trains it (same spec, Adam, batch 256,
//! shuffles): one warm-up epoch, then timed epochs through `efa_model::train::train_epoch`.
//! samples/s is the training-set size over the median timed epoch; GFLOP/s is the
//! `efa_tape::stats` FLOP count of the timed epochs (matmul and attention FLOPs only, see
//! that module) over their total time, so it is a lower bound on the arithmetic rate.

use crate::alloc;
use crate::bench_cmd::{pct_of_peak, sgemm_ceiling_n};
use crate::CliError;
use clap::Args;
use efa_model::{ForwardPlan, ModelConfig, Visibility};
use efa_paper::{ExperimentOptions, RunSettings, RunSpec};
use efa_train::fit::train_epoch;
use efa_train::schedule::new_adam;
use efa_train::{Batching, Threads};
use rand::SeedableRng;
use serde_json::json;
use std::time::Instant;

/// `efa bench train` options.
#[derive(Args)]
pub struct TrainBenchArgs {
    #[command(subcommand)]
    experiment: ExperimentOptions,
    /// Threads of the rayon pool (default: all cores).
    #[arg(long, global = true)]
    threads: Option<usize>,
    /// Print one JSON object per model, one per line.
    #[arg(long, global = true)]
    json: bool,
    /// Timed epochs per model, at most 1000 (default: as many as fill about 3 s, at least 3),
    /// after one warm-up epoch.
    #[arg(long, global = true)]
    epochs: Option<usize>,
    /// How minibatches are formed (sequences: where the query-stream plan applies).
    #[arg(long, global = true, value_parser = crate::common::batching_parser(), default_value = "samples")]
    batching: Batching,
    /// Forward plan of the EFA models (default: chosen per micro-batch).
    #[arg(long, global = true, value_parser = crate::common::plan_parser())]
    plan: Option<ForwardPlan>,
    /// Seed of parameter initialisation and minibatch shuffling.
    #[arg(long, global = true, default_value_t = 0)]
    seed: u64,
    /// Size n of the n³ sgemm ceiling (smaller is faster but further from the peak; for tests).
    #[arg(long, global = true, default_value_t = 2048)]
    sgemm_size: usize,
    /// Skip the ceilings (FMA peak and sgemm; their JSON fields are then null).
    #[arg(long, global = true)]
    no_baselines: bool,
}

/// Largest `--sgemm-size`: 8192 (three 268 MB matrices, 1.1 TFLOP per run).
const MAX_SGEMM_SIZE: usize = 8192;

/// One timed model.
struct Row {
    setting: String,
    direction: &'static str,
    /// The batching applied (sequences only where the query stream applies).
    batching: &'static str,
    batch: usize,
    train_samples: usize,
    timed_epochs: usize,
    epoch_s: f64,
    samples_per_s: f64,
    gflops: f64,
    /// Micro-batches per timed epoch, and allocations of at least [`alloc::LARGE`] bytes
    /// (count, bytes) per micro-batch over the timed epochs.
    micro_batches: usize,
    large_per_micro: f64,
    large_bytes_per_micro: f64,
}

/// `uni` for a causal model or a unidirectional setting, else `bi`.
fn direction(spec: &RunSpec) -> &'static str {
    let causal = matches!(&spec.model,
        ModelConfig::Efa(c) if c.direction != Visibility::Padding);
    if causal || spec.key.is_uni() {
        "uni"
    } else {
        "bi"
    }
}

/// Warm-up epoch, then timed epochs of one model.
fn time_model(
    a: &TrainBenchArgs,
    name: &str,
    spec: &RunSpec,
    threads: &Threads,
) -> Result<Row, CliError> {
    let cfg = &spec.train_config;
    let train = &spec.train;
    if train.is_empty() {
        return Err(CliError::new(format!(
            "{name} {}: no training samples",
            spec.setting()
        )));
    }
    let mut params = spec.model.init::<f32>(spec.init_seed);
    let mut adam = new_adam(cfg)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
    let mut order: Vec<usize> = (0..train.len()).collect();
    let eval = spec.evaluator().with_threads(threads);
    let mut epoch = || -> Result<(f64, usize), CliError> {
        let start = Instant::now();
        let (_, plans) = train_epoch(
            &eval,
            &mut params,
            &mut adam,
            train,
            cfg,
            &mut rng,
            &mut order,
        )?;
        Ok((start.elapsed().as_secs_f64(), plans.values().sum()))
    };
    let (warm, _) = epoch()?;
    if !a.json {
        errln!(
            "{name} {}: {} training samples, warm-up epoch {warm:.2} s",
            spec.setting(),
            train.len()
        );
    }
    let flops0 = efa_tape::flops();
    let large0 = alloc::large_allocations();
    let mut times = Vec::new();
    let mut micro = 0;
    loop {
        let (t, m) = epoch()?;
        times.push(t);
        micro += m;
        let done = match a.epochs {
            Some(e) => times.len() >= e.max(1),
            None => times.len() >= 3 && times.iter().sum::<f64>() >= 3.0,
        };
        if done {
            break;
        }
    }
    let flops = efa_tape::flops() - flops0;
    let large = alloc::large_allocations();
    let per_micro = |x: u64| x as f64 / micro.max(1) as f64;
    let total: f64 = times.iter().sum();
    let mut sorted = times.clone();
    sorted.sort_by(|x, y| x.total_cmp(y));
    let epoch_s = sorted[sorted.len() / 2];
    Ok(Row {
        setting: spec.setting(),
        direction: direction(spec),
        batching: cfg.batching.name(),
        batch: cfg.batch_size,
        train_samples: train.len(),
        timed_epochs: times.len(),
        epoch_s,
        samples_per_s: train.len() as f64 / epoch_s,
        gflops: flops as f64 / total / 1e9,
        micro_batches: micro / times.len(),
        large_per_micro: per_micro(large.0 - large0.0),
        large_bytes_per_micro: per_micro(large.1 - large0.1),
    })
}

/// Most timed epochs per model of one `efa bench train` run: 1,000 (hours on the paper's
/// data; the median of more epochs says nothing new, and a mistyped count should not run
/// for days).
const MAX_BENCH_EPOCHS: usize = 1000;

/// Runs `efa bench train`.
pub fn run(a: TrainBenchArgs) -> Result<(), CliError> {
    let threads = a.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    crate::common::check_threads(threads, "efa bench train: ")?;
    if let Some(e) = a.epochs.filter(|&e| e == 0 || e > MAX_BENCH_EPOCHS) {
        return Err(CliError::new(format!(
            "efa bench train: --epochs {e}: must be in 1..={MAX_BENCH_EPOCHS}"
        )));
    }
    if a.sgemm_size > MAX_SGEMM_SIZE {
        return Err(CliError::new(format!(
            "efa bench train: --sgemm-size {}: at most {MAX_SGEMM_SIZE} (three n² f32 matrices \
             and 2n³ FLOPs per run)",
            a.sgemm_size
        )));
    }
    if a.sgemm_size == 0 {
        return Err(CliError::new(
            "efa bench train: --sgemm-size must be positive",
        ));
    }
    let pool = Threads::new(threads)?;
    let (name, rows, sgemm) = pool.install(|| -> Result<_, CliError> {
        let exp = a.experiment.build()?;
        for m in exp.other_data() {
            errln!("warning: {m}: not the paper's file (--allow-other-data)");
        }
        let settings = RunSettings {
            // The timed loop calls train_epoch directly, so max_epochs only labels the config.
            epochs: Some(1),
            seed: a.seed,
            plan: a.plan,
            batching: a.batching,
        };
        let name = exp.name();
        let rows = exp
            .runs(&settings)?
            .iter()
            .filter(|spec| matches!(spec.model, ModelConfig::Efa(_)))
            .map(|spec| time_model(&a, &name, spec, &pool))
            .collect::<Result<Vec<_>, _>>()?;
        let sgemm = (!a.no_baselines).then(|| sgemm_ceiling_n(a.sgemm_size));
        Ok((name, rows, sgemm))
    })?;
    if rows.is_empty() {
        return Err(CliError::new(format!(
            "efa bench train {name}: the selection has no EFA model to time"
        )));
    }
    let requested = a.batching.name();
    if a.json {
        for r in &rows {
            outln!(
                "{}",
                json!({
                    "experiment": name, "model": "efa", "setting": r.setting,
                    "direction": r.direction,
                    "threads": threads, "batch": r.batch, "samples_per_s": r.samples_per_s,
                    "gflops": r.gflops, "epoch_s": r.epoch_s,
                    "sgemm_gflops": sgemm.map(|c| c.efa_gflops),
                    "matrixmultiply_gflops": sgemm.map(|c| c.reference_gflops),
                    "fma_peak_gflops": sgemm.map(|c| c.peak_gflops),
                    "train_samples": r.train_samples, "timed_epochs": r.timed_epochs,
                    "batching": r.batching, "batching_requested": requested,
                    "sgemm_size": a.sgemm_size,
                    "micro_batches_per_epoch": r.micro_batches,
                    "large_allocations_per_micro_batch": r.large_per_micro,
                    "large_allocation_mb_per_micro_batch": r.large_bytes_per_micro / 1e6,
                })
            )?;
        }
        return Ok(());
    }
    outln!(
        "{:<16} {:<5} {:<14} {:<9} {:>7} {:>5} {:>11} {:>8} {:>8} {:>9} {:>6} {:>15}",
        "experiment",
        "model",
        "setting",
        "batching",
        "threads",
        "batch",
        "samples/s",
        "GFLOP/s",
        "% peak",
        "epoch s",
        "epochs",
        "large allocs/mb"
    )?;
    for r in &rows {
        let pct = sgemm.map_or_else(
            || "-".to_string(),
            |c| format!("{:.1}", pct_of_peak(r.gflops, c.peak_gflops)),
        );
        outln!(
            "{:<16} {:<5} {:<14} {:<9} {:>7} {:>5} {:>11.0} {:>8.2} {:>8} {:>9.3} {:>6} {:>15}",
            name,
            "efa",
            r.setting,
            r.batching,
            threads,
            r.batch,
            r.samples_per_s,
            r.gflops,
            pct,
            r.epoch_s,
            r.timed_epochs,
            format!(
                "{:.0} / {:.1} MB",
                r.large_per_micro,
                r.large_bytes_per_micro / 1e6
            )
        )?;
    }
    match sgemm {
        Some(c) => outln!(
            "FMA peak ({isa}, measured): {p:.1} GFLOP/s; sgemm {n}³: efa {e:.1} GFLOP/s \
             ({ep:.1} % of peak), matrixmultiply {m:.1} ({mp:.1} %) (same pool, same run); \
             batching requested: {requested}; GFLOP/s counts matmul and attention FLOPs only; \
             large allocs/mb: allocations of at least 64 KiB per micro-batch, and their bytes",
            isa = c.isa.name(),
            p = c.peak_gflops,
            n = a.sgemm_size,
            e = c.efa_gflops,
            ep = pct_of_peak(c.efa_gflops, c.peak_gflops),
            m = c.reference_gflops,
            mp = pct_of_peak(c.reference_gflops, c.peak_gflops),
        )?,
        None => outln!("ceilings skipped (--no-baselines); batching requested: {requested}")?,
    }
    Ok(())
}
