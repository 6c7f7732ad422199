//! `efa export`: a paper data set as `efa train` inputs (CSVs, `items.csv`, `model.toml`), so
//! that the user path can be checked against `efa reproduce` (see `efa_paper::export`).

use crate::common::paper;
use crate::CliError;
use clap::{Args, Subcommand};
use efa_paper::options::resolve_data_dir;
use std::path::PathBuf;

/// Arguments of `efa export`.
#[derive(Args)]
pub struct ExportArgs {
    #[command(subcommand)]
    data_set: ExportSet,
    /// Output directory (created if missing; existing files of the export are replaced).
    #[arg(long, global = true)]
    out: Option<PathBuf>,
    /// Data directory (default: ../shared/data).
    #[arg(long, global = true)]
    data: Option<PathBuf>,
    /// Seed of the shuffles and the initialisation (as `efa reproduce --seed`).
    #[arg(long, global = true, default_value_t = 0)]
    seed: u64,
    /// Epochs written into model.toml (default: the paper's recipe).
    #[arg(long, global = true, value_parser = crate::common::at_least_one)]
    epochs: Option<usize>,
}

/// The data sets `efa export` writes.
#[derive(Subcommand)]
enum ExportSet {
    /// U.S. city temperatures (PAPER.md §6): the temperature EFA with coordinates as item
    /// features.
    Temperature {
        /// EFA blocks.
        #[arg(long, default_value_t = 1)]
        layers: usize,
        /// Previous days in the context (0, 1 or 2).
        #[arg(long, default_value_t = 0)]
        lag: usize,
    },
}

/// Runs `efa export`.
pub fn run(a: ExportArgs) -> Result<(), CliError> {
    let out = a
        .out
        .clone()
        .ok_or_else(|| CliError::new("efa export needs --out DIR"))?;
    // Settings are checked before the data are looked for.
    match a.data_set {
        ExportSet::Temperature { layers, lag } => {
            efa_paper::temperature::check_layers(layers).map_err(paper)?;
            efa_paper::temperature::check_lag(lag).map_err(paper)?;
        }
    }
    let dir = resolve_data_dir(a.data.as_ref()).map_err(paper)?;
    let export = match a.data_set {
        ExportSet::Temperature { layers, lag } => {
            efa_paper::export::temperature(&dir, layers, lag, a.epochs, a.seed).map_err(paper)?
        }
    };
    let written = export.write(&out).map_err(paper)?;
    for p in &written {
        outln!("wrote {}", p.display())?;
    }
    Ok(())
}
