//! `efa predict`: per target row, the natural parameter η, the mean ∇A(η) and the variance
//! (diagonal of ∇²A(η)) under the model's family, as CSV.
//!
//! Columns: `seq,order,item,value,eta,mean,variance` for one natural parameter; for `d > 1`
//! (Gaussian, Gamma, Beta: t = two statistics; categorical: one per class)
//! `eta_0..eta_{d−1}, mean_0.., variance_0..` (mean and variance of each sufficient statistic).

use crate::common::threads;
use crate::train_cmd::{load_saved, load_split};
use crate::CliError;
use clap::Args;
use efa_model::Objective;
use efa_train::Evaluator;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Arguments of `efa predict`.
#[derive(Args)]
pub struct PredictArgs {
    /// Model directory written by `efa train` (or its model.safetensors).
    #[arg(long)]
    model: PathBuf,
    /// CSV with header `seq,order,item,value` (the value column of a target row is its
    /// observation; it is checked but not used for that row's own prediction).
    #[arg(long)]
    data: PathBuf,
    /// Output CSV (default: standard output).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// Runs `efa predict`.
pub fn run(args: PredictArgs) -> Result<(), CliError> {
    let threads = threads(args.threads)?;
    let (cfg, count, params) = load_saved(&args.model)?;
    let data = load_split(&args.data, &cfg, &count, &threads)?;
    let family = cfg.family.family();
    let objective = Objective::Nll(family);
    let z = Evaluator::new(&cfg.model, &objective)
        .with_threads(&threads)
        .predict(&params, &data.samples, cfg.train.eval_batch)?;
    // The model's output is unconstrained; the natural parameter is its link (as in training).
    let eta = efa_expfam::link::natural_rows(&family, &z);
    let d = family.eta_dim();
    let cols = |name: &str| -> String {
        if d == 1 {
            format!(",{name}")
        } else {
            (0..d).map(|i| format!(",{name}_{i}")).collect()
        }
    };
    let mut s = format!(
        "seq,order,item,value{}{}{}\n",
        cols("eta"),
        cols("mean"),
        cols("variance")
    );
    let mut mean = vec![0.0f64; d];
    let mut hess = vec![0.0f64; d * d];
    for (i, row) in data.targets.iter().enumerate() {
        let e: Vec<f64> = eta.row(i).to_vec();
        let at = |err: efa_expfam::ExpfamError| {
            CliError::new(format!(
                "{}:{}: prediction for this row: {err}",
                args.data.display(),
                row.line
            ))
        };
        family.mean(&e, &mut mean, i).map_err(at)?;
        family.hessian(&e, &mut hess, i).map_err(at)?;
        let _ = write!(s, "{},{},{},{}", row.seq, row.order, row.item, row.value);
        for v in e
            .iter()
            .chain(&mean)
            .chain((0..d).map(|k| &hess[k * d + k]))
        {
            let _ = write!(s, ",{v}");
        }
        s.push('\n');
    }
    match &args.out {
        Some(p) => efa_train::fsio::write_atomic(p, s.as_bytes())?,
        None => crate::out::text(&s)?,
    }
    Ok(())
}
