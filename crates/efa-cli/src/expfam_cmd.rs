//! `efa expfam …`: exponential-family numerics.
//!
//! `efa expfam check --reference FILE [--json]` evaluates every case of a reference file (the
//! schema of `shared/reference/expfam_reference.json`) in f64, and in f32 for the cases marked
//! `f32_exact_inputs`, compares A, dA, d2A, t, log h, nll and dnll (probs, d2nll and the
//! cut-point gradient for the ordinal model) with the README's tolerance rule, prints a
//! per-family table and fails (exit status 1) when any case fails. A file that cannot be used
//! — unreadable, not JSON, no cases, or a malformed case (unknown family, wrong length of η, y
//! or a reference field, y outside the support, missing field, …) — is an input error (exit
//! status 2) naming the file, the case id and its index, before anything is evaluated.

use crate::CliError;
use clap::{Args, Subcommand};
use efa_expfam::refcheck::{check_case, format, FieldCheck, RefCase};
use efa_expfam::{Num, Real};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Arguments of `efa expfam`.
#[derive(Args)]
pub struct ExpfamArgs {
    #[command(subcommand)]
    command: ExpfamCommand,
}

#[derive(Subcommand)]
enum ExpfamCommand {
    /// Check every case of a reference file in f64 (and f32 where the inputs are exact).
    Check(CheckArgs),
}

#[derive(Args)]
struct CheckArgs {
    /// Reference file (JSON, schema of shared/reference/expfam_reference.json).
    #[arg(long)]
    reference: PathBuf,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `efa expfam`.
pub fn run(args: ExpfamArgs) -> Result<(), CliError> {
    match args.command {
        ExpfamCommand::Check(a) => check(&a),
    }
}

/// The cases of the reference file, read and validated by [`efa_expfam::refcheck::format`]
/// (errors name the file, the case and the field).
fn load(file: &Path) -> Result<Vec<RefCase>, CliError> {
    format::read_file(file).map_err(|e| CliError::new(e.to_string()))
}

// ---------------------------------------------------------------------------------------------
// Evaluation and report.

#[derive(Default)]
struct Row {
    cases: usize,
    passed: usize,
    worst_ratio: f64,
    worst_ulps: f64,
    worst_scaled: f64,
    worst_at: String,
}

struct Failure {
    id: String,
    precision: &'static str,
    field: String,
    got: f64,
    want: f64,
    ratio: f64,
    message: Option<String>,
}

fn evaluate<T: Real>(
    cases: &[RefCase],
    rows: &mut BTreeMap<(String, &'static str), Row>,
    failures: &mut Vec<Failure>,
) {
    for case in cases.iter().filter(|c| T::BYTES == 8 || c.f32_exact_inputs) {
        let row = rows.entry((case.family.clone(), T::NAME)).or_default();
        row.cases += 1;
        let fields: Vec<FieldCheck> = match check_case::<T>(case) {
            Ok(f) => f,
            Err(message) => {
                failures.push(Failure {
                    id: case.id.clone(),
                    precision: T::NAME,
                    field: String::new(),
                    got: f64::NAN,
                    want: f64::NAN,
                    ratio: f64::INFINITY,
                    message: Some(message),
                });
                continue;
            }
        };
        let mut ok = true;
        for f in &fields {
            if row.worst_at.is_empty() || f.ratio > row.worst_ratio {
                row.worst_ratio = f.ratio;
                row.worst_at = format!("{} {}", case.id, f.field);
            }
            if f.scaled {
                row.worst_scaled = row.worst_scaled.max(f.units);
            } else {
                row.worst_ulps = row.worst_ulps.max(f.units);
            }
            if !f.pass {
                ok = false;
                failures.push(Failure {
                    id: case.id.clone(),
                    precision: T::NAME,
                    field: f.field.clone(),
                    got: f.got,
                    want: f.want,
                    ratio: f.ratio,
                    message: None,
                });
            }
        }
        if ok {
            row.passed += 1;
        }
    }
}

fn finite_or_null(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}

fn check(args: &CheckArgs) -> Result<(), CliError> {
    let cases = load(&args.reference)?;
    let mut rows = BTreeMap::new();
    let mut failures = Vec::new();
    evaluate::<f64>(&cases, &mut rows, &mut failures);
    evaluate::<f32>(&cases, &mut rows, &mut failures);
    let evaluated: usize = rows.values().map(|r| r.cases).sum();
    let failed_cases: usize = rows.values().map(|r| r.cases - r.passed).sum();

    if args.json {
        let families: Vec<Value> = rows
            .iter()
            .map(|((fam, prec), r)| {
                json!({
                    "family": fam, "precision": prec, "cases": r.cases, "passed": r.passed,
                    "worst_tolerance_ratio": finite_or_null(r.worst_ratio),
                    "worst_relative_ulps": finite_or_null(r.worst_ulps),
                    "worst_scaled_units": finite_or_null(r.worst_scaled),
                    "worst_at": r.worst_at,
                })
            })
            .collect();
        let fails: Vec<Value> = failures
            .iter()
            .map(|f| {
                json!({
                    "id": f.id, "precision": f.precision, "field": f.field,
                    "got": finite_or_null(f.got), "want": finite_or_null(f.want),
                    "tolerance_ratio": finite_or_null(f.ratio), "error": f.message,
                })
            })
            .collect();
        let report = json!({
            "reference": args.reference.display().to_string(),
            "cases": cases.len(), "evaluations": evaluated, "failed": failed_cases,
            "passed": failed_cases == 0, "families": families, "failures": fails,
        });
        outln!(
            "{}",
            serde_json::to_string_pretty(&report).expect("serialisable")
        )?;
    } else {
        outln!(
            "reference: {} ({} cases)",
            args.reference.display(),
            cases.len()
        )?;
        outln!(
            "{:<20} {:<4} {:>5} {:>6} {:>10} {:>10} {:>10}  worst at",
            "family",
            "prec",
            "cases",
            "passed",
            "tol.ratio",
            "rel.ulps",
            "scaled"
        )?;
        for ((fam, prec), r) in &rows {
            outln!(
                "{:<20} {:<4} {:>5} {:>6} {:>10.3e} {:>10.2} {:>10.2}  {}",
                fam,
                prec,
                r.cases,
                r.passed,
                r.worst_ratio,
                Num(r.worst_ulps),
                Num(r.worst_scaled),
                r.worst_at
            )?;
        }
        outln!(
            "tol.ratio = |got-ref|/tolerance (<= 1 passes); rel.ulps = |got-ref|/(eps |ref|) over \
             A, dA, d2A, t, log_h, probs, d2nll, dnll_dc; scaled = |got-ref|/(eps max(scale,|ref|)) \
             over nll, dnll"
        )?;
        for f in &failures {
            match &f.message {
                Some(m) => outln!("FAIL {} [{}]: {m}", f.id, f.precision)?,
                None => outln!(
                    "FAIL {} [{}] {}: got {}, reference {} ({:.3e} x tolerance)",
                    f.id,
                    f.precision,
                    f.field,
                    Num(f.got),
                    Num(f.want),
                    f.ratio
                )?,
            }
        }
    }
    if failed_cases > 0 {
        let first = failures.first().map(|f| f.id.clone()).unwrap_or_default();
        return Err(CliError::failed(format!(
            "{failed_cases} of {evaluated} case evaluations failed (first: {first})"
        )));
    }
    Ok(())
}
