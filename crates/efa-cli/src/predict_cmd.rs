//! `efa predict`: per target row, the natural parameter η, the mean ∇A(η) and the variance
//! (diagonal of ∇²A(η)) under that row's family, as CSV.
//!
//! Columns: `seq,order,item,value,eta,mean,variance` when every family has one natural
//! parameter (with `[[family]]` ranges a `family` column after `value`); otherwise `eta_0..eta_{d−1}, mean_0.., variance_0..` with `d` the widest family's
//! width (Gaussian, Gamma, Beta: two statistics; categorical: one per class), the columns a
//! row's family does not have left empty. Every number (the value read, η, mean, variance) is
//! written in its shortest form that reads back as it ([`written::shortest`]: `1e-50`, not
//! its 52-character decimal), and
//! a sequence id in double quotes where CSV needs them (a comma, a quote, a line break).

use crate::common::threads;
use crate::CliError;
use clap::Args;
use efa_train::run::{load_saved, load_split, read_items, SavedModel};
use efa_train::userdata::report::{predict_rows, RowPrediction};
use efa_train::userdata::{written, Row, UserConfig};
use efa_train::Evaluator;
use ndarray::Array2;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

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
    /// The item-feature CSV the model was trained with (checked against the model's table).
    #[arg(long)]
    items: Option<PathBuf>,
    /// Output CSV (default: standard output).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// Each target row's prediction from the model outputs `z` ([`predict_rows`]); a row whose
/// natural parameter is outside its family's domain is an error naming `file` and its line.
pub(crate) fn predictions(
    file: &Path,
    cfg: &UserConfig,
    targets: &[Row],
    z: &Array2<f64>,
) -> Result<Vec<RowPrediction>, CliError> {
    predict_rows(cfg, targets, z).map_err(|(i, e)| {
        CliError::new(format!(
            "{}:{}: prediction for this row: {e}",
            file.display(),
            targets[i].line
        ))
    })
}

/// Runs `efa predict`.
pub fn run(args: PredictArgs) -> Result<(), CliError> {
    let threads = threads(args.threads)?;
    let items = read_items(args.items.as_deref())?;
    let SavedModel {
        config: cfg,
        count,
        params,
    } = load_saved(&args.model, items.as_ref())?;
    let data = load_split(&args.data, &cfg, &count, &threads, items.as_ref())?;
    let objective = cfg.objective();
    let z = Evaluator::new(&cfg.model, &objective)
        .with_threads(&threads)
        .predict(&params, &data.samples, cfg.train.eval_batch)?;
    // The model's output is unconstrained; the natural parameter is each row's family's link
    // of its leading columns (as in training).
    let preds = predictions(&args.data, &cfg, &data.targets, &z)?;
    let d = cfg
        .family
        .list()
        .iter()
        .map(|f| f.family().eta_dim())
        .max()
        .unwrap_or(1);
    let cols = |name: &str| -> String {
        if d == 1 {
            format!(",{name}")
        } else {
            (0..d).map(|i| format!(",{name}_{i}")).collect()
        }
    };
    let mixed = cfg.family.is_mixed();
    let mut s = format!(
        "seq,order,item,value{}{}{}{}\n",
        if mixed { ",family" } else { "" },
        cols("eta"),
        cols("mean"),
        cols("variance")
    );
    for (row, p) in data.targets.iter().zip(&preds) {
        let value = written::shortest(row.value);
        let seq = csv_field(&row.seq);
        let _ = write!(s, "{seq},{},{},{value}", row.order, row.item);
        if mixed {
            let _ = write!(s, ",{}", p.family.name());
        }
        for part in [&p.eta, &p.mean, &p.variance] {
            for k in 0..d {
                match part.get(k) {
                    Some(&v) => {
                        let _ = write!(s, ",{}", written::shortest(v));
                    }
                    None => s.push(','),
                }
            }
        }
        s.push('\n');
    }
    match &args.out {
        Some(p) => efa_train::fsio::write_atomic(p, s.as_bytes())?,
        None => crate::out::text(&s)?,
    }
    Ok(())
}

/// `field` as one CSV field (RFC 4180, as the data CSV is read): in double quotes, its quotes
/// doubled, when it holds a comma, a quote or a line break; as it is otherwise. A sequence id
/// may be any field the reader accepts, quoted in the input where it needed quotes.
fn csv_field(field: &str) -> std::borrow::Cow<'_, str> {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\"")).into()
    } else {
        field.into()
    }
}
