//! Runs several training runs at once: `workers` OS threads, each with its own rayon pool of
//! `threads / workers` threads, take runs from a queue longest-first (by a cost estimate) and
//! show a progress bar per run. Results come back in the runs' order. A run's numbers do not
//! depend on which worker ran it or how many threads it had (training is bitwise independent of
//! the thread count), so running runs side by side only changes wall time: two one-thread runs
//! use a 2-core machine better than two two-thread runs one after the other.

use crate::report::{epoch_bar, on_epoch};
use crate::CliError;
use efa_model::experiments::{run, RunResult, RunSpec};
use efa_model::Params;
use indicatif::MultiProgress;
use std::collections::VecDeque;
use std::sync::Mutex;

/// A rough cost of a run: training samples × epochs × positions per sample × blocks (for
/// ordering the queue only).
fn cost(spec: &RunSpec) -> f64 {
    let layers = match &spec.model {
        efa_model::ModelConfig::Efa(c) => c.layers.max(1) as f64,
        efa_model::ModelConfig::Fm(_) => 0.1,
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

/// Trains every spec (`workers` at a time, `threads` in all) behind a progress bar each and
/// prints a summary line per finished run; returns the results in the order of `specs`.
pub fn run_all(specs: &[RunSpec], threads: usize, quiet: bool) -> Result<Vec<Trained>, CliError> {
    let workers = workers(threads, specs.len());
    let per_worker = (threads / workers).max(1);
    let mut order: Vec<usize> = (0..specs.len()).collect();
    order.sort_by(|&a, &b| cost(&specs[b]).total_cmp(&cost(&specs[a])).then(a.cmp(&b)));
    let queue = Mutex::new(order.into_iter().collect::<VecDeque<usize>>());
    let results: Mutex<Vec<Option<Trained>>> = Mutex::new((0..specs.len()).map(|_| None).collect());
    let first_error: Mutex<Option<CliError>> = Mutex::new(None);
    let bars = MultiProgress::new();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                let pool = match rayon::ThreadPoolBuilder::new()
                    .num_threads(per_worker)
                    .build()
                {
                    Ok(p) => p,
                    Err(e) => {
                        let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                        slot.get_or_insert(CliError::new(format!("thread pool: {e}")));
                        return;
                    }
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
                    let label = format!("{} {}", spec.model.kind(), spec.setting);
                    let bar = bars.add(epoch_bar(&label, spec.train_config.max_epochs, quiet));
                    let out = pool.install(|| run(spec, &mut |log| on_epoch(&bar, log)));
                    bar.finish_and_clear();
                    match out {
                        Ok((r, p)) => {
                            let per_epoch = r.history.iter().map(|h| h.seconds).sum::<f64>()
                                / r.history.len().max(1) as f64;
                            errln!(
                                "{} {}: test {} {:.6} (paper {:.3}), {} epochs, best {}, {:.1}s \
                                 ({:.2} s/epoch, {} train samples)",
                                r.model,
                                r.setting,
                                r.metric,
                                r.value,
                                r.paper,
                                r.epochs,
                                r.best_epoch,
                                r.seconds,
                                per_epoch,
                                spec.train.len()
                            );
                            results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some((r, p));
                        }
                        Err(e) => {
                            let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                            slot.get_or_insert(crate::common::cli(e));
                        }
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
        .map(|r| r.ok_or_else(|| CliError::new("a run did not finish")))
        .collect()
}
