//! Memory the engine owns (docs/design.md §3b): after the first epoch, a training step of the
//! temperature models (four blocks, with and without two lag days), of the item-sequence
//! models (baskets of many lengths, uni- and bidirectional) and of the synthetic model makes
//! no allocation of 64 KiB or more. Every large buffer a step needs (the tape's values
//! and gradients, the fused blocks' saved state and scratch, the gathers' index arrays, the
//! micro-batches' inputs) comes from the worker's cache (`efa_num::pool`), filled by the first
//! epoch.
//!
//! Its own test binary: the counting allocator below is this binary's global allocator, and
//! no other test runs beside this one.

use efa_data::samples::Direction;
use efa_data::temperature::{City, TempDay};
use efa_model::{ModelConfig, Objective, Params, Samples};
use efa_paper::movielens::items as movielens;
use efa_paper::{synthetic, temperature, ModelKind};
use efa_train::fit::train_epoch;
use efa_train::schedule::new_adam;
use efa_train::{Batching, Evaluator, Threads, TrainConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// Blocks of at least this many bytes count as large.
const LARGE: usize = 64 << 10;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LARGE_COUNT: AtomicU64 = AtomicU64::new(0);

/// The system allocator, counting large blocks (a growth to a large size counts) while
/// [`COUNTING`] is set.
struct Counting;

thread_local! {
    /// Set while this thread prints a backtrace (whose own allocations are not counted).
    static TRACING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether to print where each counted allocation came from (`EFA_ALLOC_TRACE=1`).
static TRACE: AtomicBool = AtomicBool::new(false);

impl Counting {
    fn count(size: usize) {
        if size < LARGE || !COUNTING.load(Relaxed) {
            return;
        }
        if TRACING.try_with(|t| t.get()).unwrap_or(true) {
            return;
        }
        LARGE_COUNT.fetch_add(1, Relaxed);
        if TRACE.load(Relaxed) {
            let _ = TRACING.try_with(|t| {
                t.set(true);
                let bt = std::backtrace::Backtrace::force_capture();
                eprintln!("large allocation of {size} bytes:\n{bt}");
                t.set(false);
            });
        }
    }
}

// SAFETY: every call is forwarded to the system allocator with the caller's arguments;
// `count` only reads and adds to atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::count(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::count(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(p, layout) }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        if size > layout.size() {
            Self::count(size);
        }
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(p, layout, size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Forty cities on a grid of the paper's latitudes and longitudes (degrees).
fn cities() -> Vec<City> {
    (0..40)
        .map(|i| City {
            state: format!("S{i}"),
            city: format!("C{i}"),
            latitude: 26.0 + (i % 8) as f64 * 2.5,
            longitude: -122.0 + (i / 8) as f64 * 11.0,
        })
        .collect()
}

/// `count` days of the cities' temperatures in °F, with `lags` previous days each.
fn days(n: usize, lags: usize, count: u32) -> Vec<TempDay> {
    let t = |d: f64, k: f64| -> Vec<f64> {
        let trend = 2.0 * ((d - 1.0) % 32.0 + 1.0);
        (0..n)
            .map(|c| 55.0 + 12.0 * ((c as f64) * 1.3 + d * 0.7 + k * 0.4).sin() - trend)
            .collect()
    };
    (1..=count)
        .map(|day| TempDay {
            date: (2010 + (day / 336) as i32, 1 + (day / 28) % 12, 1 + day % 28),
            temps: t(day as f64, 0.0),
            lags: (1..=lags).map(|l| t(day as f64, -(l as f64))).collect(),
        })
        .collect()
}

/// Large allocations in each of `epochs` epochs of training `model` on `train` (f32, Adam,
/// the worker threads of `threads`, minibatches of `batch` samples formed as `batching` says:
/// with more than one micro-batch each, so two workers run micro-batches side by side). With
/// `same_order`, every epoch visits the samples in the first epoch's order (the same
/// micro-batch shapes in the same sequence; the parameters still change).
fn large_per_epoch(
    model: &ModelConfig,
    objective: &Objective,
    train: &Samples,
    (batch, batching): (usize, Batching),
    epochs: usize,
    (same_order, threads): (bool, &Threads),
) -> Vec<u64> {
    // From an empty cache, so that the first epoch shows what the model needs.
    efa_num::pool::release();
    let eval = Evaluator::new(model, objective).with_threads(threads);
    let mut params: Params<f32> = model.init(0);
    let cfg = TrainConfig {
        lr: 1e-4,
        batch_size: batch,
        max_epochs: epochs,
        patience: epochs,
        seed: 0,
        eval_batch: 256,
        batching,
    };
    let mut adam = new_adam(&cfg).expect("adam");
    let mut rng = StdRng::seed_from_u64(0);
    let mut order: Vec<usize> = (0..train.len()).collect();
    let mut out = Vec::new();
    for epoch in 0..epochs {
        if TRACE.load(Relaxed) {
            eprintln!("epoch {epoch}");
        }
        if same_order {
            rng = StdRng::seed_from_u64(0);
            order = (0..train.len()).collect();
        }
        let before = LARGE_COUNT.load(Relaxed);
        COUNTING.store(true, Relaxed);
        let r = train_epoch(
            &eval,
            &mut params,
            &mut adam,
            train,
            &cfg,
            &mut rng,
            &mut order,
        );
        COUNTING.store(false, Relaxed);
        let (loss, _) = r.expect("epoch");
        assert!(loss.is_finite());
        out.push(LARGE_COUNT.load(Relaxed) - before);
        if TRACE.load(Relaxed) {
            eprintln!(
                "held {} MB, counts {:?}",
                efa_num::pool::held() >> 20,
                efa_num::pool::counts()
            );
        }
    }
    out
}

#[test]
fn a_steady_state_training_step_allocates_nothing_large() {
    TRACE.store(std::env::var_os("EFA_ALLOC_TRACE").is_some(), Relaxed);
    let cities = cities();
    let mut report = Vec::new();
    // The workers, for every model: a pool built per model would still be exiting (its
    // threads giving their scratch back to the cache) while the next one is measured.
    let (one, two) = (Threads::new(1).unwrap(), Threads::new(2).unwrap());
    for (layers, lag) in [(4, 0), (4, 2)] {
        let model = ModelConfig::Efa(temperature::efa_config(&cities, layers, lag));
        let train = temperature::efa_samples(&days(cities.len(), lag, 32), cities.len()).unwrap();
        // Whole days per minibatch: the micro-batches' shapes, which for these models
        // include how many distinct inputs and days they hold, recur every epoch.
        let batches = (512, Batching::Sequences);
        let counts = large_per_epoch(&model, &Objective::Mse, &train, batches, 3, (false, &two));
        report.push((format!("temperature L={layers} lag {lag}"), counts));
    }
    // Samples shuffled one by one (the lag models' default batching): a micro-batch holds
    // some of many days and contexts (the shared-context plan), of another size every time.
    // Shuffled anew each epoch, a later micro-batch may hold more distinct inputs than any
    // before it and allocate that once; in the first epoch's order, nothing new. One worker:
    // with two, which worker first meets the largest of these shapes (and grows its own
    // scratch, or brings both workers' peaks of a size together) changes from run to run,
    // so a later epoch may still allocate a few blocks once.
    {
        let model = ModelConfig::Efa(temperature::efa_config(&cities, 2, 1));
        // Enough days that a micro-batch's contexts (one per day it holds) make index arrays
        // and gathers of more than 64 KiB.
        let train = temperature::efa_samples(&days(cities.len(), 1, 160), cities.len()).unwrap();
        let batches = (128, Batching::Samples);
        let counts = large_per_epoch(&model, &Objective::Mse, &train, batches, 3, (true, &one));
        report.push(("temperature L=2 lag 1, samples".to_string(), counts));
    }
    // Item sequences of many lengths (the MovieLens and Instacart item models, EFA and FM):
    // micro-batches of samples sorted by target position are trimmed to different widths, so
    // the kernels see a different problem shape in nearly every micro-batch. Shuffled anew
    // each epoch, a later epoch may bring a micro-batch wider than any before it (which
    // allocates once); in the first epoch's order, the later epochs must reuse what the first
    // one left (one worker, as above). Enough items for the tables' gradients to be large.
    let (n_items, max_len) = (600, 40);
    let mut rng = StdRng::seed_from_u64(7);
    let baskets: Vec<Vec<usize>> = (0..240)
        .map(|_| {
            let u: f64 = rng.random();
            let len = 2 + (38.0 * u * u * u) as usize;
            (0..len).map(|_| rng.random_range(1..=n_items)).collect()
        })
        .collect();
    for (uni, efa) in [(true, true), (false, true), (true, false), (false, false)] {
        let model = if efa {
            ModelConfig::Efa(movielens::item_efa_config(n_items, max_len, uni))
        } else {
            ModelConfig::Fm(movielens::item_fm_config(n_items, uni))
        };
        let train = movielens::item_input(&baskets, n_items, max_len, uni, efa).unwrap();
        let batches = (256, Batching::Samples);
        let order = (true, &one);
        let counts = large_per_epoch(&model, &Objective::CrossEntropy, &train, batches, 3, order);
        let dir = if uni { "uni" } else { "bi" };
        let kind = if efa { "EFA" } else { "FM" };
        report.push((format!("item sequences {kind} {dir}"), counts));
    }
    let (model, train) = synthetic::audit_batch(Direction::Uni, ModelKind::Efa, 1000).unwrap();
    let batches = (512, Batching::Samples);
    let counts = large_per_epoch(&model, &Objective::Mse, &train, batches, 3, (false, &two));
    report.push(("synthetic EFA uni".to_string(), counts));
    // The first epoch fills the caches: it must have allocated (or the models are too small
    // for this test to see anything); the later ones allocate nothing large.
    let bad: Vec<String> = report
        .iter()
        .filter(|(_, c)| c[0] == 0 || c[1..].iter().any(|&c| c > 0))
        .map(|(name, c)| format!("{name}: large allocations per epoch {c:?}"))
        .collect();
    assert!(
        bad.is_empty(),
        "expected some in the first epoch and none after (EFA_ALLOC_TRACE=1 prints where \
         each comes from):\n{}",
        bad.join("\n")
    );
}
