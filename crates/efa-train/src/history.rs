//! What training records: the loss history, the run's result and Keras-3 early stopping.

use serde::{Deserialize, Serialize};

/// One epoch of the loss history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpochLog {
    /// 1-based epoch number.
    pub epoch: usize,
    /// Sample-weighted mean of the minibatch losses seen during the epoch.
    pub train_loss: f64,
    /// Exact mean loss over the validation split after the epoch.
    pub val_loss: f64,
    /// Wall time of the epoch (training and validation).
    pub seconds: f64,
    /// Training samples per second.
    pub samples_per_s: f64,
}

/// What a training run did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FitResult {
    /// Loss history.
    pub history: Vec<EpochLog>,
    /// Epoch (1-based) of the best validation loss; its weights were restored.
    pub best_epoch: usize,
    /// Best validation loss.
    pub best_val: f64,
    /// Epochs run.
    pub epochs: usize,
    /// Whether patience ran out before `max_epochs`.
    pub stopped_early: bool,
    /// Wall time.
    pub seconds: f64,
    /// How many micro-batch forwards each plan computed (`"tabled"`, `"query-stream"`, …), so
    /// a reader sees which code ran.
    #[serde(default)]
    pub plans: std::collections::BTreeMap<efa_model::ForwardPlan, usize>,
}

/// What [`EarlyStopping::update`] decided after an epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A new best validation loss: keep these weights.
    Improved,
    /// No improvement, patience left.
    Continue,
    /// Patience exhausted: stop training.
    Stop,
}

/// Keras 3 `EarlyStopping(monitor="val_loss", min_delta=0, patience)`: a counter grows by one
/// every epoch and resets on a strict improvement; training stops when it reaches `patience`.
#[derive(Clone, Debug, PartialEq)]
pub struct EarlyStopping {
    /// Epochs without improvement allowed.
    pub patience: usize,
    /// Best loss so far (+∞ before the first epoch).
    pub best: f64,
    /// Epoch of `best` (0 before the first epoch).
    pub best_epoch: usize,
    /// Epochs since the last improvement.
    pub wait: usize,
}

impl EarlyStopping {
    /// A fresh monitor.
    pub fn new(patience: usize) -> Self {
        Self {
            patience,
            best: f64::INFINITY,
            best_epoch: 0,
            wait: 0,
        }
    }

    /// Records the validation loss of `epoch` (1-based). A NaN loss never improves.
    /// As in Keras, the first epoch never stops training.
    pub fn update(&mut self, epoch: usize, val_loss: f64) -> Verdict {
        self.wait += 1;
        if val_loss < self.best {
            self.best = val_loss;
            self.best_epoch = epoch;
            self.wait = 0;
            Verdict::Improved
        } else if self.wait >= self.patience && epoch > 1 {
            // Keras never stops after the first epoch (`epoch > 0`, 0-based).
            Verdict::Stop
        } else {
            Verdict::Continue
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn early_stopping_follows_keras_3() {
        // Improvements at epochs 1..=77 (strictly decreasing), then flat: Keras stops at 87
        // (the paper's unidirectional EFA log: best 77, stopped after 87 epochs).
        let mut es = EarlyStopping::new(10);
        let mut stop = None;
        for epoch in 1..=200 {
            let loss = if epoch <= 77 {
                10.0 - epoch as f64 * 0.01
            } else {
                9.5
            };
            if es.update(epoch, loss) == Verdict::Stop {
                stop = Some(epoch);
                break;
            }
        }
        assert_eq!(stop, Some(87));
        assert_eq!(es.best_epoch, 77);
        // An equal loss is not an improvement (min_delta 0, strict), NaN never improves.
        let mut es = EarlyStopping::new(2);
        assert_eq!(es.update(1, 1.0), Verdict::Improved);
        assert_eq!(es.update(2, 1.0), Verdict::Continue);
        assert_eq!(es.update(3, f64::NAN), Verdict::Stop);
        assert_eq!((es.best, es.best_epoch), (1.0, 1));
        // Patience 1 stops at the first epoch without improvement.
        let mut es = EarlyStopping::new(1);
        assert_eq!(es.update(1, 2.0), Verdict::Improved);
        assert_eq!(es.update(2, 1.0), Verdict::Improved);
        assert_eq!(es.update(3, 1.5), Verdict::Stop);
        // ... but not after the first epoch.
        let mut es = EarlyStopping::new(1);
        assert_eq!(es.update(1, f64::NAN), Verdict::Continue);
    }
}
