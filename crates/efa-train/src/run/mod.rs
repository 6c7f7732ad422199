//! The run directory: what a training run writes, and how anyone reads it back — the `efa
//! train` command and a library caller alike.
//!
//! A run directory ([`RunDir`]) holds:
//! * `config.toml` ([`CONFIG_FILE`]): a copy of the run configuration;
//! * `checkpoint.safetensors` ([`CHECKPOINT_FILE`]): the training state, written every
//!   `checkpoint_every` epochs and after the last one ([`crate::checkpoint`]);
//! * `model.safetensors` ([`MODEL_FILE`]): the restored best parameters, one f32 tensor per
//!   parameter, the configuration as JSON in metadata [`CONFIG_KEY`] (`efa.config`);
//! * `result.json` ([`RESULT_FILE`]): losses per epoch, best epoch, validation and test loss —
//!   the same bytes for the same run on any machine, thread count or number of ranks;
//! * `timings.json` ([`TIMINGS_FILE`]): wall-clock times, ranks and threads;
//! * `train.lock` ([`LOCK_FILE`]) while a process trains there ([`crate::fsio::runlock`]).
//!
//! [`Run`] is a training run: [`Run::load`] reads and checks the configuration and data
//! ([`RunInputs`]); [`Run::train`] checks a resume completely (checkpoint checksums and state,
//! configuration, training settings, sample counts, the inputs' sizes and CRC-32s, the
//! optimizer's step count) before anything in the run directory is written, then trains,
//! saves the model and writes the result files. [`load_saved`] reads a trained model back.
//!
//! ```no_run
//! use efa_train::run::{load_saved, Run, RunDir, RunInputs, RunOptions};
//! use efa_train::Threads;
//! let threads = Threads::new(2)?;
//! let inputs = RunInputs::new("model.toml", "train.csv");
//! let run = Run::load(&inputs, &threads)?;
//! let trained = run.train(RunOptions::new(RunDir::new("out"), &threads))?;
//! println!("best epoch {}", trained.fit.best_epoch);
//! let saved = load_saved("out".as_ref(), None)?;
//! assert_eq!(saved.config, trained.config);
//! # Ok::<(), efa_train::TrainError>(())
//! ```

mod inputs;
mod model;
mod report;
mod resume;
mod train;

pub use crate::fsio::runlock::LOCK_FILE;
pub use inputs::{
    input_digests, load_split, read_config, read_config_for, read_items, INPUT_DATA, INPUT_VALID,
};
pub use model::{load_saved, model_meta, SavedModel};
pub use report::{write_timings, Losses, RunTimes, TrainReport};
pub use resume::{check_checkpoint, load_checkpoint};
pub use train::{Run, RunInputs, RunOptions, Trained};

use crate::checkpoint::{Checkpoint, CheckpointPolicy};
use crate::fsio::runlock::RunLock;
use crate::fsio::write_atomic;
use crate::userdata::{ItemTable, UserConfig};
use crate::TrainError;
use efa_nn::params::Params;
use std::path::{Path, PathBuf};

/// Metadata key of the JSON run configuration in model and checkpoint files.
pub const CONFIG_KEY: &str = "efa.config";
/// The model file inside a run directory.
pub const MODEL_FILE: &str = "model.safetensors";
/// The checkpoint file inside a run directory.
pub const CHECKPOINT_FILE: &str = "checkpoint.safetensors";
/// The copy of the run configuration inside a run directory.
pub const CONFIG_FILE: &str = "config.toml";
/// The result file (losses, best epoch, validation and test loss).
pub const RESULT_FILE: &str = "result.json";
/// The wall-clock times of a run.
pub const TIMINGS_FILE: &str = "timings.json";

/// A run directory: where each file of a training run lives, and reading and writing them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// The run directory at `root` (nothing is created or read).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        RunDir { root: root.into() }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// `model.safetensors`.
    pub fn model_file(&self) -> PathBuf {
        self.root.join(MODEL_FILE)
    }

    /// `checkpoint.safetensors`.
    pub fn checkpoint_file(&self) -> PathBuf {
        self.root.join(CHECKPOINT_FILE)
    }

    /// `config.toml`.
    pub fn config_file(&self) -> PathBuf {
        self.root.join(CONFIG_FILE)
    }

    /// `result.json`.
    pub fn result_file(&self) -> PathBuf {
        self.root.join(RESULT_FILE)
    }

    /// `timings.json`.
    pub fn timings_file(&self) -> PathBuf {
        self.root.join(TIMINGS_FILE)
    }

    /// Creates the directory (and its parents) if needed.
    pub fn create(&self) -> Result<(), TrainError> {
        std::fs::create_dir_all(&self.root)
            .map_err(|e| TrainError::io(&self.root, "cannot create the output directory", e))
    }

    /// Locks the directory (which must exist) for this process ([`RunLock`]).
    pub fn lock(&self) -> Result<RunLock, TrainError> {
        RunLock::acquire(&self.root)
    }

    /// Writes `config.toml` (atomically).
    pub fn write_config(&self, text: &[u8]) -> Result<(), TrainError> {
        write_atomic(&self.config_file(), text)
    }

    /// Writes `model.safetensors`: `params` with `config` in metadata [`CONFIG_KEY`].
    pub fn save_model(&self, config: &UserConfig, params: &Params<f32>) -> Result<(), TrainError> {
        crate::checkpoint::save_model(&self.model_file(), params, &model_meta(config)?)
    }

    /// Reads `model.safetensors` ([`load_saved`]).
    pub fn load_model(&self, items: Option<&ItemTable>) -> Result<SavedModel, TrainError> {
        load_saved(&self.model_file(), items)
    }

    /// The checkpoints of a run of `config` into this directory, every `every` epochs.
    pub fn checkpoint_policy(
        &self,
        config: &UserConfig,
        every: usize,
    ) -> Result<CheckpointPolicy, TrainError> {
        Ok(CheckpointPolicy {
            path: self.checkpoint_file(),
            every,
            meta: model_meta(config)?,
        })
    }

    /// The checkpoint of this directory, checked against a run of `config` (from the file
    /// `config_file`, if any) on `template`'s parameters ([`load_checkpoint`]).
    pub fn load_checkpoint(
        &self,
        template: &Params<f32>,
        config: &UserConfig,
        config_file: Option<&Path>,
    ) -> Result<Checkpoint, TrainError> {
        load_checkpoint(&self.checkpoint_file(), template, config, config_file)
    }

    /// Writes `result.json` (atomically).
    pub fn write_result(&self, report: &TrainReport<'_>) -> Result<(), TrainError> {
        report.write(&self.result_file())
    }

    /// Writes `timings.json` ([`write_timings`]).
    pub fn write_timings(
        &self,
        runs: &[RunTimes<'_>],
        ranks: usize,
        threads: usize,
    ) -> Result<(), TrainError> {
        write_timings(&self.root, runs, ranks, threads)
    }
}
