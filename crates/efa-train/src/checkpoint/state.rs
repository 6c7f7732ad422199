//! The training state stored in a checkpoint (metadata `efa.state`, JSON), and its internal
//! consistency check.
//!
//! Every float is stored as its IEEE-754 bit pattern, so a resumed run is bit-exact.
//! [`TrainState::validate`] checks that the counters, the early-stopping monitor and the
//! history agree with each other and with the stored [`TrainConfig`]: it replays Keras-3 early
//! stopping over the stored validation losses and requires the same best loss, best epoch,
//! wait counter and end of training. [`crate::resume::check_resume`] then compares the state
//! with the run that wants to continue it.

use crate::history::{EarlyStopping, EpochLog, Verdict};
use crate::recipe::TrainConfig;
use serde::{Deserialize, Serialize};

/// The state of the epoch shuffle: [`crate::fit::fit`] draws each epoch's order from one
/// `StdRng` seeded with `seed`, shuffling the previous order in place, so the generator and
/// the order after `shuffles` epochs are rebuilt exactly by replaying that many shuffles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShuffleState {
    /// Seed of the generator (`TrainConfig::seed`).
    pub seed: u64,
    /// Epoch shuffles drawn so far.
    pub shuffles: usize,
}

/// One epoch of history with every float as its bit pattern.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpochBits {
    /// 1-based epoch.
    pub epoch: usize,
    /// `train_loss.to_bits()`.
    pub train_loss: u64,
    /// `val_loss.to_bits()`.
    pub val_loss: u64,
    /// `seconds.to_bits()`.
    pub seconds: u64,
    /// `samples_per_s.to_bits()`.
    pub samples_per_s: u64,
}

impl EpochBits {
    /// Bit-exact copy of a log entry.
    pub fn from_log(l: &EpochLog) -> Self {
        Self {
            epoch: l.epoch,
            train_loss: l.train_loss.to_bits(),
            val_loss: l.val_loss.to_bits(),
            seconds: l.seconds.to_bits(),
            samples_per_s: l.samples_per_s.to_bits(),
        }
    }

    /// The log entry back.
    pub fn to_log(&self) -> EpochLog {
        EpochLog {
            epoch: self.epoch,
            train_loss: f64::from_bits(self.train_loss),
            val_loss: f64::from_bits(self.val_loss),
            seconds: f64::from_bits(self.seconds),
            samples_per_s: f64::from_bits(self.samples_per_s),
        }
    }
}

/// The identity of one input of a run (e.g. the training file): its role, its size and the
/// CRC-32 ([`crate::fsio::crc32`]) of its bytes. A resume must see the same inputs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputDigest {
    /// What the input is for (`"train"`, `"valid"`).
    pub role: String,
    /// Size in bytes.
    pub bytes: u64,
    /// CRC-32 of the bytes.
    pub crc32: u32,
}

impl InputDigest {
    /// The digest of a file's contents under `role`; an unreadable file is an error naming it.
    pub fn of_file(role: &str, path: &std::path::Path) -> Result<Self, crate::TrainError> {
        let (bytes, crc32) = crate::fsio::crc32::file_crc32(path)
            .map_err(|e| crate::TrainError::io(path, "cannot read", e))?;
        Ok(InputDigest {
            role: role.to_string(),
            bytes,
            crc32,
        })
    }

    /// `"<bytes> bytes with CRC-32 <8 hex digits>"`, for messages.
    pub fn describe(&self) -> String {
        format!(
            "{} bytes with CRC-32 {}",
            self.bytes,
            crate::fsio::crc32::to_hex(self.crc32)
        )
    }
}

/// Everything besides tensors that a resumed run needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainState {
    /// Epochs completed.
    pub epoch: usize,
    /// Shuffle generator state.
    pub shuffle: ShuffleState,
    /// Early stopping: patience, best loss bits, best epoch, wait counter.
    pub patience: usize,
    /// `best.to_bits()` of the early-stopping monitor.
    pub best_bits: u64,
    /// Epoch of the best validation loss.
    pub best_epoch: usize,
    /// Epochs since the last improvement.
    pub wait: usize,
    /// Loss history so far.
    pub history: Vec<EpochBits>,
    /// Whether patience ran out before `max_epochs`.
    pub stopped_early: bool,
    /// Whether training is over (stopped early or reached `max_epochs`).
    pub finished: bool,
    /// Training settings of the run (a resume must use the same).
    pub train: TrainConfig,
    /// Number of training samples (a resume must use the same data).
    pub n_train: usize,
    /// Number of validation samples.
    pub n_val: usize,
    /// Identities of the run's inputs ([`crate::fit::FitOptions::inputs`]).
    pub inputs: Vec<InputDigest>,
}

impl TrainState {
    /// The state after the last epoch of `history`: the shuffles taken, the early-stopping
    /// monitor, `(stopped_early, finished)`, `(n_train, n_val)` samples and the run's inputs.
    pub fn capture(
        cfg: &TrainConfig,
        stopper: &EarlyStopping,
        history: &[EpochLog],
        (stopped_early, finished): (bool, bool),
        (n_train, n_val): (usize, usize),
        inputs: &[InputDigest],
    ) -> Self {
        let epoch = history.len();
        TrainState {
            epoch,
            shuffle: ShuffleState {
                seed: cfg.seed,
                shuffles: epoch,
            },
            patience: stopper.patience,
            best_bits: stopper.best.to_bits(),
            best_epoch: stopper.best_epoch,
            wait: stopper.wait,
            history: history.iter().map(EpochBits::from_log).collect(),
            stopped_early,
            finished,
            train: cfg.clone(),
            n_train,
            n_val,
            inputs: inputs.to_vec(),
        }
    }

    /// The early-stopping monitor back.
    pub fn stopper(&self) -> EarlyStopping {
        EarlyStopping {
            patience: self.patience,
            best: f64::from_bits(self.best_bits),
            best_epoch: self.best_epoch,
            wait: self.wait,
        }
    }

    /// Checks the state against itself: `1 ≤ epoch ≤ train.max_epochs`, one history entry per
    /// epoch numbered `1..=epoch` with finite training losses, `shuffle` = (`train.seed`,
    /// `epoch`), `patience = train.patience`, `best_epoch ≤ epoch`, and `best_bits`,
    /// `best_epoch`, `wait`, `stopped_early`, `finished` equal to what early stopping gives
    /// when replayed over the history's validation losses (so `wait ≤ patience`, or
    /// `patience + 1` after a NaN first epoch). The error names the field.
    pub fn validate(&self) -> Result<(), String> {
        let t = &self.train;
        if self.epoch == 0 {
            return Err(
                "field `epoch` = 0, but a checkpoint is written after an epoch (at least 1)".into(),
            );
        }
        if self.epoch > t.max_epochs {
            return Err(format!(
                "field `epoch` = {} is beyond `train.max_epochs` = {}",
                self.epoch, t.max_epochs
            ));
        }
        if self.history.len() != self.epoch {
            return Err(format!(
                "field `history` has {} entries but `epoch` = {}",
                self.history.len(),
                self.epoch
            ));
        }
        for (i, h) in self.history.iter().enumerate() {
            if h.epoch != i + 1 {
                return Err(format!(
                    "field `history[{i}].epoch` = {}, expected {}",
                    h.epoch,
                    i + 1
                ));
            }
            let loss = f64::from_bits(h.train_loss);
            if !loss.is_finite() {
                return Err(format!(
                    "field `history[{i}].train_loss` = {loss}: training stops at a non-finite loss"
                ));
            }
        }
        if self.shuffle.seed != t.seed {
            return Err(format!(
                "field `shuffle.seed` = {} differs from `train.seed` = {}",
                self.shuffle.seed, t.seed
            ));
        }
        if self.shuffle.shuffles != self.epoch {
            return Err(format!(
                "field `shuffle.shuffles` = {} differs from `epoch` = {}",
                self.shuffle.shuffles, self.epoch
            ));
        }
        if self.patience != t.patience {
            return Err(format!(
                "field `patience` = {} differs from `train.patience` = {}",
                self.patience, t.patience
            ));
        }
        if self.best_epoch > self.epoch {
            return Err(format!(
                "field `best_epoch` = {} is beyond `epoch` = {}",
                self.best_epoch, self.epoch
            ));
        }
        // Replay early stopping over the stored validation losses.
        let mut es = EarlyStopping::new(self.patience);
        let mut stop_at = None;
        for h in &self.history {
            if es.update(h.epoch, f64::from_bits(h.val_loss)) == Verdict::Stop {
                stop_at = Some(h.epoch);
                break;
            }
        }
        if let Some(e) = stop_at.filter(|&e| e < self.epoch) {
            return Err(format!(
                "field `history`: early stopping ends the run at epoch {e}, but the history \
                 goes on to epoch {}",
                self.epoch
            ));
        }
        if es.best_epoch != self.best_epoch {
            return Err(format!(
                "field `best_epoch` = {}, but the history's best validation loss is at epoch {}",
                self.best_epoch, es.best_epoch
            ));
        }
        if es.best.to_bits() != self.best_bits {
            return Err(format!(
                "field `best_bits` = {} ({}), but the history's best validation loss is {}",
                self.best_bits,
                f64::from_bits(self.best_bits),
                es.best
            ));
        }
        if es.wait != self.wait {
            return Err(format!(
                "field `wait` = {}, but the history gives {} epochs since the best",
                self.wait, es.wait
            ));
        }
        let stopped = stop_at.is_some();
        let finished = stopped || self.epoch == t.max_epochs;
        if self.finished != finished {
            return Err(format!(
                "field `finished` = {}, but after epoch {} of {} the run is {}",
                self.finished,
                self.epoch,
                t.max_epochs,
                if finished { "over" } else { "not over" }
            ));
        }
        let early = stopped && self.epoch < t.max_epochs;
        if self.stopped_early != early {
            return Err(format!(
                "field `stopped_early` = {}, but the history says {early}",
                self.stopped_early
            ));
        }
        Ok(())
    }
}
