//! Losses, gradients and predictions of a model on samples: one [`Evaluator`] (model,
//! objective, forward plan, unused-parameter policy, anomaly mode, worker threads, the
//! members of a multi-process job) behind training, evaluation and audits, with
//! data-parallel fixed micro-batches.

use crate::collective::{my_pieces, wire, Collective, Solo};
use crate::threads::Threads;
use crate::TrainError;
use efa_model::batch::{length_order, micro_batches, SampleSet, Samples};
use efa_model::efa::ForwardPlan;
use efa_model::model::{ModelConfig, Registered};
use efa_model::objective::Objective;
use efa_model::ModelError;
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
    /// The worker threads the micro-batches and evaluation chunks run on (default: one).
    pub threads: &'a Threads,
    /// The members of a multi-process job (default: [`Solo`]): each computes its share of
    /// the micro-batches and evaluation chunks, and all fold every share in order.
    pub group: &'a dyn Collective,
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
    /// Round every value the gradient tapes record to f64 (the tapes of
    /// [`Evaluator::loss_and_grads`] and its micro-batches; see
    /// [`Tape::set_round_values_to_f64`](efa_tape::Tape::set_round_values_to_f64)): with the
    /// double-double type, the definition with f64 storage and exact arithmetic, whose
    /// distance from the exact result is the f64 floor of each gradient.
    pub round_values_to_f64: bool,
    /// Round every value the gradient tapes record to f32 instead (see
    /// [`Tape::set_round_values_to_f32`](efa_tape::Tape::set_round_values_to_f32)): with the
    /// double-double type, the definition with f32 storage and exact arithmetic, whose distance
    /// from the exact result is the f32 floor of each gradient. Takes precedence over
    /// `round_values_to_f64`.
    pub round_values_to_f32: bool,
    /// Invert the ReLU derivative of the gradient tapes' inputs within this band of the kink
    /// (see [`Tape::set_relu_kink_flip`](efa_tape::Tape::set_relu_kink_flip)); `None`: the
    /// exact derivative.
    pub relu_kink_flip: Option<f64>,
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
pub struct BatchGrad<T: Real> {
    /// Mean loss over the minibatch.
    pub loss: f64,
    /// Gradients of the mean loss, in parameter order.
    pub grads: Vec<ArrayD<T>>,
    /// Micro-batches computed by each forward plan.
    pub plans: BTreeMap<ForwardPlan, usize>,
}

impl<'a> Evaluator<'a> {
    /// Automatic plans, unused parameters are errors, no anomaly mode, one thread, one
    /// process.
    pub fn new(model: &'a ModelConfig, objective: &'a Objective) -> Self {
        Self {
            threads: Threads::single(),
            group: &Solo,
            model,
            objective,
            plan: None,
            allow_unused: false,
            detect_anomaly: false,
            round_values_to_f64: false,
            round_values_to_f32: false,
            relu_kink_flip: None,
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

    /// On the worker threads `threads`.
    pub fn with_threads(mut self, threads: &'a Threads) -> Self {
        self.threads = threads;
        self
    }

    /// As a member of the multi-process job `group`.
    pub fn with_group(mut self, group: &'a dyn Collective) -> Self {
        self.group = group;
        self
    }

    /// With or without anomaly mode.
    pub fn with_detect_anomaly(mut self, on: bool) -> Self {
        self.detect_anomaly = on;
        self
    }

    /// With or without rounding every recorded value to f64.
    pub fn with_round_values_to_f64(mut self, on: bool) -> Self {
        self.round_values_to_f64 = on;
        self
    }

    /// With or without rounding every recorded value to f32.
    pub fn with_round_values_to_f32(mut self, on: bool) -> Self {
        self.round_values_to_f32 = on;
        self
    }

    /// With the ReLU derivative inverted within `band` of the kink (or exact for `None`).
    pub fn with_relu_kink_flip(mut self, band: Option<f64>) -> Self {
        self.relu_kink_flip = band;
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
        let (eta, plan) = self.model.forward_with(tape, &reg.vars, batch, self.plan)?;
        Ok((self.objective.loss(tape, eta, &batch.targets)?, plan))
    }

    /// [`Evaluator::build`] for training and evaluation: a model output that is not finite
    /// (weights driven to overflow by a step) is a [`TrainError::NonFinite`], as a
    /// non-finite loss is, rather than the objective's refusal of η outside its family's
    /// domain.
    fn build_checked<T: Real>(
        &self,
        tape: &mut Tape<T>,
        reg: &Registered,
        batch: &Samples,
    ) -> Result<(Var, ForwardPlan), TrainError> {
        let (eta, plan) = self.model.forward_with(tape, &reg.vars, batch, self.plan)?;
        if let Some(v) = tape.value(eta).iter().find(|v| !v.is_finite()) {
            return Err(TrainError::NonFinite(format!(
                "model output {}",
                v.to_f64()
            )));
        }
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
    ) -> Result<Vec<ArrayD<T>>, TrainError> {
        reg.list
            .iter()
            .map(|(name, var)| match grads.wrt(*var) {
                Some(g) => Ok(efa_num::pool::map(g.view(), |&x| x)),
                None if self.allow_unused => Ok(efa_num::pool::full(
                    tape.try_value(*var)?.raw_dim(),
                    T::ZERO,
                )),
                None => Err(TrainError::Model(ModelError::Unused {
                    param: name.clone(),
                    plan: plan.name(),
                })),
            })
            .collect()
    }

    /// One micro-batch: a tape, forward, loss, backward.
    pub fn micro<T: Real>(
        &self,
        params: &Params<T>,
        batch: &Samples,
    ) -> Result<MicroGrad<T>, TrainError> {
        let mut tape = Tape::new();
        tape.set_detect_anomaly(self.detect_anomaly);
        tape.set_round_values_to_f64(self.round_values_to_f64);
        if self.round_values_to_f32 {
            tape.set_round_values_to_f32(true);
        }
        tape.set_relu_kink_flip(self.relu_kink_flip);
        let reg = self.model.register(&mut tape, params)?;
        let built = self.build_checked(&mut tape, &reg, batch);
        // In anomaly mode, the first non-finite value explains any later failure best.
        if let Some(e) = tape.anomaly() {
            return Err(TrainError::Model(ModelError::Tape(e.clone())));
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
    ) -> Result<(f64, Vec<ArrayD<T>>), TrainError> {
        let all: Vec<usize> = (0..batch.len()).collect();
        if micro_batches(batch, &all, MICRO_BATCH, MICRO_POSITIONS).len() <= 1 {
            let g = self.threads.install(|| self.micro(params, batch))?;
            return Ok((g.loss, g.grads));
        }
        let g = self.loss_and_grads_at(params, batch, &all)?;
        Ok((g.loss, g.grads))
    }

    /// [`Evaluator::loss_and_grads`] for the minibatch `set[idx]`, cutting the micro-batches
    /// straight out of `set` (no intermediate minibatch copy).
    ///
    /// The micro-batches run in waves of (worker threads × members) micro-batches, each
    /// wave's gradients summed in micro-batch order before the next starts: the same sums in
    /// the same order as computing all first, with at most one wave of micro-batch gradients
    /// alive (a minibatch cut into many micro-batches by the position budget does not hold a
    /// gradient copy per micro-batch). In a multi-process job each member computes the wave's
    /// micro-batches [`my_pieces`] gives it, the members exchange them, and every member sums
    /// all of them in micro-batch order: the same bits as one process.
    pub fn loss_and_grads_at<T: Real>(
        &self,
        params: &Params<T>,
        set: &dyn SampleSet,
        idx: &[usize],
    ) -> Result<BatchGrad<T>, TrainError> {
        let order = length_order(set, idx);
        let pieces = micro_batches(set, &order, MICRO_BATCH, MICRO_POSITIONS);
        let n = idx.len() as f64;
        let mut out = BatchGrad {
            loss: 0.0,
            grads: params
                .iter()
                .map(|(_, p)| efa_num::pool::full(p.raw_dim(), T::ZERO))
                .collect(),
            plans: BTreeMap::new(),
        };
        let wave = self.wave_width()? * self.group.size().max(1);
        for group in pieces.chunks(wave) {
            let mine: Vec<usize> = my_pieces(self.group, group.len()).collect();
            let parts: Result<Vec<MicroGrad<T>>, TrainError> = self.threads.install(|| {
                mine.par_iter()
                    .map(|&k| {
                        let batch = set.select(&order[group[k].clone()]);
                        let g = self.micro(params, &batch);
                        batch.recycle();
                        g
                    })
                    .collect()
            });
            let parts = self.share_micro(parts, group.len(), params)?;
            for (r, part) in group.iter().zip(parts) {
                let w = r.len() as f64 / n;
                out.loss += w * part.loss;
                let wt = T::from_f64(w);
                for (acc, gi) in out.grads.iter_mut().zip(part.grads) {
                    acc.scaled_add(wt, &gi);
                    efa_num::pool::give_array(gi);
                }
                *out.plans.entry(part.plan).or_default() += 1;
            }
        }
        Ok(out)
    }

    /// Every member's micro-batch results of a wave of `n` micro-batches, in micro-batch
    /// order (this member's own `mine` are its [`my_pieces`]). An error on any member is an
    /// error on every member, naming the member.
    fn share_micro<T: Real>(
        &self,
        mine: Result<Vec<MicroGrad<T>>, TrainError>,
        n: usize,
        params: &Params<T>,
    ) -> Result<Vec<MicroGrad<T>>, TrainError> {
        if self.group.size() <= 1 {
            return mine;
        }
        let bytes = match &mine {
            Ok(parts) => {
                let mut b = vec![0u8];
                for p in parts {
                    wire::put_f64(&mut b, p.loss);
                    let plan = ForwardPlan::ALL.iter().position(|&q| q == p.plan);
                    b.push(plan.unwrap_or(0) as u8);
                    for g in &p.grads {
                        wire::put_reals(&mut b, g.iter().copied());
                    }
                }
                b
            }
            Err(e) => [vec![1u8], e.to_string().into_bytes()].concat(),
        };
        let all = self.group.all_gather(bytes)?;
        let mine = mine?;
        let mut slots: Vec<Option<MicroGrad<T>>> = (0..n).map(|_| None).collect();
        for (rank, bytes) in all.iter().enumerate() {
            if bytes.first() != Some(&0) {
                return Err(TrainError::Rank {
                    rank,
                    message: String::from_utf8_lossy(bytes.get(1..).unwrap_or(&[])).into(),
                });
            }
            if rank == self.group.rank() {
                continue;
            }
            let mut r = wire::Reader::new(&bytes[1..]);
            for k in (rank..n).step_by(self.group.size()) {
                let bad = || TrainError::Rank {
                    rank,
                    message: format!("its results of micro-batch {k} are truncated"),
                };
                let loss = r.f64().ok_or_else(bad)?;
                let plan = r.byte().ok_or_else(bad)?;
                let plan = *ForwardPlan::ALL.get(plan as usize).ok_or_else(bad)?;
                let grads = params
                    .iter()
                    .map(|(_, p)| {
                        let v = r.reals::<T>(p.len()).ok_or_else(bad)?;
                        ArrayD::from_shape_vec(p.raw_dim(), v).map_err(|_| bad())
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                slots[k] = Some(MicroGrad { loss, grads, plan });
            }
        }
        for (k, part) in my_pieces(self.group, n).zip(mine) {
            slots[k] = Some(part);
        }
        slots
            .into_iter()
            .enumerate()
            .map(|(k, s)| {
                s.ok_or_else(|| TrainError::Rank {
                    rank: k % self.group.size(),
                    message: format!("no result for micro-batch {k}"),
                })
            })
            .collect()
    }

    /// Mean loss of one minibatch (forward only).
    pub fn batch_loss<T: Real>(
        &self,
        params: &Params<T>,
        batch: &Samples,
    ) -> Result<f64, TrainError> {
        let mut tape = Tape::new();
        let reg = self.model.register(&mut tape, params)?;
        let (loss, _) = self.build_checked(&mut tape, &reg, batch)?;
        Ok(scalar(&tape, loss))
    }

    /// Exact mean loss over a whole split: Σ_batches (batch mean × batch size) / n,
    /// accumulated in f64 in batch order (so the result depends neither on the thread count
    /// nor on the members of a multi-process job, which each compute their [`my_pieces`] of
    /// the batches and exchange the sums). Batches are cut in [`length_order`], so each is
    /// trimmed to its longest sample, into pieces of at most `batch_size` samples and
    /// [`eval_positions`]`(batch_size)` positions ([`micro_batches`]).
    pub fn evaluate<T: Real>(
        &self,
        params: &Params<T>,
        set: &dyn SampleSet,
        batch_size: usize,
    ) -> Result<f64, TrainError> {
        let n = set.len();
        if n == 0 {
            return Err(TrainError::Model(ModelError::Batch(
                "cannot evaluate on an empty split".into(),
            )));
        }
        let idx = length_order(set, &(0..n).collect::<Vec<_>>());
        let chunks: Vec<&[usize]> =
            micro_batches(set, &idx, batch_size, eval_positions(batch_size))
                .into_iter()
                .map(|r| &idx[r])
                .collect();
        let mine: Vec<usize> = my_pieces(self.group, chunks.len()).collect();
        let sums: Result<Vec<f64>, TrainError> = self.threads.install(|| {
            mine.par_iter()
                .map(|&k| {
                    let c = chunks[k];
                    Ok(self.batch_loss(params, &set.select(c))? * c.len() as f64)
                })
                .collect()
        });
        let sums = self.share_sums(sums, chunks.len())?;
        Ok(sums.iter().sum::<f64>() / n as f64)
    }

    /// Micro-batches per member in one wave: this process's thread count, or in a
    /// multi-process job the largest over the members (agreed by an exchange), so that every
    /// member cuts the same waves whatever its own `--threads`.
    fn wave_width(&self) -> Result<usize, TrainError> {
        let mine = self.threads.count().max(1);
        if self.group.size() <= 1 {
            return Ok(mine);
        }
        let all = self
            .group
            .all_gather((mine as u64).to_le_bytes().to_vec())?;
        let mut width = 1;
        for (rank, b) in all.iter().enumerate() {
            let n = <[u8; 8]>::try_from(b.as_slice())
                .map(u64::from_le_bytes)
                .map_err(|_| TrainError::Rank {
                    rank,
                    message: format!("sent a thread count of {} bytes, not 8", b.len()),
                })?;
            width = width.max(usize::try_from(n).unwrap_or(usize::MAX).min(1 << 16));
        }
        Ok(width)
    }

    /// Every member's sums of `n` evaluation chunks, in chunk order (see
    /// [`Evaluator::share_micro`]).
    fn share_sums(
        &self,
        mine: Result<Vec<f64>, TrainError>,
        n: usize,
    ) -> Result<Vec<f64>, TrainError> {
        if self.group.size() <= 1 {
            return mine;
        }
        let bytes = match &mine {
            Ok(sums) => {
                let mut b = vec![0u8];
                sums.iter().for_each(|&s| wire::put_f64(&mut b, s));
                b
            }
            Err(e) => [vec![1u8], e.to_string().into_bytes()].concat(),
        };
        let all = self.group.all_gather(bytes)?;
        mine?;
        let mut out = vec![f64::NAN; n];
        for (rank, bytes) in all.iter().enumerate() {
            if bytes.first() != Some(&0) {
                return Err(TrainError::Rank {
                    rank,
                    message: String::from_utf8_lossy(bytes.get(1..).unwrap_or(&[])).into(),
                });
            }
            let mut r = wire::Reader::new(&bytes[1..]);
            for k in (rank..n).step_by(self.group.size()) {
                out[k] = r.f64().ok_or_else(|| TrainError::Rank {
                    rank,
                    message: format!("its sum of evaluation chunk {k} is missing"),
                })?;
            }
        }
        Ok(out)
    }

    /// η `[n, width]` for every sample of a split (forward only, this evaluator's plan), as
    /// f64. Samples run in index order in chunks of at most `batch_size` samples and
    /// [`eval_positions`]`(batch_size)` positions ([`micro_batches`]), on this evaluator's
    /// threads (every member of a multi-process job computes all of them).
    pub fn predict<T: Real>(
        &self,
        params: &Params<T>,
        set: &dyn SampleSet,
        batch_size: usize,
    ) -> Result<ndarray::Array2<f64>, TrainError> {
        let n = set.len();
        let idx: Vec<usize> = (0..n).collect();
        let chunks: Vec<&[usize]> =
            micro_batches(set, &idx, batch_size, eval_positions(batch_size))
                .into_iter()
                .map(|r| &idx[r])
                .collect();
        let model = self.model;
        let parts: Result<Vec<ndarray::Array2<f64>>, TrainError> = self.threads.install(|| {
            chunks
                .par_iter()
                .map(|&c| {
                    let batch = set.select(c);
                    let mut tape = Tape::new();
                    let reg = model.register(&mut tape, params)?;
                    let (eta, _) = model.forward_with(&mut tape, &reg.vars, &batch, self.plan)?;
                    let v = tape.value(eta);
                    let width = v.shape()[1];
                    Ok(ndarray::Array2::from_shape_fn(
                        (c.len(), width),
                        |(i, j)| v[[i, j]].to_f64(),
                    ))
                })
                .collect()
        });
        let parts = parts?;
        let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
        if views.is_empty() {
            return Ok(ndarray::Array2::zeros((0, 1)));
        }
        ndarray::concatenate(ndarray::Axis(0), &views)
            .map_err(|e| TrainError::Model(ModelError::Batch(e.to_string())))
    }
}

fn scalar<T: Real>(tape: &Tape<T>, v: Var) -> f64 {
    tape.value(v).iter().next().map_or(f64::NAN, |v| v.to_f64())
}
