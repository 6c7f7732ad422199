//! Losses, gradients and predictions of a model on samples: one [`Evaluator`] (model,
//! objective, forward plan, unused-parameter policy, anomaly mode) behind training,
//! evaluation and audits, with data-parallel fixed micro-batches.

use crate::batch::{length_order, micro_batches, SampleSet, Samples};
use crate::efa::ForwardPlan;
use crate::model::{ModelConfig, Registered};
use crate::objective::Objective;
use crate::ModelError;
use efa_nn::params::Params;
use efa_num::Real;
use efa_tape::{Grads, Tape, Var};
use ndarray::ArrayD;
use rayon::prelude::*;
use std::collections::BTreeMap;

/// Largest micro-batch of [`Evaluator::loss_and_grads`]; larger batches are split into chunks
/// of this size and run in parallel. 128 gives the paper's batch of 256 two pieces, one per
/// core on a 2-core machine; smaller pieces (64) would feed more cores at the same
/// determinism but measured 11–26% slower here on the synthetic models (more, smaller tapes).
pub const MICRO_BATCH: usize = 128;

/// Most positions (samples × their longest valid length) of one training micro-batch, so
/// that the samples of one long sequence do not build a huge batch. The paper's widths are
/// at most 132 positions, so their micro-batches of 128 (at most 16,896 positions) never
/// reach it and are cut by count alone, as before the budget existed.
pub const MICRO_POSITIONS: usize = 65_536;

/// Position budget per sample of an evaluation or prediction chunk: a chunk of up to
/// `eval_batch` samples holds at most `eval_batch · 512` positions (the training
/// micro-batch's ratio, `MICRO_POSITIONS / MICRO_BATCH`), so it never binds for samples of
/// at most 512 positions (the paper's) and the chunks stay those of `eval_batch` alone.
pub const EVAL_POSITIONS_PER_SAMPLE: usize = MICRO_POSITIONS / MICRO_BATCH;

/// The position budget of an evaluation or prediction chunk of `batch_size` samples.
pub fn eval_positions(batch_size: usize) -> usize {
    batch_size.max(1).saturating_mul(EVAL_POSITIONS_PER_SAMPLE)
}

/// Evaluates a model's loss, gradients and predictions.
#[derive(Clone, Copy, Debug)]
pub struct Evaluator<'a> {
    /// The model.
    pub model: &'a ModelConfig,
    /// Its loss.
    pub objective: &'a Objective,
    /// A forced forward plan; `None` lets [`ModelConfig::plan_for`] choose per micro-batch.
    pub plan: Option<ForwardPlan>,
    /// Opt in to parameters that do not reach the loss (their gradient is then zero, as with
    /// `torch.autograd.grad(allow_unused=True)`). By default such a parameter is an error
    /// naming it and the forward plan: a zero gradient would hide a disconnected parameter,
    /// and a finite-difference audit cannot see it either.
    pub allow_unused: bool,
    /// Run every tape in anomaly mode: the first non-finite forward value or gradient is the
    /// error (op, node, parameters).
    pub detect_anomaly: bool,
}

/// The loss of one micro-batch, every parameter's gradient in declaration order, and the
/// forward plan that computed them.
pub struct MicroGrad<T: Real> {
    /// Mean loss over the micro-batch.
    pub loss: f64,
    /// Gradients, in parameter order.
    pub grads: Vec<ArrayD<T>>,
    /// The plan that ran.
    pub plan: ForwardPlan,
}

/// Loss and gradients of one minibatch with the plans its micro-batches used.
pub(crate) struct BatchGrad<T: Real> {
    pub(crate) loss: f64,
    pub(crate) grads: Vec<ArrayD<T>>,
    pub(crate) plans: BTreeMap<String, usize>,
}

impl<'a> Evaluator<'a> {
    /// Automatic plans, unused parameters are errors, no anomaly mode.
    pub fn new(model: &'a ModelConfig, objective: &'a Objective) -> Self {
        Self {
            model,
            objective,
            plan: None,
            allow_unused: false,
            detect_anomaly: false,
        }
    }

    /// With a forced plan (or `None` for the automatic choice).
    pub fn with_plan(mut self, plan: Option<ForwardPlan>) -> Self {
        self.plan = plan;
        self
    }

    /// With unused parameters allowed (zero gradient) or not.
    pub fn with_allow_unused(mut self, allow: bool) -> Self {
        self.allow_unused = allow;
        self
    }

    /// With or without anomaly mode.
    pub fn with_detect_anomaly(mut self, on: bool) -> Self {
        self.detect_anomaly = on;
        self
    }

    /// Builds η and the loss of `batch` on `tape` for registered parameters; returns the loss
    /// variable and the plan used.
    pub fn build<T: Real>(
        &self,
        tape: &mut Tape<T>,
        reg: &Registered,
        batch: &Samples,
    ) -> Result<(Var, ForwardPlan), ModelError> {
        let plan = self.model.plan_for(batch, self.plan)?;
        let eta = self.model.forward(tape, &reg.vars, batch, plan)?;
        Ok((self.objective.loss(tape, eta, &batch.targets)?, plan))
    }

    /// Every registered parameter's gradient from `grads`, in declaration order. A parameter
    /// that does not reach the loss is an error naming it and `plan`, unless unused
    /// parameters are allowed (then its gradient is zero).
    pub fn collect<T: Real>(
        &self,
        tape: &Tape<T>,
        grads: &Grads<T>,
        reg: &Registered,
        plan: ForwardPlan,
    ) -> Result<Vec<ArrayD<T>>, ModelError> {
        reg.list
            .iter()
            .map(|(name, var)| match grads.wrt(*var) {
                Some(g) => Ok(g.clone()),
                None if self.allow_unused => Ok(ArrayD::zeros(tape.try_value(*var)?.raw_dim())),
                None => Err(ModelError::Unused(format!(
                    "parameter `{name}` does not reach the loss in forward plan `{plan}` (a \
                     disconnected parameter: a bug in the forward, or allow unused parameters \
                     explicitly)"
                ))),
            })
            .collect()
    }

    /// One micro-batch: a tape, forward, loss, backward.
    pub fn micro<T: Real>(
        &self,
        params: &Params<T>,
        batch: &Samples,
    ) -> Result<MicroGrad<T>, ModelError> {
        let mut tape = Tape::new();
        tape.set_detect_anomaly(self.detect_anomaly);
        let reg = self.model.register(&mut tape, params)?;
        let built = self.build(&mut tape, &reg, batch);
        // In anomaly mode, the first non-finite value explains any later failure best.
        if let Some(e) = tape.anomaly() {
            return Err(ModelError::Tape(e.clone()));
        }
        let (loss, plan) = built?;
        let value = scalar(&tape, loss);
        let grads = tape.backward(loss)?;
        let grads = self.collect(&tape, &grads, &reg, plan)?;
        Ok(MicroGrad {
            loss: value,
            grads,
            plan,
        })
    }

    /// Mean loss of one minibatch and the gradient of every parameter, in parameter order.
    ///
    /// Data parallelism over fixed micro-batches of at most [`MICRO_BATCH`] samples and
    /// [`MICRO_POSITIONS`] positions ([`micro_batches`]): the mean loss is
    /// Σ_c (n_c/B)·mean_c and its gradient Σ_c (n_c/B)·∇mean_c. The split depends only on
    /// the minibatch, and the sums run in micro-batch order, so results are bitwise
    /// independent of the thread count. Micro-batches are cut in [`length_order`] so that
    /// each is trimmed to its own longest sample and a sequence's targets share one.
    pub fn loss_and_grads<T: Real>(
        &self,
        params: &Params<T>,
        batch: &Samples,
    ) -> Result<(f64, Vec<ArrayD<T>>), ModelError> {
        let all: Vec<usize> = (0..batch.len()).collect();
        if micro_batches(batch, &all, MICRO_BATCH, MICRO_POSITIONS).len() <= 1 {
            let g = self.micro(params, batch)?;
            return Ok((g.loss, g.grads));
        }
        let g = self.loss_and_grads_at(params, batch, &all)?;
        Ok((g.loss, g.grads))
    }

    /// [`Evaluator::loss_and_grads`] for the minibatch `set[idx]`, cutting the micro-batches
    /// straight out of `set` (no intermediate minibatch copy).
    ///
    /// The micro-batches run in waves of as many as there are worker threads, each wave's
    /// gradients summed in micro-batch order before the next starts: the same sums in the
    /// same order as computing all first, with at most one wave of micro-batch gradients
    /// alive (a minibatch cut into many micro-batches by the position budget does not hold
    /// a gradient copy per micro-batch).
    pub(crate) fn loss_and_grads_at<T: Real>(
        &self,
        params: &Params<T>,
        set: &dyn SampleSet,
        idx: &[usize],
    ) -> Result<BatchGrad<T>, ModelError> {
        let order = length_order(set, idx);
        let pieces = micro_batches(set, &order, MICRO_BATCH, MICRO_POSITIONS);
        let n = idx.len() as f64;
        let mut out = BatchGrad {
            loss: 0.0,
            grads: params
                .iter()
                .map(|(_, p)| ArrayD::zeros(p.raw_dim()))
                .collect(),
            plans: BTreeMap::new(),
        };
        let wave = rayon::current_num_threads().max(1);
        for group in pieces.chunks(wave) {
            let parts: Vec<MicroGrad<T>> = group
                .par_iter()
                .map(|r| self.micro(params, &set.select(&order[r.clone()])))
                .collect::<Result<_, _>>()?;
            for (r, part) in group.iter().zip(parts) {
                let w = r.len() as f64 / n;
                out.loss += w * part.loss;
                let wt = T::from_f64(w);
                for (acc, gi) in out.grads.iter_mut().zip(part.grads) {
                    acc.scaled_add(wt, &gi);
                }
                *out.plans.entry(part.plan.name().to_string()).or_default() += 1;
            }
        }
        Ok(out)
    }

    /// Mean loss of one minibatch (forward only).
    pub fn batch_loss<T: Real>(
        &self,
        params: &Params<T>,
        batch: &Samples,
    ) -> Result<f64, ModelError> {
        let mut tape = Tape::new();
        let reg = self.model.register(&mut tape, params)?;
        let (loss, _) = self.build(&mut tape, &reg, batch)?;
        Ok(scalar(&tape, loss))
    }

    /// Exact mean loss over a whole split: Σ_batches (batch mean × batch size) / n,
    /// accumulated in f64 in batch order (so the result does not depend on the thread
    /// count). Batches are cut in [`length_order`], so each is trimmed to its longest sample,
    /// into pieces of at most `batch_size` samples and [`eval_positions`]`(batch_size)`
    /// positions ([`micro_batches`]).
    pub fn evaluate<T: Real>(
        &self,
        params: &Params<T>,
        set: &dyn SampleSet,
        batch_size: usize,
    ) -> Result<f64, ModelError> {
        let n = set.len();
        if n == 0 {
            return Err(ModelError::Batch(
                "cannot evaluate on an empty split".into(),
            ));
        }
        let idx = length_order(set, &(0..n).collect::<Vec<_>>());
        let chunks: Vec<&[usize]> =
            micro_batches(set, &idx, batch_size, eval_positions(batch_size))
                .into_iter()
                .map(|r| &idx[r])
                .collect();
        let sums: Vec<f64> = chunks
            .par_iter()
            .map(|c| Ok(self.batch_loss(params, &set.select(c))? * c.len() as f64))
            .collect::<Result<_, ModelError>>()?;
        Ok(sums.iter().sum::<f64>() / n as f64)
    }
}

fn scalar<T: Real>(tape: &Tape<T>, v: Var) -> f64 {
    tape.value(v).iter().next().map_or(f64::NAN, |v| v.to_f64())
}

/// Mean loss of one minibatch and the gradient of every parameter, in parameter order, with
/// the automatic plan (see [`Evaluator::loss_and_grads`]).
pub fn loss_and_grads<T: Real>(
    model: &ModelConfig,
    objective: &Objective,
    params: &Params<T>,
    batch: &Samples,
) -> Result<(f64, Vec<ArrayD<T>>), ModelError> {
    Evaluator::new(model, objective).loss_and_grads(params, batch)
}

/// Exact mean loss over a whole split with the automatic plan (see [`Evaluator::evaluate`]).
pub fn evaluate<T: Real>(
    model: &ModelConfig,
    objective: &Objective,
    params: &Params<T>,
    set: &dyn SampleSet,
    batch_size: usize,
) -> Result<f64, ModelError> {
    Evaluator::new(model, objective).evaluate(params, set, batch_size)
}

/// η `[n, width]` for every sample of a split (forward only, automatic plan), as f64.
/// Samples run in index order in chunks of at most `batch_size` samples and
/// [`eval_positions`]`(batch_size)` positions ([`micro_batches`]).
pub fn predict<T: Real>(
    model: &ModelConfig,
    params: &Params<T>,
    set: &dyn SampleSet,
    batch_size: usize,
) -> Result<ndarray::Array2<f64>, ModelError> {
    let n = set.len();
    let idx: Vec<usize> = (0..n).collect();
    let chunks: Vec<&[usize]> = micro_batches(set, &idx, batch_size, eval_positions(batch_size))
        .into_iter()
        .map(|r| &idx[r])
        .collect();
    let parts: Vec<ndarray::Array2<f64>> = chunks
        .par_iter()
        .map(|&c| {
            let batch = set.select(c);
            let mut tape = Tape::new();
            let reg = model.register(&mut tape, params)?;
            let plan = model.plan_for(&batch, None)?;
            let eta = model.forward(&mut tape, &reg.vars, &batch, plan)?;
            let v = tape.value(eta);
            let width = v.shape()[1];
            Ok(ndarray::Array2::from_shape_fn(
                (c.len(), width),
                |(i, j)| v[[i, j]].to_f64(),
            ))
        })
        .collect::<Result<_, ModelError>>()?;
    let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
    if views.is_empty() {
        return Ok(ndarray::Array2::zeros((0, 1)));
    }
    ndarray::concatenate(ndarray::Axis(0), &views).map_err(|e| ModelError::Batch(e.to_string()))
}
