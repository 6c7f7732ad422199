//! Minibatch training with Adam, per-epoch validation, Keras-3 early stopping with restore of
//! the best weights, checkpoints and bit-exact resume.
//!
//! The losses and gradients come from [`Evaluator`]; the settings from [`crate::recipe`]; each
//! epoch's minibatches and the starting optimizer from [`crate::schedule`]; the history and
//! early stopping from [`crate::history`]; resuming from [`crate::resume`].

use crate::checkpoint::{Checkpoint, CheckpointPolicy, InputDigest, TrainState};
use crate::collective::Collective;
use crate::evaluator::Evaluator;
use crate::fsio::crc32::{to_hex, Crc32};
use crate::history::{EarlyStopping, EpochLog, FitResult, Verdict};
use crate::recipe::TrainConfig;
use crate::resume::resume;
use crate::schedule::{check_batching, epoch_batches, new_adam};
use crate::TrainError;
use efa_model::batch::SampleSet;
use efa_model::ForwardPlan;
use efa_nn::params::Params;
use ndarray::ArrayD;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::time::Instant;

/// A callback after each epoch (and its checkpoint); an error ends training with it.
pub type EpochHook<'a> = &'a mut dyn FnMut(&EpochLog) -> Result<(), TrainError>;

/// Options of the training loop in [`fit`]: checkpoints, resume and an after-epoch hook
/// (the forward plan, the unused-parameter policy and anomaly mode are the [`Evaluator`]'s).
/// The default trains as the paper's runs did.
#[derive(Default)]
pub struct FitOptions<'a> {
    /// Write a checkpoint every N epochs and after the last one.
    pub checkpoint: Option<CheckpointPolicy>,
    /// Continue from this checkpoint (same data, model and [`TrainConfig`]): the result is
    /// bit-identical to an uninterrupted run with the same seed and thread count.
    pub resume: Option<Checkpoint>,
    /// Called after each epoch and its checkpoint (progress bars; tests use an error to
    /// simulate a crash); an error ends training with that error.
    pub on_epoch: Option<EpochHook<'a>>,
    /// Identities of the run's inputs (e.g. [`InputDigest::of_file`] of the training and
    /// validation files), stored in checkpoints; a resume with other inputs is refused.
    pub inputs: Vec<InputDigest>,
}

/// Trains `params` in place: each epoch reshuffles the training samples from a seeded RNG,
/// takes Adam steps (Keras ε placement) on minibatches, then evaluates the validation split.
/// Early stopping follows Keras 3 (`EarlyStopping(patience, restore_best_weights=True)`): a
/// counter grows every epoch and resets on a strict improvement; training stops when it
/// reaches `patience`; at the end the best weights are restored, also when no early stop
/// happened.
///
/// With a checkpoint policy, the state after epoch `e` (parameters, best parameters, Adam
/// state, shuffle state, early stopping, history) is written when `e % every == 0` and after
/// the last epoch; resuming replays the `e` seeded shuffles to rebuild the generator, then
/// continues with epoch `e + 1`, bit-identical to an uninterrupted run.
pub fn fit(
    eval: &Evaluator<'_>,
    params: &mut Params<f32>,
    train: &dyn SampleSet,
    val: &dyn SampleSet,
    cfg: &TrainConfig,
    mut opts: FitOptions<'_>,
) -> Result<FitResult, TrainError> {
    if train.is_empty() {
        return Err(TrainError::Data(efa_data::DataError::invalid(
            "the training split is empty",
        )));
    }
    if cfg.batch_size == 0 {
        return Err(TrainError::config("train.batch_size", "must be at least 1"));
    }
    check_batching(train, cfg)?;
    if opts.checkpoint.as_ref().is_some_and(|c| c.every == 0) {
        return Err(TrainError::config("checkpoint every", "must be at least 1"));
    }
    let start = Instant::now();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut adam = new_adam(cfg)?;
    let mut order: Vec<usize> = (0..train.len()).collect();
    let mut history = Vec::new();
    let mut stopper = EarlyStopping::new(cfg.patience);
    let mut best_params = params.clone();
    let mut stopped_early = false;
    let mut first_epoch = 1;
    let mut finished = false;
    let mut plan_counts: BTreeMap<ForwardPlan, usize> = BTreeMap::new();
    if let Some(ck) = opts.resume.take() {
        let r = resume(ck, cfg, train, val, &opts.inputs)?;
        (rng, order, adam) = (r.rng, r.order, r.adam);
        (*params, best_params) = (r.params, r.best);
        (stopper, history) = (r.stopper, r.history);
        (stopped_early, finished, first_epoch) = (r.stopped_early, r.finished, r.first_epoch);
    }
    let last_epoch = if finished { 0 } else { cfg.max_epochs };
    // Members of a multi-process job must start from the same state and data.
    let start_state = [
        train.len() as u64,
        val.len() as u64,
        first_epoch as u64,
        history.len() as u64,
    ];
    let extra: Vec<u8> = start_state.iter().flat_map(|x| x.to_le_bytes()).collect();
    check_agreement(eval.group, params, &extra, "at the start")?;
    for epoch in first_epoch..=last_epoch {
        let t0 = Instant::now();
        let (train_loss, plans) = train_epoch(
            eval, params, &mut adam, train, cfg, &mut rng, &mut order,
        )
        .map_err(|e| match e {
            TrainError::NonFinite(m) => TrainError::NonFinite(format!("epoch {epoch}, {m}")),
            e => e,
        })?;
        for (plan, n) in plans {
            *plan_counts.entry(plan).or_default() += n;
        }
        let val_loss = eval
            .evaluate(params, val, cfg.eval_batch)
            .map_err(|e| match e {
                TrainError::NonFinite(m) => {
                    TrainError::NonFinite(format!("epoch {epoch}, validation: {m}"))
                }
                e => e,
            })?;
        // Early stopping cannot compare a loss that is not finite: it would never improve on
        // the weights before the first epoch, and training would end with them.
        if !val_loss.is_finite() {
            return Err(TrainError::NonFinite(format!(
                "epoch {epoch}, validation loss {val_loss}"
            )));
        }
        check_agreement(eval.group, params, &[], &format!("after epoch {epoch}"))?;
        let seconds = t0.elapsed().as_secs_f64();
        let log = EpochLog {
            epoch,
            train_loss,
            val_loss,
            seconds,
            samples_per_s: train.len() as f64 / seconds,
        };
        history.push(log.clone());
        let verdict = stopper.update(epoch, val_loss);
        match verdict {
            Verdict::Improved => best_params.clone_from(params),
            Verdict::Continue => {}
            Verdict::Stop => stopped_early = epoch < cfg.max_epochs,
        }
        let last = verdict == Verdict::Stop || epoch == cfg.max_epochs;
        // In a multi-process job rank 0 writes; every rank holds the same state.
        if let Some(policy) = opts.checkpoint.as_ref().filter(|_| eval.group.rank() == 0) {
            if epoch % policy.every == 0 || last {
                let state = TrainState::capture(
                    cfg,
                    &stopper,
                    &history,
                    (stopped_early, last),
                    (train.len(), val.len()),
                    &opts.inputs,
                );
                let ck = Checkpoint {
                    params: params.clone(),
                    best: best_params.clone(),
                    adam: adam.save(),
                    state,
                    meta: policy.meta.clone(),
                };
                ck.save(&policy.path)?;
            }
        }
        if let Some(hook) = opts.on_epoch.as_mut() {
            hook(&log)?;
        }
        if verdict == Verdict::Stop {
            break;
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
        plans: plan_counts,
    })
}

/// In a multi-process job, checks (`when`: at the start, after an epoch) that every member
/// holds the same parameters and `extra` (their CRC-32 over the f32 bytes in declaration
/// order, then `extra`): members that read different data or checkpoints, or computed
/// different bits (different SIMD levels or binaries), are stopped with an error naming the
/// member, instead of training on silently different states.
fn check_agreement(
    group: &dyn Collective,
    params: &Params<f32>,
    extra: &[u8],
    when: &str,
) -> Result<(), TrainError> {
    if group.size() <= 1 {
        return Ok(());
    }
    let mut c = Crc32::new();
    c.update(extra);
    for (_, v) in params.iter() {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        c.update(&bytes);
    }
    let mine = c.finish();
    let all = group.all_gather(mine.to_le_bytes().to_vec())?;
    let crc = |b: &[u8]| b.try_into().map(u32::from_le_bytes).unwrap_or(0);
    let first = crc(&all[0]);
    match all.iter().position(|b| crc(b) != first) {
        None => Ok(()),
        Some(rank) => Err(TrainError::Rank {
            rank,
            message: format!(
                "{when} its parameters or data differ from rank 0's (CRC-32 {} against {}): \
                 every rank must read the same files and compute the same bits; run every \
                 rank with the same efa binary and the same SIMD level (set EFA_SIMD=avx2, \
                 avx512 or scalar on every node)",
                to_hex(crc(&all[rank])),
                to_hex(first)
            ),
        }),
    }
}

/// One training epoch: minibatches from [`epoch_batches`], a gradient and an Adam step each.
/// Returns the sample-weighted mean of the minibatch losses and how many micro-batches each
/// forward plan computed.
pub fn train_epoch(
    eval: &Evaluator<'_>,
    params: &mut Params<f32>,
    adam: &mut efa_optim::Adam<f32>,
    train: &dyn SampleSet,
    cfg: &TrainConfig,
    rng: &mut StdRng,
    order: &mut [usize],
) -> Result<(f64, BTreeMap<ForwardPlan, usize>), TrainError> {
    let batches = epoch_batches(train, cfg, rng, order)?;
    let n_batches = batches.len();
    let mut sum = 0.0;
    let mut plans: BTreeMap<ForwardPlan, usize> = BTreeMap::new();
    for (b, chunk) in batches.iter().enumerate() {
        let g = eval
            .loss_and_grads_at(params, train, chunk)
            .map_err(|e| match e {
                TrainError::NonFinite(m) => {
                    TrainError::NonFinite(format!("{m} at batch {} of {n_batches}", b + 1))
                }
                e if eval.detect_anomaly => {
                    TrainError::NonFinite(format!("batch {} of {n_batches}: {e}", b + 1))
                }
                e => e,
            })?;
        let (loss, grads) = (g.loss, g.grads);
        for (plan, n) in g.plans {
            *plans.entry(plan).or_default() += n;
        }
        if !loss.is_finite() {
            return Err(TrainError::NonFinite(format!(
                "training loss {loss} at batch {} of {n_batches}",
                b + 1
            )));
        }
        sum += loss * chunk.len() as f64;
        adam_step(adam, params, &grads)?;
        for g in grads {
            efa_num::pool::give_array(g);
        }
    }
    Ok((sum / train.len() as f64, plans))
}

/// One Adam step over every parameter, addressed by name.
fn adam_step(
    adam: &mut efa_optim::Adam<f32>,
    params: &mut Params<f32>,
    grads: &[ArrayD<f32>],
) -> Result<(), TrainError> {
    let step = |source| TrainError::Optim {
        during: "step",
        source,
    };
    let mut list = Vec::with_capacity(grads.len());
    for ((name, value), grad) in params.iter_mut().zip(grads) {
        list.push(efa_optim::Param::from_array(name, value, Some(grad)).map_err(step)?);
    }
    adam.step(&mut list).map_err(step)?;
    Ok(())
}
