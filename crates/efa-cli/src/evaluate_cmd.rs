//! `efa evaluate`: mean nll of a saved model on a CSV (same layout as `efa train`), summed in
//! batch order so the value does not depend on the thread count, and per family.

use crate::common::threads;
use crate::CliError;
use clap::Args;
use efa_train::run::{load_saved, load_split, read_items, SavedModel};
use efa_train::userdata::diagnose::check_split_loss;
use efa_train::userdata::report::family_reports;
use efa_train::Evaluator;
use std::path::PathBuf;

/// Arguments of `efa evaluate`.
#[derive(Args)]
pub struct EvaluateArgs {
    /// Model directory written by `efa train` (or its model.safetensors).
    #[arg(long)]
    model: PathBuf,
    /// CSV with header `seq,order,item,value` (optionally `lag`, `target`).
    #[arg(long)]
    data: PathBuf,
    /// The item-feature CSV the model was trained with (checked against the model's table).
    #[arg(long)]
    items: Option<PathBuf>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// Runs `efa evaluate`: prints `{"file": …, "samples": n, "family": …, "loss": …,
/// "mean_nll": x, "families": [{"family", "items", "samples", "mean_nll", "mse_of_mean"}]}`.
///
/// `mean_nll` is the training objective over all target rows in the training dtype (for the
/// default loss the mean nll; bit for bit train's `test_nll`); each family's `mean_nll` is
/// the fully normalised nll in f64 of its rows, and Gaussian families add the mean squared
/// error of the predicted mean.
pub fn run(args: EvaluateArgs) -> Result<(), CliError> {
    let threads = threads(args.threads)?;
    let items = read_items(args.items.as_deref())?;
    let SavedModel {
        config: cfg,
        count,
        params,
    } = load_saved(&args.model, items.as_ref())?;
    let data = load_split(&args.data, &cfg, &count, &threads, items.as_ref())?;
    let objective = cfg.objective();
    let eval = Evaluator::new(&cfg.model, &objective).with_threads(&threads);
    let nll = eval.evaluate(&params, &data.samples, cfg.train.eval_batch)?;
    // A mean that is not finite would be written as JSON `null`: an error naming the sample.
    let nll = check_split_loss(nll, "evaluation", &eval, &params, &data, &cfg)?;
    let z = eval.predict(&params, &data.samples, cfg.train.eval_batch)?;
    let preds = crate::predict_cmd::predictions(&args.data, &cfg, &data.targets, &z)?;
    let families = family_reports(&cfg, &data.targets, &preds);
    let out = serde_json::json!({
        "file": args.data.display().to_string(),
        "samples": data.samples.len(),
        "family": cfg.family.describe(),
        "loss": cfg.loss.name(),
        "mean_nll": nll,
        "families": families,
    });
    outln!("{out}")?;
    Ok(())
}
