//! Minibatch training with Adam, per-epoch validation, Keras-3 early stopping with restore of
//! the best weights, checkpoints and bit-exact resume.
//!
//! The losses and gradients come from [`Evaluator`]; the settings from [`crate::recipe`]; the
//! history and early stopping from [`crate::history`]. Their items are re-exported here, so
//! `efa_model::train::{loss_and_grads, evaluate, predict, TrainConfig, …}` keep working.

use crate::batch::SampleSet;
use crate::checkpoint::{
    Checkpoint, CheckpointPolicy, EpochBits, InputDigest, ShuffleState, TrainState,
};
use crate::ModelError;
use efa_nn::params::Params;
use ndarray::ArrayD;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::time::Instant;

pub use crate::grads::{evaluate, loss_and_grads, predict, Evaluator, MicroGrad, MICRO_BATCH};
pub use crate::history::{EarlyStopping, EpochLog, FitResult, Verdict};
pub use crate::recipe::{Batching, TrainConfig};

/// A callback after each epoch (and its checkpoint); an error ends training with it.
pub type EpochHook<'a> = &'a mut dyn FnMut(&EpochLog) -> Result<(), ModelError>;

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

fn refuse(msg: String) -> ModelError {
    ModelError::Config(format!("cannot resume: {msg}"))
}

/// What a resumed run continues with: the shuffle generator and order after the stored
/// epochs, and the optimizer.
struct Resumed {
    rng: StdRng,
    order: Vec<usize>,
    adam: efa_optim::Adam<f32>,
}

/// Checks that checkpoint `ck` can continue this run, before anything is written: its state
/// is consistent ([`TrainState::validate`]); it was trained with the same settings (`seed`,
/// `lr`, `batch_size`, `max_epochs`, `patience`, `batching`; `eval_batch` does not change
/// results and may differ), the same numbers of training and validation samples and the same
/// `inputs` (role, size and CRC-32 of each); its optimizer has the settings of
/// [`new_adam`]`(cfg)` and took exactly as many steps as the stored epochs make on this data
/// (the epochs' batches are replayed from the seed). The error names the field.
pub fn check_resume(
    ck: &Checkpoint,
    cfg: &TrainConfig,
    train: &dyn SampleSet,
    val: &dyn SampleSet,
    inputs: &[InputDigest],
) -> Result<(), ModelError> {
    resume_state(ck, cfg, train, val, inputs).map(|_| ())
}

fn resume_state(
    ck: &Checkpoint,
    cfg: &TrainConfig,
    train: &dyn SampleSet,
    val: &dyn SampleSet,
    inputs: &[InputDigest],
) -> Result<Resumed, ModelError> {
    let state = &ck.state;
    state
        .validate()
        .map_err(|e| refuse(format!("checkpoint state: {e}")))?;
    let differ = |field: &str, a: String, b: String| {
        Err(refuse(format!(
            "checkpoint has train.{field} = {a}, this run has {b}"
        )))
    };
    let c = &state.train;
    if c.seed != cfg.seed {
        return differ("seed", c.seed.to_string(), cfg.seed.to_string());
    }
    if c.lr.to_bits() != cfg.lr.to_bits() {
        return differ("lr", c.lr.to_string(), cfg.lr.to_string());
    }
    if c.batch_size != cfg.batch_size {
        return differ(
            "batch_size",
            c.batch_size.to_string(),
            cfg.batch_size.to_string(),
        );
    }
    if c.patience != cfg.patience {
        return differ("patience", c.patience.to_string(), cfg.patience.to_string());
    }
    if c.max_epochs != cfg.max_epochs {
        return differ(
            "max_epochs",
            c.max_epochs.to_string(),
            cfg.max_epochs.to_string(),
        );
    }
    if c.batching != cfg.batching {
        return differ(
            "batching",
            c.batching.name().into(),
            cfg.batching.name().into(),
        );
    }
    for (field, what, a, b) in [
        ("n_train", "training", state.n_train, train.len()),
        ("n_val", "validation", state.n_val, val.len()),
    ] {
        if a != b {
            return Err(refuse(format!(
                "checkpoint has {field} = {a} {what} samples, this run has {b}"
            )));
        }
    }
    for d in &state.inputs {
        match inputs.iter().find(|i| i.role == d.role) {
            None => {
                return Err(refuse(format!(
                    "the checkpoint was trained with input `{}` ({}), this run has none",
                    d.role,
                    d.describe()
                )))
            }
            Some(i) if i != d => {
                return Err(refuse(format!(
                    "input `{}` differs from the one the checkpoint was trained on ({} there, \
                     {} now)",
                    d.role,
                    d.describe(),
                    i.describe()
                )))
            }
            Some(_) => {}
        }
    }
    if let Some(i) = inputs
        .iter()
        .find(|i| !state.inputs.iter().any(|d| d.role == i.role))
    {
        return Err(refuse(format!(
            "this run has input `{}`, the checkpoint records none",
            i.role
        )));
    }
    let adam = efa_optim::Adam::<f32>::load(&ck.adam)
        .map_err(|e| ModelError::Optim(format!("checkpoint optimizer state: {e}")))?;
    let fresh = new_adam(cfg)?;
    if adam.config != fresh.config {
        return Err(refuse(format!(
            "the checkpoint's optimizer settings {:?} differ from this run's {:?}",
            adam.config, fresh.config
        )));
    }
    // Replay the stored epochs' shuffles (rebuilding the generator and the order), counting
    // the minibatches, i.e. the Adam steps they took.
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut order: Vec<usize> = (0..train.len()).collect();
    let mut steps = 0u64;
    for _ in 0..state.shuffle.shuffles {
        steps += epoch_batches(train, cfg, &mut rng, &mut order)?.len() as u64;
    }
    if adam.steps() != steps {
        return Err(refuse(format!(
            "the checkpoint's optimizer took {} steps, but {} epochs of this run take {steps}",
            adam.steps(),
            state.epoch
        )));
    }
    Ok(Resumed { rng, order, adam })
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
) -> Result<FitResult, ModelError> {
    if train.is_empty() {
        return Err(ModelError::Batch("the training split is empty".into()));
    }
    if cfg.batch_size == 0 {
        return Err(ModelError::Config(
            "train config field `batch_size` must be at least 1".into(),
        ));
    }
    check_batching(train, cfg)?;
    if opts.checkpoint.as_ref().is_some_and(|c| c.every == 0) {
        return Err(ModelError::Config(
            "checkpoint interval `every` must be at least 1".into(),
        ));
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
    let mut plan_counts: BTreeMap<String, usize> = BTreeMap::new();
    if let Some(ck) = opts.resume.take() {
        let r = resume_state(&ck, cfg, train, val, &opts.inputs)?;
        (rng, order, adam) = (r.rng, r.order, r.adam);
        *params = ck.params;
        best_params = ck.best;
        stopper = ck.state.stopper();
        history = ck.state.history.iter().map(|h| h.to_log()).collect();
        stopped_early = ck.state.stopped_early;
        finished = ck.state.finished;
        first_epoch = ck.state.epoch + 1;
    }
    let last_epoch = if finished { 0 } else { cfg.max_epochs };
    for epoch in first_epoch..=last_epoch {
        let t0 = Instant::now();
        let (train_loss, plans) = train_epoch(
            eval, params, &mut adam, train, cfg, &mut rng, &mut order,
        )
        .map_err(|e| match e {
            ModelError::NonFinite(m) => ModelError::NonFinite(format!("epoch {epoch}, {m}")),
            e => e,
        })?;
        for (plan, n) in plans {
            *plan_counts.entry(plan).or_default() += n;
        }
        let val_loss = eval.evaluate(params, val, cfg.eval_batch)?;
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
        if let Some(policy) = &opts.checkpoint {
            if epoch % policy.every == 0 || last {
                let state = TrainState {
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
                    finished: last,
                    train: cfg.clone(),
                    n_train: train.len(),
                    n_val: val.len(),
                    inputs: opts.inputs.clone(),
                };
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

/// The minibatches of one epoch: `order` (all sample indices, the persistent shuffle state)
/// is shuffled with `rng`, then cut as `cfg.batching` says. Sequence batches need sequence ids
/// (`Samples::group`); without them the request is an error, not a silent fallback.
pub fn epoch_batches(
    train: &dyn SampleSet,
    cfg: &TrainConfig,
    rng: &mut StdRng,
    order: &mut [usize],
) -> Result<Vec<Vec<usize>>, ModelError> {
    check_batching(train, cfg)?;
    order.shuffle(rng);
    let bs = cfg.batch_size.max(1);
    Ok(match cfg.batching {
        Batching::Samples => order.chunks(bs).map(|c| c.to_vec()).collect(),
        Batching::Sequences => {
            // Sequences in the order of their first sample in the shuffled order; within a
            // sequence, samples by target position.
            let group = |i: usize| train.sequence(i).unwrap_or(i);
            let mut members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
            let mut seq_order = Vec::new();
            for &i in order.iter() {
                let m = members.entry(group(i)).or_default();
                if m.is_empty() {
                    seq_order.push(group(i));
                }
                m.push(i);
            }
            let mut batches: Vec<Vec<usize>> = Vec::new();
            let mut cur: Vec<usize> = Vec::new();
            for g in seq_order {
                let mut m = members.remove(&g).unwrap_or_default();
                m.sort_by_key(|&i| (train.target_position(i), i));
                if !cur.is_empty() && cur.len() + m.len() > bs {
                    batches.push(std::mem::take(&mut cur));
                }
                cur.extend(m);
            }
            if !cur.is_empty() {
                batches.push(cur);
            }
            batches
        }
    })
}

/// `Batching::Sequences` needs sequence ids on the training samples.
fn check_batching(train: &dyn SampleSet, cfg: &TrainConfig) -> Result<(), ModelError> {
    if cfg.batching == Batching::Sequences && !train.has_sequences() {
        return Err(ModelError::Config(
            "train config field `batching` = \"sequences\" needs sequence ids on the training \
             samples (Samples::group), and these samples have none"
                .into(),
        ));
    }
    Ok(())
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
) -> Result<(f64, BTreeMap<String, usize>), ModelError> {
    let batches = epoch_batches(train, cfg, rng, order)?;
    let n_batches = batches.len();
    let mut sum = 0.0;
    let mut plans: BTreeMap<String, usize> = BTreeMap::new();
    for (b, chunk) in batches.iter().enumerate() {
        let g = eval.loss_and_grads_at(params, train, chunk).map_err(|e| {
            if eval.detect_anomaly {
                ModelError::NonFinite(format!("batch {} of {n_batches}: {e}", b + 1))
            } else {
                e
            }
        })?;
        let (loss, grads) = (g.loss, g.grads);
        for (plan, n) in g.plans {
            *plans.entry(plan).or_default() += n;
        }
        if !loss.is_finite() {
            return Err(ModelError::NonFinite(format!(
                "training loss {loss} at batch {} of {n_batches}",
                b + 1
            )));
        }
        sum += loss * chunk.len() as f64;
        adam_step(adam, params, &grads)?;
    }
    Ok((sum / train.len() as f64, plans))
}

/// A fresh Adam with the paper's settings (Keras ε placement) and `cfg.lr`.
pub fn new_adam(cfg: &TrainConfig) -> Result<efa_optim::Adam<f32>, ModelError> {
    efa_optim::Adam::<f32>::new(efa_optim::AdamConfig::keras(cfg.lr))
        .map_err(|e| ModelError::Optim(e.to_string()))
}

/// One Adam step over every parameter, addressed by name.
fn adam_step(
    adam: &mut efa_optim::Adam<f32>,
    params: &mut Params<f32>,
    grads: &[ArrayD<f32>],
) -> Result<(), ModelError> {
    let mut list = Vec::with_capacity(grads.len());
    for ((name, value), grad) in params.iter_mut().zip(grads) {
        list.push(
            efa_optim::Param::from_array(name, value, Some(grad))
                .map_err(|e| ModelError::Optim(e.to_string()))?,
        );
    }
    adam.step(&mut list)
        .map_err(|e| ModelError::Optim(e.to_string()))?;
    Ok(())
}
