//! Resuming a run from a checkpoint: every check before anything is written, then the
//! stored epochs' shuffles replayed so the run continues bit for bit.

use crate::checkpoint::{Checkpoint, InputDigest};
use crate::history::{EarlyStopping, EpochLog};
use crate::recipe::TrainConfig;
use crate::schedule::{epoch_batches, new_adam};
use crate::TrainError;
use efa_model::batch::SampleSet;
use efa_nn::params::Params;
use rand::rngs::StdRng;
use rand::SeedableRng;

fn refuse(msg: String) -> TrainError {
    TrainError::Resume(msg)
}

/// What a resumed run continues with: the shuffle generator and order after the stored
/// epochs, the optimizer, the parameters, and the early-stopping state and history.
pub(crate) struct Resumed {
    pub(crate) rng: StdRng,
    pub(crate) order: Vec<usize>,
    pub(crate) adam: efa_optim::Adam<f32>,
    pub(crate) params: Params<f32>,
    pub(crate) best: Params<f32>,
    pub(crate) stopper: EarlyStopping,
    pub(crate) history: Vec<EpochLog>,
    pub(crate) stopped_early: bool,
    pub(crate) finished: bool,
    /// The first epoch to train (the checkpoint's epoch + 1).
    pub(crate) first_epoch: usize,
}

/// Checks that checkpoint `ck` can continue this run, before anything is written: its state
/// is consistent ([`TrainState::validate`](crate::checkpoint::TrainState::validate)); it was
/// trained with the same settings (`seed`, `lr`, `batch_size`, `max_epochs`, `patience`,
/// `batching`; `eval_batch` does not change
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
) -> Result<(), TrainError> {
    replay(ck, cfg, train, val, inputs).map(|_| ())
}

/// Checks `ck` as [`check_resume`] does and unpacks it into the state a resumed run
/// continues with.
pub(crate) fn resume(
    ck: Checkpoint,
    cfg: &TrainConfig,
    train: &dyn SampleSet,
    val: &dyn SampleSet,
    inputs: &[InputDigest],
) -> Result<Resumed, TrainError> {
    let (rng, order, adam) = replay(&ck, cfg, train, val, inputs)?;
    let state = ck.state;
    Ok(Resumed {
        rng,
        order,
        adam,
        params: ck.params,
        best: ck.best,
        stopper: state.stopper(),
        history: state.history.iter().map(|h| h.to_log()).collect(),
        stopped_early: state.stopped_early,
        finished: state.finished,
        first_epoch: state.epoch + 1,
    })
}

/// The checks of [`check_resume`], then the stored epochs' shuffles replayed: the generator,
/// the sample order and the optimizer a resumed run continues with.
fn replay(
    ck: &Checkpoint,
    cfg: &TrainConfig,
    train: &dyn SampleSet,
    val: &dyn SampleSet,
    inputs: &[InputDigest],
) -> Result<(StdRng, Vec<usize>, efa_optim::Adam<f32>), TrainError> {
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
    let adam = efa_optim::Adam::<f32>::load(&ck.adam).map_err(|source| TrainError::Optim {
        during: "checkpoint optimizer state",
        source,
    })?;
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
    Ok((rng, order, adam))
}
