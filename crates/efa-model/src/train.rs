//! Minibatch training with Adam, per-epoch validation, Keras-3 early stopping with restore of
//! the best weights, and exact evaluation over a whole split.

use crate::batch::Samples;
use crate::objective::Objective;
use crate::params::Params;
use crate::{register, ModelConfig, ModelError};
use efa_num::Real;
use efa_tape::Tape;
use ndarray::ArrayD;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::time::Instant;

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
}

fn default_eval_batch() -> usize {
    1024
}

impl TrainConfig {
    /// The paper's recipe: Adam 1e-4, batch 256, patience 10.
    pub fn paper(max_epochs: usize, seed: u64) -> Self {
        Self { lr: 1e-4, batch_size: 256, max_epochs, patience: 10, seed, eval_batch: 1024 }
    }
}

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
        Self { patience, best: f64::INFINITY, best_epoch: 0, wait: 0 }
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

/// Mean loss of one minibatch and the gradient of every parameter, in parameter order.
pub fn loss_and_grads<T: Real>(
    model: &ModelConfig,
    objective: &Objective,
    params: &Params<T>,
    batch: &Samples,
) -> Result<(f64, Vec<ArrayD<T>>), ModelError> {
    let mut tape = Tape::new();
    let vars = register(&mut tape, params)?;
    let eta = model.forward(&mut tape, &vars, batch)?;
    let loss = objective.loss(&mut tape, eta, &batch.targets)?;
    let value = tape.value(loss).iter().next().map_or(f64::NAN, |v| v.to_f64());
    let grads = tape.backward(loss)?;
    let mut out = Vec::with_capacity(params.len());
    for (name, p) in params.iter() {
        let g = grads
            .param(name)
            .ok_or_else(|| ModelError::MissingParam(format!("{name} (no gradient)")))?;
        debug_assert_eq!(g.shape(), p.shape());
        out.push(g.clone());
    }
    Ok((value, out))
}

/// Mean loss of one minibatch (forward only).
pub fn batch_loss<T: Real>(
    model: &ModelConfig,
    objective: &Objective,
    params: &Params<T>,
    batch: &Samples,
) -> Result<f64, ModelError> {
    let mut tape = Tape::new();
    let vars = register(&mut tape, params)?;
    let eta = model.forward(&mut tape, &vars, batch)?;
    let loss = objective.loss(&mut tape, eta, &batch.targets)?;
    Ok(tape.value(loss).iter().next().map_or(f64::NAN, |v| v.to_f64()))
}

/// η `[n, width]` for every sample of a split (forward only), as f64.
pub fn predict<T: Real>(
    model: &ModelConfig,
    params: &Params<T>,
    samples: &Samples,
    batch_size: usize,
) -> Result<ndarray::Array2<f64>, ModelError> {
    let n = samples.len();
    let chunks: Vec<Vec<usize>> = (0..n).collect::<Vec<_>>().chunks(batch_size.max(1)).map(|c| c.to_vec()).collect();
    let parts: Result<Vec<ndarray::Array2<f64>>, ModelError> = chunks
        .par_iter()
        .map(|idx| {
            let batch = samples.select(idx);
            let mut tape = Tape::new();
            let vars = register(&mut tape, params)?;
            let eta = model.forward(&mut tape, &vars, &batch)?;
            let v = tape.value(eta);
            let width = v.shape()[1];
            Ok(ndarray::Array2::from_shape_fn((idx.len(), width), |(i, j)| v[[i, j]].to_f64()))
        })
        .collect();
    let parts = parts?;
    let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
    if views.is_empty() {
        return Ok(ndarray::Array2::zeros((0, 1)));
    }
    ndarray::concatenate(ndarray::Axis(0), &views).map_err(|e| ModelError::Batch(e.to_string()))
}

/// Exact mean loss over a whole split: Σ_batches (batch mean × batch size) / n, accumulated
/// in f64 in batch order (so the result does not depend on the thread count).
pub fn evaluate<T: Real>(
    model: &ModelConfig,
    objective: &Objective,
    params: &Params<T>,
    samples: &Samples,
    batch_size: usize,
) -> Result<f64, ModelError> {
    let n = samples.len();
    if n == 0 {
        return Err(ModelError::Batch("cannot evaluate on an empty split".into()));
    }
    let idx: Vec<usize> = (0..n).collect();
    let chunks: Vec<&[usize]> = idx.chunks(batch_size.max(1)).collect();
    let sums: Result<Vec<f64>, ModelError> = chunks
        .par_iter()
        .map(|c| Ok(batch_loss(model, objective, params, &samples.select(c))? * c.len() as f64))
        .collect();
    Ok(sums?.iter().sum::<f64>() / n as f64)
}

/// Trains `params` in place: each epoch reshuffles the training samples from a seeded RNG,
/// takes Adam steps (Keras ε placement) on minibatches, then evaluates the validation split.
/// Early stopping follows Keras 3 (`EarlyStopping(patience, restore_best_weights=True)`): a
/// counter grows every epoch and resets on a strict improvement; training stops when it reaches
/// `patience`; at the end the best weights are restored, also when no early stop happened.
/// `observer` sees every epoch (for progress bars).
pub fn fit(
    model: &ModelConfig,
    objective: &Objective,
    params: &mut Params<f32>,
    train: &Samples,
    val: &Samples,
    cfg: &TrainConfig,
    observer: &mut dyn FnMut(&EpochLog),
) -> Result<FitResult, ModelError> {
    if train.is_empty() {
        return Err(ModelError::Batch("the training split is empty".into()));
    }
    if cfg.batch_size == 0 {
        return Err(ModelError::Config("train config field `batch_size` must be at least 1".into()));
    }
    let start = Instant::now();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut adam = efa_optim::Adam::<f32>::new(efa_optim::AdamConfig::keras(cfg.lr))
        .map_err(|e| ModelError::Optim(e.to_string()))?;
    let mut order: Vec<usize> = (0..train.len()).collect();
    let mut history = Vec::new();
    let mut stopper = EarlyStopping::new(cfg.patience);
    let mut best_params = params.clone();
    let mut stopped_early = false;
    for epoch in 1..=cfg.max_epochs {
        let t0 = Instant::now();
        order.shuffle(&mut rng);
        let mut sum = 0.0;
        for chunk in order.chunks(cfg.batch_size) {
            let batch = train.select(chunk);
            let (loss, grads) = loss_and_grads(model, objective, params, &batch)?;
            if !loss.is_finite() {
                return Err(ModelError::NonFinite(format!("training loss {loss} at epoch {epoch}")));
            }
            sum += loss * chunk.len() as f64;
            adam_step(&mut adam, params, &grads)?;
        }
        let train_loss = sum / train.len() as f64;
        let val_loss = evaluate(model, objective, params, val, cfg.eval_batch)?;
        let seconds = t0.elapsed().as_secs_f64();
        let log = EpochLog { epoch, train_loss, val_loss, seconds, samples_per_s: train.len() as f64 / seconds };
        observer(&log);
        history.push(log);
        match stopper.update(epoch, val_loss) {
            Verdict::Improved => best_params.clone_from(params),
            Verdict::Continue => {}
            Verdict::Stop => {
                stopped_early = epoch < cfg.max_epochs;
                break;
            }
        }
    }
    let epochs = history.len();
    *params = best_params;
    Ok(FitResult {
        history,
        best_epoch: stopper.best_epoch,
        best_val: stopper.best,
        epochs,
        stopped_early,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// One Adam step over every parameter, addressed by name.
fn adam_step(adam: &mut efa_optim::Adam<f32>, params: &mut Params<f32>, grads: &[ArrayD<f32>]) -> Result<(), ModelError> {
    let mut list = Vec::with_capacity(grads.len());
    for ((name, value), grad) in params.iter_mut().zip(grads) {
        list.push(efa_optim::Param::from_array(name, value, Some(grad)).map_err(|e| ModelError::Optim(e.to_string()))?);
    }
    adam.step(&mut list).map_err(|e| ModelError::Optim(e.to_string()))?;
    Ok(())
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
            let loss = if epoch <= 77 { 10.0 - epoch as f64 * 0.01 } else { 9.5 };
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
