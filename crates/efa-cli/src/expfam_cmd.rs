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
use efa_expfam::refcheck::{check_case, validate_case, FieldCheck, RefCase};
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

// ---------------------------------------------------------------------------------------------
// Parsing, with errors naming the file, the case and the field.

struct Parser<'a> {
    file: &'a Path,
    /// `case <id> (index <i>)`, or `case at index <i>` when the id is missing.
    case: String,
}

impl Parser<'_> {
    fn err(&self, field: &str, what: impl std::fmt::Display) -> CliError {
        CliError::new(format!(
            "{}: {}: field {field:?}: {what}",
            self.file.display(),
            self.case
        ))
    }

    fn num(&self, field: &str, v: &Value) -> Result<f64, CliError> {
        let s = v
            .as_str()
            .ok_or_else(|| self.err(field, format!("expected a number string, found {v}")))?;
        match s {
            "inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            _ => s
                .parse::<f64>()
                .map_err(|_| self.err(field, format!("{s:?} is not a number"))),
        }
    }

    fn nums(&self, field: &str, v: &Value) -> Result<Vec<f64>, CliError> {
        match v {
            Value::Array(a) => a.iter().map(|x| self.num(field, x)).collect(),
            Value::String(_) => Ok(vec![self.num(field, v)?]),
            other => Err(self.err(
                field,
                format!("expected a list of number strings, found {other}"),
            )),
        }
    }

    fn matrix(&self, field: &str, v: &Value) -> Result<Vec<f64>, CliError> {
        let rows = v
            .as_array()
            .ok_or_else(|| self.err(field, "expected a list of rows"))?;
        let mut out = Vec::new();
        for r in rows {
            out.extend(self.nums(field, r)?);
        }
        Ok(out)
    }

    fn req<'v>(&self, c: &'v Value, field: &str) -> Result<&'v Value, CliError> {
        match c.get(field) {
            Some(v) => Ok(v),
            None => Err(self.err(field, "missing")),
        }
    }

    fn opt_num(&self, c: &Value, field: &str) -> Result<Option<f64>, CliError> {
        match c.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => self.num(field, v).map(Some),
        }
    }

    fn opt_nums(&self, c: &Value, field: &str) -> Result<Option<Vec<f64>>, CliError> {
        match c.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => self.nums(field, v).map(Some),
        }
    }

    fn opt_matrix(&self, c: &Value, field: &str) -> Result<Option<Vec<f64>>, CliError> {
        match c.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => self.matrix(field, v).map(Some),
        }
    }
}

fn parse_case(file: &Path, index: usize, c: &Value) -> Result<RefCase, CliError> {
    let id = c.get("id").and_then(Value::as_str).map(str::to_string);
    let p = Parser {
        file,
        case: match &id {
            Some(id) => format!("case {id} (index {index})"),
            None => format!("case at index {index}"),
        },
    };
    let id = id.ok_or_else(|| p.err("id", "missing or not a string"))?;
    let family = p
        .req(c, "family")?
        .as_str()
        .ok_or_else(|| p.err("family", "not a string"))?
        .to_string();
    let params = c.get("params").cloned().unwrap_or(Value::Null);
    let d2nll = p.opt_matrix(c, "d2nll")?;
    Ok(RefCase {
        n: p.opt_num(&params, "n")
            .map_err(|_| p.err("params.n", "not a number string"))?,
        s2: p
            .opt_num(&params, "s2")
            .map_err(|_| p.err("params.s2", "not a number string"))?,
        r: p.opt_num(&params, "r")
            .map_err(|_| p.err("params.r", "not a number string"))?,
        cutpoints: p.opt_nums(&params, "cutpoints")?.unwrap_or_default(),
        eta: p.nums("eta", p.req(c, "eta")?)?,
        y: p.nums("y", p.req(c, "y")?)?,
        t: p.opt_nums(c, "t")?,
        log_h: p.opt_num(c, "log_h")?,
        a: p.opt_num(c, "A")?,
        da: p.opt_nums(c, "dA")?,
        d2a: p.opt_matrix(c, "d2A")?,
        nll: p.num("nll", p.req(c, "nll")?)?,
        dnll: p.nums("dnll", p.req(c, "dnll")?)?,
        nll_scale: p.num("nll_scale", p.req(c, "nll_scale")?)?,
        dnll_scale: p.nums("dnll_scale", p.req(c, "dnll_scale")?)?,
        d2nll: match d2nll {
            Some(v) if v.len() == 1 => Some(v[0]),
            Some(v) => {
                return Err(p.err("d2nll", format!("expected 1x1, found {} values", v.len())))
            }
            None => None,
        },
        dnll_dcutpoints: p.opt_nums(c, "dnll_dcutpoints")?,
        probs: p.opt_nums(c, "probs")?,
        f32_exact_inputs: c
            .get("f32_exact_inputs")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        id,
        family,
    })
}

fn load(file: &Path) -> Result<Vec<RefCase>, CliError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::new(format!("{}: cannot read: {e}", file.display())))?;
    let doc: Value = serde_json::from_str(&text)
        .map_err(|e| CliError::new(format!("{}: invalid JSON: {e}", file.display())))?;
    let cases = doc
        .get("cases")
        .and_then(Value::as_array)
        .ok_or_else(|| CliError::new(format!("{}: no \"cases\" list", file.display())))?;
    if cases.is_empty() {
        return Err(CliError::new(format!(
            "{}: the \"cases\" list is empty: nothing to check",
            file.display()
        )));
    }
    let mut seen = BTreeMap::new();
    let mut out = Vec::with_capacity(cases.len());
    for (i, c) in cases.iter().enumerate() {
        let case = parse_case(file, i, c)?;
        let at = format!("{}: case {} (index {i})", file.display(), case.id);
        if let Some(first) = seen.insert(case.id.clone(), i) {
            return Err(CliError::new(format!(
                "{at}: duplicate id (also at index {first})"
            )));
        }
        validate_case(&case).map_err(|m| CliError::new(format!("{at}: {m}")))?;
        out.push(case);
    }
    Ok(out)
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
