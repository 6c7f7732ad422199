//! `efa evaluate`: mean nll of a saved model on a CSV (same layout as `efa train`), summed in
//! batch order so the value does not depend on the thread count.

use crate::common::{set_threads, user};
use crate::train_cmd::{load_saved, load_split};
use crate::CliError;
use clap::Args;
use efa_model::{Evaluator, Objective};
use std::path::PathBuf;

/// Arguments of `efa evaluate`.
#[derive(Args)]
pub struct EvaluateArgs {
    /// Model directory written by `efa train` (or its model.safetensors).
    #[arg(long)]
    model: PathBuf,
    /// CSV with header `seq,order,item,value`.
    #[arg(long)]
    data: PathBuf,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// Runs `efa evaluate`: prints `{"file": …, "samples": n, "family": …, "mean_nll": x}`.
pub fn run(args: EvaluateArgs) -> Result<(), CliError> {
    set_threads(args.threads)?;
    let (cfg, params) = load_saved(&args.model)?;
    let data = load_split(&args.data, &cfg)?;
    let family = cfg.family.family();
    let objective = Objective::Nll(family);
    let nll = Evaluator::new(&cfg.model, &objective)
        .evaluate(&params, &data.samples, cfg.train.eval_batch)
        .map_err(user)?;
    let out = serde_json::json!({
        "file": args.data.display().to_string(),
        "samples": data.samples.len(),
        "family": family.name(),
        "mean_nll": nll,
    });
    outln!("{out}")?;
    Ok(())
}
