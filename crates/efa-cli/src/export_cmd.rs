//! `efa export`: a paper data set as `efa train` inputs (CSVs, `items.csv`, `model.toml`), so
//! that the user path can be checked against `efa reproduce` (see `efa_paper::export`).

use crate::common::paper;
use crate::CliError;
use clap::{Args, Subcommand};
use efa_paper::movielens::Variant;
use efa_paper::options::resolve_data_dir;
use efa_paper::{DataSet, Protocol};
use efa_train::userdata::Direction;
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
    /// Export data files other than the paper's (another size or SHA-256), which are refused
    /// otherwise; model.toml is then marked as not the paper's data.
    #[arg(long, global = true)]
    allow_other_data: bool,
}

/// The data sets `efa export` writes.
#[derive(Subcommand)]
enum ExportSet {
    /// U.S. city temperatures (docs/paper.md §6): the temperature EFA with coordinates as item
    /// features.
    Temperature {
        /// EFA blocks.
        #[arg(long, default_value_t = 1)]
        layers: usize,
        /// Previous days in the context (0, 1 or 2).
        #[arg(long, default_value_t = 0)]
        lag: usize,
    },
    /// MovieLens exp-2 (docs/paper.md §4): the rating EFA with the v1 loss on counts (rating − 1),
    /// one sequence per sample in the paper's sample order.
    MovielensRatings {
        /// Loss variant (only v1 has a user layout; see `efa_paper::export`).
        #[arg(long, value_enum, default_value_t = Variant::V1)]
        variant: Variant,
        /// Context of a target: every other movie of the user (bi) or the earlier ones (uni).
        #[arg(long, value_enum, default_value_t = ExportDirection::Bi)]
        direction: ExportDirection,
        /// Split protocol.
        #[arg(long, value_enum, default_value_t = Protocol::Paper)]
        protocol: Protocol,
    },
}

/// The direction of an exported rating model.
#[derive(Clone, Copy, clap::ValueEnum)]
enum ExportDirection {
    /// Bidirectional.
    Bi,
    /// Unidirectional.
    Uni,
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
        ExportSet::MovielensRatings { variant, .. } => {
            if variant != Variant::V1 {
                return Err(paper(efa_paper::export::variant_error(variant)));
            }
        }
    }
    let dir = resolve_data_dir(a.data.as_ref()).map_err(paper)?;
    let set = match a.data_set {
        ExportSet::Temperature { .. } => DataSet::Temperature,
        ExportSet::MovielensRatings { .. } => DataSet::Movielens,
    };
    let source = efa_paper::paper_data::verify(&dir, set, a.allow_other_data).map_err(paper)?;
    for m in &source.other {
        errln!("warning: {m}: not the paper's file (--allow-other-data); model.toml says so");
    }
    let mut export = match a.data_set {
        ExportSet::Temperature { layers, lag } => {
            efa_paper::export::temperature(&dir, layers, lag, a.epochs, a.seed).map_err(paper)?
        }
        ExportSet::MovielensRatings {
            variant,
            direction,
            protocol,
        } => {
            let direction = match direction {
                ExportDirection::Bi => Direction::Bi,
                ExportDirection::Uni => Direction::Uni,
            };
            efa_paper::export::movielens_ratings(
                &dir, variant, direction, protocol, a.epochs, a.seed,
            )
            .map_err(paper)?
        }
    };
    export.mark_other_data(&source.other);
    let written = export.write(&out).map_err(paper)?;
    for p in &written {
        outln!("wrote {}", p.display())?;
    }
    Ok(())
}
