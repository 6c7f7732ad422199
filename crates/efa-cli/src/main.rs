//! `efa`: train, reproduce, audit and benchmark Exponential Family Attention models.

#![warn(missing_docs)]

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[macro_use]
mod out;
mod alloc;
mod audit_cmd;
mod bench_cmd;
mod cluster;
mod common;
mod error;
mod evaluate_cmd;
mod expfam_cmd;
mod export_cmd;
mod plot;
mod precision_cmd;
mod predict_cmd;
mod report;
mod reproduce;
mod train_cmd;

pub use error::CliError;

#[global_allocator]
static ALLOCATOR: alloc::Counted = alloc::Counted;

/// Exponential Family Attention on the CPU: reproduce the paper's experiments, audit gradients,
/// check exponential-family numerics and benchmark the kernels.
#[derive(Parser)]
#[command(name = "efa", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Exponential-family numerics: check against a high-precision reference file.
    Expfam(expfam_cmd::ExpfamArgs),
    /// Benchmarks of the kernels (attention) with same-run baselines.
    Bench(bench_cmd::BenchArgs),
    /// Reproduce one of the paper's experiments: trains EFA and FM side by side and prints
    /// ours beside the paper's numbers.
    Reproduce(reproduce::ReproduceArgs),
    /// Finite-difference audit of every parameter gradient of whole models, in f64: every run
    /// of an experiment, or your own configuration with --config and --data.
    Audit(audit_cmd::AuditArgs),
    /// Train an EFA or factor model on your own CSV data, with checkpoints and --resume.
    Train(train_cmd::TrainArgs),
    /// Mean negative log-likelihood of a trained model on a CSV.
    Evaluate(evaluate_cmd::EvaluateArgs),
    /// Natural parameter, mean and variance per target row of a CSV, from a trained model.
    Predict(predict_cmd::PredictArgs),
    /// Write a paper data set as `efa train` inputs: split CSVs, items.csv and model.toml.
    Export(export_cmd::ExportArgs),
}

fn main() -> ExitCode {
    error::install_panic_hook();
    alloc::tune();
    let cli = Cli::parse();
    let job = match cluster::Job::join() {
        Ok(job) => job,
        Err(e) => {
            // Every rank refuses; one says why.
            if cluster::launched_rank() == 0 {
                errln!("error: {e}");
            }
            return ExitCode::from(e.exit_code());
        }
    };
    let single = |name: &str| job.require_single(name);
    let result = match cli.command {
        Command::Expfam(args) => single("expfam").and_then(|()| expfam_cmd::run(args)),
        Command::Bench(args) => single("bench").and_then(|()| bench_cmd::run(args)),
        Command::Reproduce(args) => reproduce::run(args, &job),
        Command::Audit(args) => single("audit").and_then(|()| audit_cmd::run(args)),
        Command::Train(args) => train_cmd::run(args, &job),
        Command::Evaluate(args) => single("evaluate").and_then(|()| evaluate_cmd::run(args)),
        Command::Predict(args) => single("predict").and_then(|()| predict_cmd::run(args)),
        Command::Export(args) => single("export").and_then(|()| export_cmd::run(args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // With several ranks this ends the whole job (naming this rank) and does not
            // return.
            job.fail(&e);
            errln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
