//! `efa train`: train an EFA or rating-FM model on the user's own CSV data (layout in
//! `efa_train::userdata`) into a run directory (layout, resume checks and result files in
//! `efa_train::run`), with atomic checkpoints, `--resume`, and anomaly mode.

use crate::cluster::Job;
use crate::common::threads;
use crate::report::{epoch_bar, on_epoch};
use crate::CliError;
use clap::Args;
use efa_train::run::{Run, RunDir, RunInputs, RunOptions};
use efa_train::EpochLog;
use std::path::PathBuf;

/// Arguments of `efa train`.
#[derive(Args)]
pub struct TrainArgs {
    /// TOML configuration: [model.efa] or [model.fm], [family], [train], direction, init_seed.
    #[arg(long)]
    config: PathBuf,
    /// Training CSV with header `seq,order,item,value` (optionally `lag`, `target`).
    #[arg(long)]
    data: PathBuf,
    /// Item-feature CSV `item,<feature>,…` (e.g. coordinates) for the site MLP of
    /// `model.efa.continuous`.
    #[arg(long)]
    items: Option<PathBuf>,
    /// Validation CSV for early stopping (default: the training data).
    #[arg(long)]
    valid: Option<PathBuf>,
    /// Test CSV, evaluated once with the final model.
    #[arg(long)]
    test: Option<PathBuf>,
    /// Output directory (default: the --resume directory, else `efa-train-out`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run whose checkpoint is in this directory (same config and data).
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Write a checkpoint every N epochs (and after the last one).
    #[arg(long, default_value_t = 1)]
    checkpoint_every: usize,
    /// Stop at the first NaN/inf in any op, forward or backward, naming op, node, parameters, batch.
    #[arg(long)]
    detect_anomaly: bool,
    /// Worker threads (default: all cores). Results are bit-identical for a given seed and
    /// thread count (and, with the current kernels, across thread counts).
    #[arg(long)]
    threads: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Testing aid: abort the process (SIGABRT, no cleanup) right after epoch K's checkpoint.
    #[arg(long, hide = true)]
    crash_after_epoch: Option<usize>,
}

/// Runs `efa train` as a member of `job` (rank 0 alone locks and writes the output directory
/// and prints; every rank trains its share).
pub fn run(args: TrainArgs, job: &Job) -> Result<(), CliError> {
    if args.checkpoint_every == 0 {
        return Err(CliError::new("--checkpoint-every must be at least 1"));
    }
    let threads = threads(args.threads)?;
    let inputs = RunInputs {
        config: args.config,
        data: args.data,
        items: args.items,
        valid: args.valid,
        test: args.test,
    };
    let run = Run::load(&inputs, &threads)?;
    let out = args.out.or_else(|| args.resume.clone());
    let out = RunDir::new(out.unwrap_or_else(|| PathBuf::from("efa-train-out")));
    let quiet = args.quiet || !job.leads();
    let bar = epoch_bar("train", run.config.train.max_epochs, quiet);
    let crash = args.crash_after_epoch;
    let mut hook = |log: &EpochLog| {
        on_epoch(&bar, log);
        if crash == Some(log.epoch) {
            std::process::abort();
        }
        Ok(())
    };
    let opts = RunOptions {
        out,
        resume: args.resume.map(RunDir::new),
        checkpoint_every: args.checkpoint_every,
        detect_anomaly: args.detect_anomaly,
        threads: &threads,
        group: job.group(),
        on_epoch: Some(&mut hook),
    };
    let trained = run.train(opts);
    bar.finish_and_clear();
    let t = trained?;
    if !job.leads() {
        return Ok(());
    }
    outln!(
        "trained {} ({}) for {} epochs, best epoch {}, valid nll {:.6}{}; wrote {}",
        t.config.model.kind(),
        t.config.family.describe(),
        t.fit.epochs,
        t.fit.best_epoch,
        t.fit.best_val,
        t.test_nll
            .map_or(String::new(), |n| format!(", test nll {n:.6}")),
        t.dir.model_file().display()
    )?;
    Ok(())
}
