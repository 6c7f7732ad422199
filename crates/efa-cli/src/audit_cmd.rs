//! `efa audit …`: finite-difference audits of whole models' gradients in f64, for every run of
//! a paper experiment or for a model configured on your own data; with `--precision`, every
//! forward plan's digits in f32 and f64 against a double-double reference (`precision_cmd`).

use crate::common::user;
use crate::CliError;
use clap::Args;
use efa_check::{CheckOptions, Compared, Mode, Report};
use efa_model::{ForwardPlan, ModelConfig, Objective, Params, Samples};
use efa_paper::{plan_of, ExperimentOptions, RunSettings};
use efa_train::audit::{audit_model, ModelAudit};
use efa_train::run;
use efa_train::userdata::UserConfig;
use efa_train::{Evaluator, TrainError};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `efa audit`: an experiment subcommand, or `--config` with `--data`.
#[derive(Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    experiment: Option<ExperimentOptions>,
    /// Audit the model of this `efa train` configuration (TOML) on `--data` instead of an
    /// experiment.
    #[arg(long, requires = "data")]
    config: Option<PathBuf>,
    /// With --config: the CSV (`seq,order,item,value`) the audit batch comes from.
    #[arg(long, requires = "config")]
    data: Option<PathBuf>,
    /// With --config: the item-feature CSV (`item,<feature>,…`) of the continuous inputs.
    #[arg(long, requires = "config")]
    items: Option<PathBuf>,
    /// With --config: audit at the trained weights of this `efa train` output directory (or
    /// model file) instead of the initial weights; its model, families, direction and loss
    /// must be --config's.
    #[arg(long, requires = "config")]
    model: Option<PathBuf>,
    /// Samples in the audit batch (the first samples of the training split; default 6, and 64
    /// with --precision).
    #[arg(long, global = true)]
    batch: Option<usize>,
    /// Instead of finite differences: every forward plan's loss and gradients in f32 and f64
    /// against the general plan computed in double-double (about 106 bits), as relative
    /// errors per tensor, in units of the dtype's epsilon, with the worst element.
    #[arg(long, global = true)]
    precision: bool,
    /// With --precision: the weights audited. `init`: the initialisation; `sharp`: every
    /// weight ×3; `sharp-attention`: the attention query and key kernels ×40 (near one-hot
    /// attention); `trained`: the initialisation trained for --train-epochs epochs with the
    /// run's recipe (with --config: the weights of --model).
    #[arg(long, global = true, default_value = "init",
          value_parser = ["init", "sharp", "sharp-attention", "trained"])]
    weights: String,
    /// With --precision --weights trained: epochs of training (1–1000).
    #[arg(long, global = true, default_value_t = 3)]
    train_epochs: usize,
    /// Worker threads (the results do not depend on it).
    #[arg(long, global = true, default_value_t = 1)]
    threads: usize,
    /// Seed of the parameter initialisation.
    #[arg(long, global = true, default_value_t = 0)]
    seed: u64,
    /// Forward plan of the EFA models (default: the plan training would choose for the batch).
    #[arg(long, global = true, value_parser = crate::common::plan_parser())]
    plan: Option<ForwardPlan>,
    /// Parameters with at most this many elements are checked element by element, larger ones
    /// along seeded random directions.
    #[arg(long, global = true, default_value_t = 512)]
    max_full: usize,
    /// Random directions per large parameter (1–10,000).
    #[arg(long, global = true, default_value_t = 16)]
    directions: usize,
    /// Print one JSON object with every model's report, every compared element's analytic
    /// and numeric value included, instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// Also print every compared value (analytic and numeric) of every parameter and op input.
    #[arg(long, global = true)]
    verbose: bool,
}

/// One model to audit.
pub(crate) struct Job {
    pub title: String,
    pub model: ModelConfig,
    pub objective: Objective,
    pub params: Params<f64>,
    pub batch: Samples,
    pub plan: Option<ForwardPlan>,
    /// The run's data and recipe (paper experiments), for `--weights trained`.
    pub fit: Option<FitInputs>,
}

/// What a short training run needs.
pub(crate) struct FitInputs {
    pub train: Samples,
    pub val: Samples,
    pub config: efa_train::TrainConfig,
}

/// Most random directions per parameter (`--directions`): each costs two forward passes.
const MAX_DIRECTIONS: usize = 10_000;
/// Most epochs of `--weights trained` (`--train-epochs`; patience is as long, so every epoch
/// runs), as `efa bench train --epochs`.
const MAX_TRAIN_EPOCHS: usize = 1000;

/// The weights `--weights` names.
fn weights_spec(a: &AuditArgs) -> Result<crate::precision_cmd::WeightsSpec, CliError> {
    use efa_train::precision::Weights;
    let weights = Weights::ALL
        .into_iter()
        .find(|w| w.name() == a.weights)
        .unwrap_or(Weights::Trained);
    if weights == Weights::Trained && a.config.is_some() && a.model.is_none() {
        return Err(CliError::new(
            "--weights trained with --config needs --model (the run directory of the trained \
             model)",
        ));
    }
    if !(1..=MAX_TRAIN_EPOCHS).contains(&a.train_epochs) {
        return Err(CliError::new(format!(
            "--train-epochs {}: must be in 1..={MAX_TRAIN_EPOCHS}",
            a.train_epochs
        )));
    }
    Ok(crate::precision_cmd::WeightsSpec {
        weights,
        epochs: a.train_epochs,
    })
}

/// Runs `efa audit`.
pub fn run(a: AuditArgs) -> Result<(), CliError> {
    let batch = a.batch.unwrap_or(if a.precision { 64 } else { 6 });
    if batch == 0 {
        return Err(CliError::new("--batch must be at least 1"));
    }
    crate::common::check_threads(a.threads, "")?;
    if !(1..=MAX_DIRECTIONS).contains(&a.directions) {
        return Err(CliError::new(format!(
            "--directions {}: must be in 1..={MAX_DIRECTIONS}",
            a.directions
        )));
    }
    let spec = a.precision.then(|| weights_spec(&a)).transpose()?;
    let jobs = match (&a.experiment, &a.config) {
        (Some(_), Some(_)) => {
            return Err(CliError::new(
                "efa audit takes an experiment or --config with --data, not both",
            ))
        }
        (Some(e), None) => experiment_jobs(&a, e, batch)?,
        (None, Some(config)) => config_jobs(&a, config, batch)?,
        (None, None) => {
            return Err(CliError::new(
                "efa audit needs an experiment (e.g. `efa audit synthetic`) or --config with \
                 --data",
            ))
        }
    };
    if let Some(spec) = spec {
        // --plan audits that plan beside general (the f32 comparison's baseline).
        let plans: Vec<ForwardPlan> = match a.plan {
            Some(p) if p != ForwardPlan::General => vec![ForwardPlan::General, p],
            Some(_) => vec![ForwardPlan::General],
            None => ForwardPlan::ALL.to_vec(),
        };
        let threads = efa_train::Threads::new(a.threads).map_err(user)?;
        return crate::precision_cmd::run(&jobs, (&plans, a.plan), &spec, &threads, a.json);
    }
    let opts = CheckOptions {
        mode: Mode::Auto {
            max_full: a.max_full,
            n: a.directions,
            seed: 17,
        },
        ..CheckOptions::default()
    };
    if !a.json {
        outln!(
            "gradient audit in f64: central differences (step {:e}·max(1,|θ|)), tolerance abs \
             {:e} + rel {:e}; parameters up to {} elements in full, larger along {} random \
             directions",
            opts.fd.rel_step,
            opts.tol.abs,
            opts.tol.rel,
            a.max_full,
            a.directions
        )?;
    }
    // `ran` counts the jobs that audited the forced plan; `not_run` says why the others did not.
    let (mut failed, mut ran, mut not_run, mut reports) = (0, 0, Vec::new(), Vec::new());
    for job in &jobs {
        let eval = Evaluator::new(&job.model, &job.objective).with_plan(job.plan);
        if let Err(e) = job.model.plan_for(&job.batch, job.plan) {
            let why = e.to_string();
            if !a.json {
                outln!("\n{}: skipped: {why}", job.title)?;
            }
            reports.push(json!({"model": job.title, "skipped": why}));
            not_run.push(format!("{}: {why}", job.title));
            continue;
        }
        let start = Instant::now();
        let audit = audit_model(&eval, &job.params, &job.batch, &opts)?;
        let seconds = start.elapsed().as_secs_f64();
        if job.plan == a.plan {
            ran += 1;
        } else {
            // A factor model of an experiment: its one forward, not the forced plan.
            not_run.push(format!("{}: {}", job.title, crate::precision_cmd::FM_PLANS));
        }
        if !audit.passed() {
            failed += 1;
        }
        if a.json {
            reports.push(report_json(&job.title, &audit, seconds));
        } else {
            print_report(&job.title, &audit, seconds, a.verbose)?;
        }
    }
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"models": reports})).map_err(user)?
        )?;
    }
    if let Some(p) = a.plan.filter(|_| ran == 0) {
        return Err(crate::precision_cmd::plan_ran_nowhere(p, &not_run));
    }
    if failed > 0 {
        return Err(CliError::failed(format!("{failed} model audit(s) failed")));
    }
    if !a.json {
        outln!("all gradients agree with finite differences")?;
    }
    Ok(())
}

/// Every run of an experiment, each on the first `--batch` samples of its training split.
fn experiment_jobs(
    a: &AuditArgs,
    e: &ExperimentOptions,
    batch: usize,
) -> Result<Vec<Job>, CliError> {
    let exp = e.build()?;
    let settings = RunSettings {
        epochs: Some(1),
        seed: a.seed,
        plan: a.plan,
        ..RunSettings::default()
    };
    let name = exp.name();
    exp.runs(&settings)?
        .into_iter()
        .map(|spec| {
            let n = batch.min(spec.train.len());
            let idx: Vec<usize> = (0..n).collect();
            Ok(Job {
                title: format!("{name} {} {}", spec.model.kind(), spec.setting()),
                params: spec.model.init::<f64>(a.seed),
                batch: spec.train.select(&idx),
                plan: plan_of(&spec.model, &settings),
                fit: Some(FitInputs {
                    train: spec.train,
                    val: spec.val,
                    config: spec.train_config,
                }),
                model: spec.model,
                objective: spec.objective,
            })
        })
        .collect()
}

/// The model of an `efa train` configuration on the first `--batch` samples of `--data`.
fn config_jobs(
    a: &AuditArgs,
    config: &std::path::Path,
    batch: usize,
) -> Result<Vec<Job>, CliError> {
    let data = a
        .data
        .as_ref()
        .ok_or_else(|| CliError::new("--config needs --data"))?;
    let items = run::read_items(a.items.as_deref())?;
    let (cfg, count, params) = match &a.model {
        Some(dir) => {
            let saved = run::load_saved(dir, items.as_ref())?;
            // Without --items, continuous inputs take the model's stored site table, as
            // `efa evaluate` does.
            let (cfg, _) = match &items {
                Some(t) => run::read_config(config, Some(t))?,
                None => run::read_config_for(config, &saved.config)?,
            };
            let file = if dir.is_dir() {
                dir.join(run::MODEL_FILE)
            } else {
                dir.clone()
            };
            check_same_model(&saved.config, &file, &cfg, config)?;
            (saved.config, saved.count, saved.params.cast::<f64>())
        }
        None => {
            let (cfg, count) = run::read_config(config, items.as_ref())?;
            let p = cfg.model.init::<f64>(cfg.init_seed);
            (cfg, count, p)
        }
    };
    let split = run::load_split(
        data,
        &cfg,
        &count,
        efa_train::Threads::single(),
        items.as_ref(),
    )?;
    let n = batch.min(split.samples.len());
    let idx: Vec<usize> = (0..n).collect();
    Ok(vec![Job {
        title: format!(
            "{} {} ({})",
            config.display(),
            cfg.model.kind(),
            if a.model.is_some() {
                "trained weights"
            } else {
                "initial weights"
            }
        ),
        objective: cfg.objective(),
        batch: split.samples.select(&idx),
        plan: match (&cfg.model, a.plan) {
            (ModelConfig::Fm(_), Some(p)) => {
                return Err(CliError::new(format!(
                    "--plan {}: forward plans are the EFA model's; {} is a factor model (FM), \
                     which has one forward",
                    p.name(),
                    config.display()
                )))
            }
            (_, plan) => plan,
        },
        model: cfg.model,
        params,
        fit: None,
    }])
}

/// Checks that the model of `--model` (configuration `saved`, from `file`) is the model of
/// `--config` (`cfg`, from `config`): what the audit depends on (the model, its families,
/// direction and loss) must be equal; the training settings and the initialisation seed are
/// not used at trained weights. An error names the model file and the first field that
/// differs.
fn check_same_model(
    saved: &UserConfig,
    file: &Path,
    cfg: &UserConfig,
    config: &Path,
) -> Result<(), CliError> {
    fn json<T: serde::Serialize>(x: &T) -> Result<serde_json::Value, CliError> {
        serde_json::to_value(x).map_err(user)
    }
    let parts = |c: &UserConfig| -> Result<[serde_json::Value; 4], CliError> {
        Ok([
            json(&c.model)?,
            json(&c.family)?,
            json(&c.direction)?,
            json(&c.loss)?,
        ])
    };
    let names = ["model", "family", "direction", "loss"];
    let (ours, theirs) = (parts(saved)?, parts(cfg)?);
    let diff = names
        .iter()
        .zip(ours.iter().zip(&theirs))
        .find_map(|(name, (a, b))| first_difference(name.to_string(), a, b));
    let Some((field, a, b)) = diff else {
        return Ok(());
    };
    let shown = |v: &serde_json::Value| match v {
        serde_json::Value::Null => Some("absent".to_string()),
        serde_json::Value::Object(_) | serde_json::Value::Array(_) => None,
        v => Some(v.to_string()),
    };
    let why = match (shown(a), shown(b)) {
        (Some(a), Some(b)) => format!("{a} in the model, {b} in {}", config.display()),
        _ => format!("the model's and {}'s differ", config.display()),
    };
    Err(TrainError::Metadata {
        file: file.to_path_buf(),
        key: run::CONFIG_KEY.into(),
        field: Some(field),
        reason: format!("{why}; --model must hold a model trained with --config"),
    }
    .into())
}

/// The first place (`path`, then `.key` or `[index]` below it) where the JSON values `a` and
/// `b` differ, with the two values there; a key one side lacks is `null` there.
fn first_difference<'a>(
    path: String,
    a: &'a serde_json::Value,
    b: &'a serde_json::Value,
) -> Option<(String, &'a serde_json::Value, &'a serde_json::Value)> {
    use serde_json::Value;
    const NULL: &Value = &Value::Null;
    if a == b {
        return None;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let (u, v) = (x.get(k).unwrap_or(NULL), y.get(k).unwrap_or(NULL));
                first_difference(format!("{path}.{k}"), u, v)
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (u, v))| first_difference(format!("{path}[{i}]"), u, v)),
        _ => Some((path, a, b)),
    }
}

/// The JSON of one report: per tensor, every compared value with its location.
fn check_json(r: &Report) -> serde_json::Value {
    json!({
        "passed": r.passed(),
        "nonfinite_base": r.nonfinite_base,
        "kinks": r.kinks,
        "tensors": r.params.iter().map(|p| json!({
            "name": p.name, "shape": p.shape, "checked": p.checked,
            "max_abs_err": p.max_abs_err, "max_rel_err": p.max_rel_err, "pass": p.pass,
            "compared": match p.compared {
                Compared::Elements => json!("elements"),
                Compared::Directions { seed } => json!({"directions": {"seed": seed}}),
            },
            "values": (0..p.checked).map(|k| json!({
                "at": p.location(k).to_string(),
                "analytic": p.analytic.get(k),
                "numeric": p.numeric.get(k),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "skipped": r.skipped.iter().map(|s| json!({
            "name": s.name, "shape": s.shape, "reason": s.reason,
        })).collect::<Vec<_>>(),
        "failures": r.failures.iter().map(|f| json!({
            "tensor": f.param, "at": f.location.to_string(), "analytic": f.analytic,
            "numeric": f.numeric, "abs_err": f.abs_err, "rel_err": f.rel_err,
        })).collect::<Vec<_>>(),
    })
}

/// The JSON of one model's audit: the parameter audit and every fused node's audit, with
/// every compared value.
fn report_json(title: &str, audit: &ModelAudit, seconds: f64) -> serde_json::Value {
    json!({
        "model": title,
        "plan": audit.plan.name(),
        "loss": audit.loss,
        "passed": audit.passed(),
        "seconds": seconds,
        "params": check_json(&audit.params),
        "fused_ops": audit.fused.iter().map(|n| json!({
            "node": n.node, "op": n.op, "input_nodes": n.input_nodes,
            "output_nodes": n.output_nodes, "audit": check_json(&n.report),
        })).collect::<Vec<_>>(),
    })
}

/// Prints one row per parameter tensor and per fused op (worst node of each op kind), every
/// failing element, and the non-finite warnings.
pub fn print_report(
    title: &str,
    audit: &ModelAudit,
    seconds: f64,
    verbose: bool,
) -> Result<(), CliError> {
    let report: &Report = &audit.params;
    outln!(
        "\n{title} (forward plan {}, loss {:.6e}, {seconds:.1} s)",
        audit.plan.name(),
        audit.loss
    )?;
    if let Some(w) = &report.nonfinite_base {
        outln!("  WARNING: {w}")?;
    }
    if !report.kinks.is_empty() {
        outln!(
            "  {} element(s) at a kink (one-sided differences disagree; the gradient lies \
             between them): {}",
            report.kinks.len(),
            report.kinks.join(", ")
        )?;
    }
    outln!(
        "{:<28} {:<14} {:>7} {:>12} {:>12}  result",
        "parameter",
        "shape",
        "checked",
        "max abs err",
        "max rel err"
    )?;
    for p in &report.params {
        outln!(
            "{:<28} {:<14} {:>7} {:>12.3e} {:>12.3e}  {}",
            p.name,
            format!("{:?}", p.shape),
            p.checked,
            p.max_abs_err,
            p.max_rel_err,
            if p.pass { "pass" } else { "FAIL" }
        )?;
    }
    for f in report.failures.iter().take(50) {
        outln!(
            "  failing: {} at {}: analytic {:e}, numeric {:e}",
            f.param,
            f.location,
            f.analytic,
            f.numeric
        )?;
    }
    // Fused ops: one line per (op, input), over all nodes of that op.
    let mut rows: std::collections::BTreeMap<String, (usize, usize, f64, f64, bool)> =
        Default::default();
    for n in &audit.fused {
        for p in &n.report.params {
            let e = rows.entry(p.name.clone()).or_insert((0, 0, 0.0, 0.0, true));
            e.0 += 1;
            e.1 += p.checked;
            e.2 = e.2.max(p.max_abs_err);
            e.3 = e.3.max(p.max_rel_err);
            e.4 &= p.pass;
        }
        if let Some(w) = &n.report.nonfinite_base {
            outln!("  WARNING: fused node {} ({}): {w}", n.node, n.op)?;
        }
    }
    outln!(
        "{:<28} {:>6} {:>7} {:>12} {:>12}  result",
        "fused op input",
        "nodes",
        "checked",
        "max abs err",
        "max rel err"
    )?;
    for (name, (nodes, checked, abs, rel, pass)) in &rows {
        outln!(
            "{name:<28} {nodes:>6} {checked:>7} {abs:>12.3e} {rel:>12.3e}  {}",
            if *pass { "pass" } else { "FAIL" }
        )?;
    }
    for n in audit.fused.iter().filter(|n| !n.passed()) {
        for f in n.report.failures.iter().take(20) {
            outln!(
                "  failing: node {} {} at {}: analytic {:e}, numeric {:e}",
                n.node,
                f.param,
                f.location,
                f.analytic,
                f.numeric
            )?;
        }
    }
    if verbose {
        outln!("{}", report.verbose())?;
        for n in &audit.fused {
            outln!("fused node {} ({}):\n{}", n.node, n.op, n.report.verbose())?;
        }
    }
    Ok(())
}
