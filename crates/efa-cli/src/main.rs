//! `efa`: train, reproduce, audit and benchmark Exponential Family Attention models.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod alloc;
mod audit_cmd;
mod bench_cmd;
mod error;
mod expfam_cmd;
mod plot;
mod report;
mod reproduce_cmd;
mod reproduce_real;

pub use error::CliError;

/// Exponential Family Attention on the CPU: reproduce the paper's experiments, audit gradients,
/// check exponential-family numerics and benchmark the kernels.
#[derive(Parser)]
#[command(name = "efa", version, about, long_about = None)]
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
    Reproduce(reproduce_cmd::ReproduceArgs),
    /// Finite-difference audit of every parameter gradient of a whole model, in f64.
    Audit(audit_cmd::AuditArgs),
}

fn main() -> ExitCode {
    error::install_panic_hook();
    alloc::tune();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Expfam(args) => expfam_cmd::run(args),
        Command::Bench(args) => bench_cmd::run(args),
        Command::Reproduce(args) => reproduce_cmd::run_cmd(args),
        Command::Audit(args) => audit_cmd::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
