//! What every epoch's schedule is made of, for the training loop ([`crate::fit()`]) and for
//! resuming it ([`crate::resume`], which replays the shuffles and counts the steps): the
//! epoch's minibatches and the optimizer a run starts with. A leaf: it uses neither of them.

use crate::recipe::{Batching, TrainConfig};
use crate::TrainError;
use efa_model::batch::SampleSet;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use std::collections::BTreeMap;

/// The minibatches of one epoch: `order` (all sample indices, the persistent shuffle state)
/// is shuffled with `rng`, then cut as `cfg.batching` says. Sequence batches need sequence ids
/// (`Samples::group`); without them the request is an error, not a silent fallback.
pub fn epoch_batches(
    train: &dyn SampleSet,
    cfg: &TrainConfig,
    rng: &mut StdRng,
    order: &mut [usize],
) -> Result<Vec<Vec<usize>>, TrainError> {
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
pub(crate) fn check_batching(train: &dyn SampleSet, cfg: &TrainConfig) -> Result<(), TrainError> {
    if cfg.batching == Batching::Sequences && !train.has_sequences() {
        return Err(TrainError::config(
            "train.batching",
            "\"sequences\" needs sequence ids on the training samples (Samples::group), and \
             these samples have none",
        ));
    }
    Ok(())
}

/// A fresh Adam with the paper's settings (Keras ε placement) and `cfg.lr`.
pub fn new_adam(cfg: &TrainConfig) -> Result<efa_optim::Adam<f32>, TrainError> {
    efa_optim::Adam::<f32>::new(efa_optim::AdamConfig::keras(cfg.lr)).map_err(|source| {
        TrainError::Optim {
            during: "configuration",
            source,
        }
    })
}
