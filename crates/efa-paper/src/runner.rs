//! Runs several training runs at once: `workers` OS threads, each with its own rayon pool of
//! `threads / workers` threads, take runs from a queue longest-first (by a cost estimate).
//! Results come back in the runs' order. A run's numbers do not depend on which worker ran it
//! or how many threads it had (training is bitwise independent of the thread count), so
//! running runs side by side only changes wall time: two one-thread runs use a 2-core machine
//! better than two two-thread runs one after the other.

use crate::{run, run_in, PaperError, RunResult, RunSpec};
use efa_model::ModelConfig;
use efa_nn::params::Params;
use efa_train::collective::{wire, Collective};
use efa_train::evaluator::MICRO_BATCH;
use efa_train::history::EpochLog;
use efa_train::{Threads, TrainError};
use std::collections::VecDeque;
use std::sync::Mutex;

/// What a caller sees of a queue of runs (progress bars, logs). Every method is called from
/// the worker thread that trains the run, so implementations must be thread-safe.
pub trait RunObserver: Sync {
    /// Run `index` of the queue starts.
    fn started(&self, index: usize, spec: &RunSpec) {
        let _ = (index, spec);
    }
    /// Run `index` finished an epoch.
    fn epoch(&self, index: usize, log: &EpochLog) {
        let _ = (index, log);
    }
    /// Run `index` ended, with its result or error.
    fn finished(&self, index: usize, spec: &RunSpec, outcome: Result<&RunResult, &PaperError>) {
        let _ = (index, spec, outcome);
    }
}

/// An observer that sees nothing.
pub struct Quiet;

impl RunObserver for Quiet {}

/// A rough cost of a run: training samples × epochs × positions per sample × blocks (for
/// ordering the queue only).
pub fn cost(spec: &RunSpec) -> f64 {
    let layers = match &spec.model {
        ModelConfig::Efa(c) => c.layers.max(1) as f64,
        ModelConfig::Fm(_) => 0.1,
    };
    spec.train.len() as f64
        * spec.train_config.max_epochs as f64
        * spec.train.width().max(1) as f64
        * layers
}

/// How many runs go side by side with `threads` threads for `runs` runs: one worker per
/// thread, at most one per run.
pub fn workers(threads: usize, runs: usize) -> usize {
    threads.min(runs).max(1)
}

/// One finished run: its result and its trained parameters.
pub type Trained = (RunResult, Params<f32>);

/// Trains every spec, [`workers`]`(threads, specs.len())` at a time with `threads` threads in
/// all, longest first ([`cost`]), telling `observer` about each; returns the results in the
/// order of `specs`. The first error stops the queue (runs already started finish) and is
/// returned.
pub fn run_all(
    specs: &[RunSpec],
    threads: usize,
    observer: &dyn RunObserver,
) -> Result<Vec<Trained>, PaperError> {
    let all: Vec<usize> = (0..specs.len()).collect();
    run_some(specs, &all, threads, observer)
}

/// [`run_all`] for the runs `which` of `specs` (the observer sees their indices in `specs`);
/// returns their results in the order of `which`.
fn run_some(
    specs: &[RunSpec],
    which: &[usize],
    threads: usize,
    observer: &dyn RunObserver,
) -> Result<Vec<Trained>, PaperError> {
    let workers = workers(threads, which.len());
    let per_worker = (threads / workers).max(1);
    let mut order: Vec<usize> = which.to_vec();
    order.sort_by(|&a, &b| cost(&specs[b]).total_cmp(&cost(&specs[a])).then(a.cmp(&b)));
    let queue = Mutex::new(order.into_iter().collect::<VecDeque<usize>>());
    let results: Mutex<Vec<Option<Trained>>> = Mutex::new((0..specs.len()).map(|_| None).collect());
    let first_error: Mutex<Option<PaperError>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                let fail = |e: PaperError| {
                    let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                    slot.get_or_insert(e);
                };
                let threads = match Threads::new(per_worker) {
                    Ok(t) => t,
                    Err(e) => return fail(e.into()),
                };
                loop {
                    if first_error
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .is_some()
                    {
                        return;
                    }
                    let Some(i) = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front()
                    else {
                        return;
                    };
                    let spec = &specs[i];
                    observer.started(i, spec);
                    let out = run(spec, &threads, &mut |log| observer.epoch(i, log));
                    observer.finished(i, spec, out.as_ref().map(|(r, _)| r));
                    match out {
                        Ok(trained) => {
                            results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(trained)
                        }
                        Err(e) => fail(e),
                    }
                }
            });
        }
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    which
        .iter()
        .map(|&i| results[i].take().ok_or(PaperError::Unfinished { index: i }))
        .collect()
}

/// How the members of a multi-process job share a queue of runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribute {
    /// Every member trains every run, one run after another, each computing its share of
    /// every micro-batch wave (data-parallel): for few, long runs.
    Batches,
    /// Whole runs go to members, longest first to the least loaded (task-parallel); the
    /// results are gathered on every member afterwards: for many runs.
    Runs,
    /// The runs where data parallelism pays ([`pays_data_parallel`]: long runs whose
    /// minibatches give every member micro-batches, such as the full-batch temperature
    /// models) as [`Distribute::Batches`] first, the others as [`Distribute::Runs`].
    Auto,
}

/// Whether run `i` of `specs` goes data-parallel over `members` under [`Distribute::Auto`]:
/// its minibatches hold at least one micro-batch per member (so no member idles in a wave)
/// and its cost ([`cost`]) is above an even share of the queue's (spread as a whole run, it
/// would keep one member busy after the others are done).
pub fn pays_data_parallel(specs: &[RunSpec], i: usize, members: usize) -> bool {
    let spec = &specs[i];
    let per_step = spec.train_config.batch_size.min(spec.train.len());
    let total: f64 = specs.iter().map(cost).sum();
    members > 1 && per_step >= members * MICRO_BATCH && cost(spec) * members as f64 > total
}

/// [`run_all`] as a member of the multi-process job `group`, shared as `how` says; returns
/// every run's result on every member, the same bits as one process (training is bitwise
/// independent of the thread count and of the number of members). With one member this is
/// [`run_all`]. Every member must call it with the same specs.
pub fn run_all_in(
    specs: &[RunSpec],
    threads: usize,
    group: &dyn Collective,
    how: Distribute,
    observer: &dyn RunObserver,
) -> Result<Vec<Trained>, PaperError> {
    if group.size() <= 1 {
        return run_all(specs, threads, observer);
    }
    let all: Vec<usize> = (0..specs.len()).collect();
    let (wide, rest): (Vec<usize>, Vec<usize>) = match how {
        Distribute::Batches => (all, Vec::new()),
        Distribute::Runs => (Vec::new(), all),
        Distribute::Auto => all
            .into_iter()
            .partition(|&i| pays_data_parallel(specs, i, group.size())),
    };
    let mut out: Vec<Option<Trained>> = (0..specs.len()).map(|_| None).collect();
    let threads_each = Threads::new(threads)?;
    for &i in &wide {
        let spec = &specs[i];
        observer.started(i, spec);
        let r = run_in(spec, &threads_each, group, &mut |log| {
            observer.epoch(i, log)
        });
        observer.finished(i, spec, r.as_ref().map(|(r, _)| r));
        out[i] = Some(r?);
    }
    if !rest.is_empty() {
        for (i, t) in tasks(specs, &rest, threads, group, observer)? {
            out[i] = Some(t);
        }
    }
    out.into_iter()
        .enumerate()
        .map(|(i, r)| r.ok_or(PaperError::Unfinished { index: i }))
        .collect()
}

/// The runs `which` spread over the members ([`assign_some`]), each member training its own
/// on `threads`, then every member's results gathered on every member: `(index, run)` pairs.
fn tasks(
    specs: &[RunSpec],
    which: &[usize],
    threads: usize,
    group: &dyn Collective,
    observer: &dyn RunObserver,
) -> Result<Vec<(usize, Trained)>, PaperError> {
    let owner = assign_some(specs, which, group.size());
    let mine: Vec<usize> = which
        .iter()
        .zip(&owner)
        .filter(|&(_, &o)| o == group.rank())
        .map(|(&i, _)| i)
        .collect();
    // Whatever happens here, this member takes part in the exchange (the others wait in it).
    let encoded = run_some(specs, &mine, threads, observer).and_then(|done| {
        let mut bytes = vec![0u8];
        for (&i, t) in mine.iter().zip(&done) {
            wire::put_bytes(&mut bytes, &(i as u64).to_le_bytes());
            put_trained(&mut bytes, t, group.rank())?;
        }
        Ok(bytes)
    });
    let bytes = encoded.unwrap_or_else(|e| {
        let mut b = vec![1u8];
        wire::put_bytes(&mut b, e.to_string().as_bytes());
        b
    });
    let gathered = group.all_gather(bytes)?;
    let owner_of = |i: usize| which.iter().position(|&w| w == i).map(|k| owner[k]);
    let mut out = Vec::with_capacity(which.len());
    for (rank, b) in gathered.iter().enumerate() {
        let bad = |what: &str| {
            PaperError::Train(TrainError::Rank {
                rank,
                message: format!("its results could not be read ({what})"),
            })
        };
        let mut r = wire::Reader::new(b);
        match r.byte() {
            Some(0) => {}
            Some(1) => {
                let msg = r.bytes().ok_or_else(|| bad("error message"))?;
                return Err(PaperError::Train(TrainError::Rank {
                    rank,
                    message: String::from_utf8_lossy(msg).into_owned(),
                }));
            }
            _ => return Err(bad("status")),
        }
        while !r.is_empty() {
            let i = r
                .bytes()
                .and_then(|x| x.try_into().ok())
                .map(u64::from_le_bytes)
                .and_then(|i| usize::try_from(i).ok())
                .filter(|&i| owner_of(i) == Some(rank))
                .ok_or_else(|| bad("run index"))?;
            out.push((i, get_trained(&mut r, &specs[i]).ok_or_else(|| bad("run"))?));
        }
    }
    Ok(out)
}

/// The member that trains each run: longest first ([`cost`]) to the member with the least
/// cost so far (lowest rank on ties); the same on every member.
pub fn assign(specs: &[RunSpec], members: usize) -> Vec<usize> {
    let all: Vec<usize> = (0..specs.len()).collect();
    assign_some(specs, &all, members)
}

/// [`assign`] for the runs `which` of `specs`: the member of each, in the order of `which`.
fn assign_some(specs: &[RunSpec], which: &[usize], members: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..which.len()).collect();
    let c = |k: usize| cost(&specs[which[k]]);
    order.sort_by(|&a, &b| c(b).total_cmp(&c(a)).then(which[a].cmp(&which[b])));
    let mut load = vec![0.0f64; members.max(1)];
    let mut owner = vec![0; which.len()];
    for k in order {
        let m = (0..load.len())
            .min_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b)))
            .unwrap_or(0);
        load[m] += c(k);
        owner[k] = m;
    }
    owner
}

/// Appends a trained run: its result (JSON for the labels and counts, every float in binary
/// so it arrives with the same bits), its history and its parameters in declaration order.
fn put_trained(
    out: &mut Vec<u8>,
    (result, params): &Trained,
    rank: usize,
) -> Result<(), PaperError> {
    let json = serde_json::to_vec(result).map_err(|e| {
        PaperError::Train(TrainError::Rank {
            rank,
            message: format!("cannot encode a run's result: {e}"),
        })
    })?;
    wire::put_bytes(out, &json);
    for x in [result.value, result.paper, result.seconds] {
        wire::put_f64(out, x);
    }
    wire::put_f64(out, result.history.len() as f64);
    for h in &result.history {
        for x in [
            h.epoch as f64,
            h.train_loss,
            h.val_loss,
            h.seconds,
            h.samples_per_s,
        ] {
            wire::put_f64(out, x);
        }
    }
    for (_, v) in params.iter() {
        wire::put_reals(out, v.iter().copied());
    }
    Ok(())
}

/// Reads what [`put_trained`] wrote for `spec` (whose model gives the parameters' layout).
fn get_trained(r: &mut wire::Reader<'_>, spec: &RunSpec) -> Option<Trained> {
    let mut result: RunResult = serde_json::from_slice(r.bytes()?).ok()?;
    result.value = r.f64()?;
    result.paper = r.f64()?;
    result.seconds = r.f64()?;
    let n = r.f64()?;
    if !(0.0..=1e9).contains(&n) {
        return None;
    }
    result.history = (0..n as usize)
        .map(|_| {
            Some(EpochLog {
                epoch: r.f64()? as usize,
                train_loss: r.f64()?,
                val_loss: r.f64()?,
                seconds: r.f64()?,
                samples_per_s: r.f64()?,
            })
        })
        .collect::<Option<_>>()?;
    let mut params = spec.model.init::<f32>(spec.init_seed);
    for (_, v) in params.iter_mut() {
        let got = r.reals::<f32>(v.len())?;
        v.iter_mut().zip(got).for_each(|(a, b)| *a = b);
    }
    Some((result, params))
}
