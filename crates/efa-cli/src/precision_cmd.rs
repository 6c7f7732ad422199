//! `efa audit --precision`: every forward plan's loss and per-parameter gradient in f32 and f64
//! against the `general` plan in double-double, as relative errors and in units of the
//! dtype's epsilon, with the worst element's index (`efa_train::precision`).

use crate::audit_cmd::Job;
use crate::common::user;
use crate::CliError;
use efa_check::precision::TensorError;
use efa_model::ForwardPlan;
use efa_train::precision::{
    precision_audit_with_floor, sharpen, sharpen_attention, PrecisionAudit, Weights, F32_FACTOR,
    F32_STORAGE_FACTOR, F64_FLOOR_FACTOR,
};
use efa_train::{Evaluator, FitOptions, Threads};
use serde_json::json;
use std::time::Instant;

/// How the audited weights are made from a job's initial weights.
pub struct WeightsSpec {
    /// Which weights.
    pub weights: Weights,
    /// Epochs of training for [`Weights::Trained`].
    pub epochs: usize,
}

/// The weights of `job` as `spec` asks.
fn weights_of(job: &Job, spec: &WeightsSpec) -> Result<efa_model::Params<f64>, CliError> {
    match spec.weights {
        Weights::Init => Ok(job.params.clone()),
        Weights::Sharp => Ok(sharpen(&job.params)),
        Weights::SharpAttention => Ok(sharpen_attention(&job.params)),
        Weights::Trained => {
            let Some(fit) = &job.fit else {
                // Trained weights of a model of your own come from its run directory.
                return Ok(job.params.clone());
            };
            let mut cfg = fit.config.clone();
            cfg.max_epochs = spec.epochs;
            cfg.patience = spec.epochs;
            let mut p = job.params.cast::<f32>();
            let eval = Evaluator::new(&job.model, &job.objective);
            efa_train::fit(
                &eval,
                &mut p,
                &fit.train,
                &fit.val,
                &cfg,
                FitOptions::default(),
            )?;
            Ok(p.cast::<f64>())
        }
    }
}

/// Runs the precision audit of every job and prints tables (or one JSON object).
/// With `forced` (`--plan`), an error when that plan runs on none of the jobs (each skipped
/// it, or is a factor model), after the reports.
pub fn run(
    jobs: &[Job],
    (plans, forced): (&[ForwardPlan], Option<ForwardPlan>),
    spec: &WeightsSpec,
    threads: &Threads,
    json_out: bool,
) -> Result<(), CliError> {
    if !json_out {
        outln!(
            "precision audit: loss and gradients of every plan in f32 and f64 against the \
             general plan in double-double (~106 bits), weights {} (rounded to f32 first); \
             error = max |g − g_ref| / max |g_ref| per tensor, in units of the dtype's ε; \
             `general f64-floor` is the definition with every stored value rounded to f64 and \
             exact arithmetic (what f64 storage alone costs each gradient); `general \
             f32-floor`, shown where an f32 tensor would miss its budget without it, the same \
             with f32 storage (what f32 storage alone costs); `general f32-kinks`, shown where an f32 tensor would miss its budget without it, is the \
             definition with the other side taken at every ReLU input within f32 round-off of \
             the kink (what rounding at the kinks alone can move each f32 gradient)",
            spec.weights.name()
        )?;
    }
    let (mut reports, mut missed) = (Vec::new(), 0);
    // Why the forced plan did not run, per job; `ran` counts the jobs where it did.
    let (mut ran, mut not_run) = (0, Vec::new());
    for job in jobs {
        let start = Instant::now();
        let params = weights_of(job, spec)?;
        let audit = precision_audit_with_floor(
            &job.model,
            &job.objective,
            &params,
            &job.batch,
            plans,
            threads,
        )?;
        let seconds = start.elapsed().as_secs_f64();
        if let Some(p) = forced {
            if audit.rows.iter().any(|r| r.plan == Some(p)) {
                ran += 1;
            } else {
                let why = match audit.skipped.iter().find(|(q, _)| *q == p) {
                    Some((_, why)) => why.clone(),
                    None => FM_PLANS.into(),
                };
                not_run.push(format!("{}: {why}", job.title));
            }
        }
        let misses: Vec<String> = audit
            .f64_misses()
            .into_iter()
            .chain(audit.f32_misses())
            .map(|m| m.to_string())
            .collect();
        missed += usize::from(!misses.is_empty());
        if json_out {
            reports.push(audit_json(&job.title, &audit, &misses, seconds));
        } else {
            print_audit(&job.title, &audit, &misses, seconds)?;
        }
    }
    if json_out {
        let doc = json!({
            "weights": spec.weights.name(),
            "budgets": {
                "f64": format!("max |g − g_ref| ≤ max(1e-11·max|g_ref|, 1e-13·model's largest \
                                gradient, {F64_FLOOR_FACTOR}× the tensor's f64 floor)"),
                "f32": format!("each tensor's error ≤ {F32_FACTOR}× the general plan's f32 error \
                                (or 16 ε, or {F32_STORAGE_FACTOR}× the tensor's f32 floor where \
                                measured), plus the tensor's f32-kinks spread where measured"),
            },
            "models": reports,
        });
        outln!("{}", serde_json::to_string_pretty(&doc).map_err(user)?)?;
    }
    if let Some(p) = forced.filter(|_| ran == 0) {
        return Err(plan_ran_nowhere(p, &not_run));
    }
    if missed > 0 {
        return Err(CliError::failed(format!(
            "{missed} model(s) have tensors over their precision budget"
        )));
    }
    Ok(())
}

/// Why a factor model does not run a forced `--plan`.
pub(crate) const FM_PLANS: &str = "a factor model has a single forward (plan `general`)";

/// The error of a forced `--plan` that ran on none of the audited models, with why per model
/// (`not_run`).
pub(crate) fn plan_ran_nowhere(plan: ForwardPlan, not_run: &[String]) -> CliError {
    CliError::new(format!(
        "--plan {}: the plan applies to none of the models audited ({})",
        plan.name(),
        not_run.join("; ")
    ))
}

fn tensor_json(e: &TensorError) -> serde_json::Value {
    json!({
        "name": e.name, "shape": e.shape, "scale": e.scale, "max_abs_err": e.max_abs,
        "rel_err": e.rel, "eps_units": e.eps_units, "digits": finite(e.digits()),
        "worst": e.worst, "got": e.got, "want": e.want,
    })
}

/// JSON has no infinity: an exact result's digits are `null`.
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

fn audit_json(
    title: &str,
    a: &PrecisionAudit,
    misses: &[String],
    seconds: f64,
) -> serde_json::Value {
    json!({
        "model": title,
        "reference_loss": a.reference_loss,
        "model_scale": a.model_scale,
        "seconds": seconds,
        "within_budget": misses.is_empty(),
        "over_budget": misses,
        "plans": a.rows.iter().map(|r| json!({
            "plan": r.plan_name(), "dtype": r.dtype, "loss": tensor_json(&r.loss),
            "worst": r.worst().map(|w| w.name.clone()),
            "params": r.params.iter().map(tensor_json).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "skipped": a.skipped.iter().map(|(p, why)| json!({"plan": p.name(), "reason": why}))
            .collect::<Vec<_>>(),
    })
}

fn print_audit(
    title: &str,
    a: &PrecisionAudit,
    misses: &[String],
    seconds: f64,
) -> Result<(), CliError> {
    outln!(
        "\n{title}: reference loss {:.15e}, largest gradient {:.3e} ({seconds:.1} s)",
        a.reference_loss,
        a.model_scale
    )?;
    let cols: Vec<String> = a
        .rows
        .iter()
        .map(|r| format!("{} {}", r.plan_name(), r.dtype))
        .collect();
    let width = cols.iter().map(String::len).max().unwrap_or(0).max(10);
    let mut head = format!("{:<26}", "relative error (ε units)");
    for c in &cols {
        head += &format!(" {c:>width$}");
    }
    outln!("{head}")?;
    let line = |name: &str, pick: &dyn Fn(&efa_train::precision::PrecisionRow) -> &TensorError| {
        let mut s = format!("{name:<26}");
        for r in &a.rows {
            let e = pick(r);
            s += &format!(" {:>width$}", format!("{:.1e} ({:.0})", e.rel, e.eps_units));
        }
        outln!("{s}")
    };
    line("loss", &|r| &r.loss)?;
    let n = a.rows.first().map_or(0, |r| r.params.len());
    for k in 0..n {
        let name = a.rows[0].params[k].name.clone();
        line(&name, &|r| &r.params[k])?;
    }
    for r in &a.rows {
        if let Some(w) = r.worst() {
            outln!(
                "  {} {}: worst {} at {:?}: {:e} against {:e}",
                r.plan_name(),
                r.dtype,
                w.name,
                w.worst,
                w.got,
                w.want
            )?;
        }
    }
    for (p, why) in &a.skipped {
        outln!("  {} skipped: {why}", p.name())?;
    }
    if misses.is_empty() {
        outln!("  every plan within its budget")?;
    }
    for m in misses {
        outln!("  OVER BUDGET: {m}")?;
    }
    Ok(())
}
