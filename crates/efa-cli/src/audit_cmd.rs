//! `efa audit …`: finite-difference audits of whole models' gradients in f64.

use crate::reproduce_cmd::{Directions, Models};
use crate::CliError;
use clap::{Args, Subcommand};
use efa_check::Report;
use efa_model::audit::{audit_model, default_options};
use efa_model::experiments::synthetic;
use efa_model::Objective;

/// Arguments of `efa audit`.
#[derive(Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    experiment: AuditExperiment,
}

#[derive(Subcommand)]
enum AuditExperiment {
    /// The synthetic experiment's models, built in f64 on a small batch.
    Synthetic(AuditSyntheticArgs),
}

#[derive(Args)]
struct AuditSyntheticArgs {
    /// Models to audit.
    #[arg(long, value_enum, default_value_t = Models::Both)]
    model: Models,
    /// Directions to audit.
    #[arg(long, value_enum, default_value_t = Directions::Both)]
    direction: Directions,
    /// Samples in the audit batch.
    #[arg(long, default_value_t = 6)]
    batch: usize,
    /// Seed of the parameter initialisation.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// Runs `efa audit`.
pub fn run(args: AuditArgs) -> Result<(), CliError> {
    match args.experiment {
        AuditExperiment::Synthetic(a) => synthetic_audit(a),
    }
}

fn synthetic_audit(a: AuditSyntheticArgs) -> Result<(), CliError> {
    if a.batch == 0 {
        return Err(CliError::new("--batch must be at least 1"));
    }
    let (dirs, models) = (a.direction.unidirectional(), a.model.is_efa());
    let opts = default_options();
    println!(
        "gradient audit in f64: central differences (step {:e}·max(1,|θ|)), tolerance abs {:e} + rel {:e}",
        opts.fd.rel_step, opts.tol.abs, opts.tol.rel
    );
    let mut failed = 0;
    for &uni in dirs {
        for &efa in models {
            let (model, batch) = synthetic::audit_batch(uni, efa, a.batch)
                .map_err(|e| CliError::new(e.to_string()))?;
            let report = audit_model(&model, &Objective::Mse, &batch, a.seed, &opts)
                .map_err(|e| CliError::new(e.to_string()))?;
            let title = format!(
                "{} {}",
                model.kind(),
                if uni {
                    "unidirectional"
                } else {
                    "bidirectional"
                }
            );
            print_report(&title, &report);
            if !report.passed() {
                failed += 1;
            }
        }
    }
    if failed > 0 {
        return Err(CliError::failed(format!("{failed} model audit(s) failed")));
    }
    println!("all gradients agree with finite differences");
    Ok(())
}

/// Prints one row per parameter tensor and every failing element.
pub fn print_report(title: &str, report: &Report) {
    println!("\n{title}");
    println!(
        "{:<22} {:<12} {:>7} {:>12} {:>12}  result",
        "parameter", "shape", "checked", "max abs err", "max rel err"
    );
    for p in &report.params {
        println!(
            "{:<22} {:<12} {:>7} {:>12.3e} {:>12.3e}  {}",
            p.name,
            format!("{:?}", p.shape),
            p.checked,
            p.max_abs_err,
            p.max_rel_err,
            if p.pass { "pass" } else { "FAIL" }
        );
    }
    for f in report.failures.iter().take(50) {
        println!("  failing: {f:?}");
    }
}
