//! `efa evaluate`: mean nll of a saved model on a CSV (same layout as `efa train`), summed in
//! batch order so the value does not depend on the thread count.

use crate::common::threads;
use crate::train_cmd::{load_saved, load_split};
use crate::CliError;
use clap::Args;
use efa_model::Objective;
use efa_train::Evaluator;
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
    let threads = threads(args.threads)?;
    let (cfg, count, params) = load_saved(&args.model)?;
    let data = load_split(&args.data, &cfg, &count, &threads)?;
    let family = cfg.family.family();
    let objective = Objective::Nll(family);
    let nll = Evaluator::new(&cfg.model, &objective)
        .with_threads(&threads)
        .evaluate(&params, &data.samples, cfg.train.eval_batch)?;
    let out = serde_json::json!({
        "file": args.data.display().to_string(),
        "samples": data.samples.len(),
        "family": family.name(),
        "mean_nll": nll,
    });
    outln!("{out}")?;
    Ok(())
}
