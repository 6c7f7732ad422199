//! The paper's experiments (docs/paper.md) and the scheduler that runs them.
//!
//! Each experiment loads its data with the paper's exact steps and splits, lists its runs
//! ([`Experiment::grid`]: one [`RunSpec`] per setting × model, each with a typed [`RunKey`]
//! and the paper's figure), trains them through `efa-train` ([`run`]) and analyses the trained
//! runs ([`Experiment::analyse`]). [`runner::run_all`] trains many runs side by side, longest
//! first, each on its own thread pool; the numbers do not depend on which worker ran a run or
//! how many threads it had.
//!
//! ```no_run
//! use efa_paper::prelude::*;
//! // The synthetic experiment (no download): its four runs, trained for 2 epochs.
//! let exp = ExperimentOptions::Synthetic(synthetic::Options::default()).build()?;
//! let settings = RunSettings { epochs: Some(2), ..RunSettings::default() };
//! let specs = exp.runs(&settings)?;
//! assert_eq!(specs.len(), 4);
//! let threads = efa_train::Threads::new(2)?;
//! let (result, _params) = run(&specs[0], &threads, &mut |_| {})?;
//! println!("{} {}: {:.4} (paper {:.3})", result.model, result.setting, result.value, result.paper);
//! # Ok::<(), efa_paper::PaperError>(())
//! ```

#![warn(missing_docs)]

pub mod analysis;
pub mod attention_maps;
mod error;
mod experiment;
pub mod export;
pub mod instacart;
pub mod movielens;
pub mod options;
pub mod paper_data;
pub mod runner;
pub mod synthetic;
pub mod temperature;

pub use analysis::{Analysis, Figure, TrainedRun};
pub use error::{PaperError, NOT_THE_PAPERS};
pub use experiment::{
    batching_for, direction_name, plan_of, run, run_in, Experiment, ModelKind, RunKey, RunResult,
    RunSettings, RunSpec,
};
pub use options::{DataOptions, Directions, Models, Protocol};
pub use paper_data::{DataSet, PaperData};

use clap::Subcommand;
use serde::Serialize;

/// The experiment and its options, one variant per experiment (the `efa reproduce`,
/// `efa bench train` and `efa audit` subcommands).
#[derive(Clone, Debug, Serialize, Subcommand)]
#[serde(tag = "experiment", rename_all = "kebab-case")]
pub enum ExperimentOptions {
    /// Synthetic ratings: 10,000 users × 5 movies with order-dependent rating rules (numpy seed
    /// 42, as the paper); EFA and FM, uni- and bidirectional; no download needed.
    Synthetic(synthetic::Options),
    /// MovieLens-100K exp-1 (docs/paper.md §3): the held-out / next movie as a category.
    MovielensItems(movielens::ItemsOptions),
    /// MovieLens-100K exp-2 (docs/paper.md §4): Poisson ratings, `--variant v1|v2`.
    MovielensRatings(movielens::RatingsOptions),
    /// Instacart baskets (docs/paper.md §5), with bought-together items and attention maps.
    Instacart(instacart::Options),
    /// U.S. city temperatures (docs/paper.md §6): EFA and the k-nearest-city FM.
    Temperature(temperature::Options),
}

impl ExperimentOptions {
    /// Loads the data and builds the experiment.
    pub fn build(&self) -> Result<Box<dyn Experiment>, PaperError> {
        Ok(match self {
            ExperimentOptions::Synthetic(o) => Box::new(synthetic::Synthetic::new(o)?),
            ExperimentOptions::MovielensItems(o) => Box::new(movielens::Items::new(o)?),
            ExperimentOptions::MovielensRatings(o) => Box::new(movielens::Ratings::new(o)?),
            ExperimentOptions::Instacart(o) => Box::new(instacart::Instacart::new(o)?),
            ExperimentOptions::Temperature(o) => Box::new(temperature::Temperature::new(o)?),
        })
    }
}

/// The experiments, their options and the runner in one import: `use efa_paper::prelude::*;`.
pub mod prelude {
    pub use crate::runner::{run_all, RunObserver};
    pub use crate::{
        instacart, movielens, run, synthetic, temperature, Analysis, DataOptions, Directions,
        Experiment, ExperimentOptions, Figure, ModelKind, Models, PaperError, Protocol, RunKey,
        RunResult, RunSettings, RunSpec, TrainedRun,
    };
}
