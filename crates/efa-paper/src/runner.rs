//! Runs several training runs at once: `workers` OS threads, each with its own rayon pool of
//! `threads / workers` threads, take runs from a queue longest-first (by a cost estimate).
//! Results come back in the runs' order. A run's numbers do not depend on which worker ran it
//! or how many threads it had (training is bitwise independent of the thread count), so
//! running runs side by side only changes wall time: two one-thread runs use a 2-core machine
//! better than two two-thread runs one after the other.

use crate::{run, PaperError, RunResult, RunSpec};
use efa_model::ModelConfig;
use efa_nn::params::Params;
use efa_train::history::EpochLog;
use efa_train::Threads;
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
    let workers = workers(threads, specs.len());
    let per_worker = (threads / workers).max(1);
    let mut order: Vec<usize> = (0..specs.len()).collect();
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
    results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.ok_or(PaperError::Unfinished { index: i }))
        .collect()
}
