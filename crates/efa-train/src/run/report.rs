//! The result and timings files of a run: `result.json` holds only what a run reproduces to
//! the bit (the same bytes for the same run on any machine, thread count or number of
//! ranks); wall-clock times go to `timings.json`.

use super::TIMINGS_FILE;
use crate::fsio::write_atomic;
use crate::history::EpochLog;
use crate::userdata::UserConfig;
use crate::TrainError;
use serde::Serialize;
use std::path::Path;

/// An epoch's losses as result files record them (no wall-clock times).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Losses {
    /// 1-based epoch.
    pub epoch: usize,
    /// Mean training loss of the epoch.
    pub train_loss: f64,
    /// Validation loss after the epoch.
    pub val_loss: f64,
}

impl Losses {
    /// The losses of every epoch of `history`.
    pub fn of(history: &[EpochLog]) -> Vec<Losses> {
        history
            .iter()
            .map(|h| Losses {
                epoch: h.epoch,
                train_loss: h.train_loss,
                val_loss: h.val_loss,
            })
            .collect()
    }
}

/// `result.json` of a training run.
#[derive(Clone, Debug, Serialize)]
pub struct TrainReport<'a> {
    /// The run configuration.
    pub config: &'a UserConfig,
    /// Training samples.
    pub train_samples: usize,
    /// Validation samples (the training samples without a validation file).
    pub valid_samples: usize,
    /// Epochs run (all of them, a resumed run's earlier ones included).
    pub epochs: usize,
    /// The epoch whose weights were kept.
    pub best_epoch: usize,
    /// Whether patience ran out before `max_epochs`.
    pub stopped_early: bool,
    /// The best validation loss.
    pub best_valid_nll: f64,
    /// The test loss of the kept weights, with a test file.
    pub test_nll: Option<f64>,
    /// The loss history (wall-clock times are in `timings.json`).
    pub history: Vec<Losses>,
}

impl TrainReport<'_> {
    /// Writes the report as pretty JSON to `path` (atomically).
    pub fn write(&self, path: &Path) -> Result<(), TrainError> {
        write_atomic(path, pretty(path, self)?.as_bytes())
    }
}

/// One run's wall-clock times.
#[derive(Clone, Debug, Serialize)]
pub struct RunTimes<'a> {
    /// The run, e.g. `efa unidirectional` or `train`.
    pub run: String,
    /// Wall time of training and testing.
    pub seconds: f64,
    /// Per-epoch wall time and training samples per second.
    pub epochs: &'a [EpochLog],
}

/// Writes `timings.json` into directory `dir`: each run's wall-clock times, and the job's
/// process count (`ranks`) and threads per process.
pub fn write_timings(
    dir: &Path,
    runs: &[RunTimes<'_>],
    ranks: usize,
    threads: usize,
) -> Result<(), TrainError> {
    let path = dir.join(TIMINGS_FILE);
    let json = serde_json::json!({
        "ranks": ranks,
        "threads_per_rank": threads,
        "runs": runs,
    });
    write_atomic(&path, pretty(&path, &json)?.as_bytes())
}

/// `value` as pretty JSON for the file `path`.
fn pretty<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<String, TrainError> {
    serde_json::to_string_pretty(value).map_err(|e| TrainError::file(path, e.to_string()))
}
