//! Training settings: the optimizer recipe and how minibatches are formed.

use serde::{Deserialize, Serialize};

/// Training settings (the paper's runs: Adam with Keras's ε placement, lr 1e-4, batch 256).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// Adam learning rate.
    pub lr: f64,
    /// Minibatch size (the last batch of an epoch may be smaller).
    pub batch_size: usize,
    /// Most epochs.
    pub max_epochs: usize,
    /// Early-stopping patience in epochs (Keras 3 semantics).
    pub patience: usize,
    /// Seed of the per-epoch shuffles.
    pub seed: u64,
    /// Batch size for evaluation (the result does not depend on it).
    #[serde(default = "default_eval_batch")]
    pub eval_batch: usize,
    /// How minibatches are formed (the paper: shuffled samples).
    #[serde(default)]
    pub batching: Batching,
}

/// How an epoch's minibatches are formed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Batching {
    /// The paper: shuffle the samples, then cut consecutive minibatches of `batch_size`.
    #[default]
    Samples,
    /// Shuffle the sequences (`Samples::group`), then fill each minibatch with whole
    /// sequences while it holds at most `batch_size` samples (a longer sequence is a minibatch
    /// of its own). Every sample is still seen once per epoch and the loss is still the mean
    /// over the minibatch's samples; only the minibatch composition differs from `Samples`.
    /// Causal EFA models then compute all targets of a sequence in one pass (query stream).
    Sequences,
}

fn default_eval_batch() -> usize {
    1024
}

impl TrainConfig {
    /// The paper's recipe: Adam 1e-4, batch 256, patience 10.
    pub fn paper(max_epochs: usize, seed: u64) -> Self {
        Self {
            lr: 1e-4,
            batch_size: 256,
            max_epochs,
            patience: 10,
            seed,
            eval_batch: 1024,
            batching: Batching::Samples,
        }
    }
}

impl TrainConfig {
    /// Checks the settings, naming the field (`train.<field>`): `lr` finite and positive,
    /// `batch_size`, `eval_batch` and `max_epochs` at least 1. `patience = 0` is accepted and
    /// behaves as 1 (Keras 3: the first epoch without improvement stops training).
    pub fn validate(&self) -> Result<(), crate::TrainError> {
        let bad = |field: &str, why: String| {
            Err(crate::TrainError::config(format!("train.{field}"), why))
        };
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return bad(
                "lr",
                format!("{} must be a finite positive number", self.lr),
            );
        }
        for (field, v) in [
            ("batch_size", self.batch_size),
            ("eval_batch", self.eval_batch),
            ("max_epochs", self.max_epochs),
        ] {
            if v == 0 {
                return bad(field, "0 must be at least 1".into());
            }
        }
        Ok(())
    }
}

impl std::str::FromStr for Batching {
    type Err = String;

    /// A batching by its [`Batching::name`].
    fn from_str(s: &str) -> Result<Self, String> {
        Batching::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| format!("unknown batching `{s}` (samples or sequences)"))
    }
}

impl Batching {
    /// Both batchings.
    pub const ALL: [Batching; 2] = [Batching::Samples, Batching::Sequences];

    /// One line on the batching (for help texts).
    pub fn summary(self) -> &'static str {
        match self {
            Batching::Samples => {
                "the paper: shuffle the samples, then cut consecutive minibatches of batch_size"
            }
            Batching::Sequences => {
                "shuffle the sequences, then fill each minibatch with whole sequences (at most \
                 batch_size samples; a longer sequence is a minibatch of its own)"
            }
        }
    }

    /// `"samples"` or `"sequences"`, as reported in outputs.
    pub fn name(self) -> &'static str {
        match self {
            Batching::Samples => "samples",
            Batching::Sequences => "sequences",
        }
    }
}
