//! Training throughput (criterion): Adam steps of the synthetic experiment's EFA model
//! (unidirectional and bidirectional, the paper's batch 256) through
//! `efa_train::fit::train_epoch` on all cores on a fixed 2,048-sample subset of the training set (8
//! minibatches per iteration), reported as samples per second (`Throughput::Elements`), beside
//! a matrixmultiply sgemm 2048³ ceiling measured in the same run. The tape's FLOP count of one
//! iteration (matmul and attention FLOPs, `efa_tape::stats`) is printed once per model, so
//! GFLOP/s = samples/s × FLOPs/sample. `efa bench train` times whole epochs of all three
//! experiments. Quick run: `cargo bench --bench train -- --warm-up-time 1 --measurement-time 3`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use efa_data::samples::Direction;
use efa_paper::{synthetic, ModelKind};
use efa_train::fit::train_epoch;
use efa_train::schedule::new_adam;
use efa_train::{Threads, TrainConfig};
use rand::SeedableRng;
use std::hint::black_box;
use std::time::Duration;

#[path = "common/ceiling.rs"]
mod ceiling;

/// Samples per iteration: 8 minibatches of the paper's 256.
const SUBSET: usize = 2048;

fn train(c: &mut Criterion) {
    // 2,000 users give about 5,600 training samples per direction, more than SUBSET.
    let data = synthetic::data(2000).expect("synthetic data");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = Threads::new(cores).expect("threads");
    let mut g = c.benchmark_group("train");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (uni, dir) in [(true, Direction::Uni), (false, Direction::Bi)] {
        let spec =
            synthetic::spec(&data, dir, ModelKind::Efa, TrainConfig::paper(1, 0), 0).expect("spec");
        let n = SUBSET.min(spec.train.len());
        let subset = spec.train.select(&(0..n).collect::<Vec<_>>());
        let cfg = &spec.train_config;
        let eval = spec.evaluator().with_threads(&threads);
        let mut params = spec.model.init::<f32>(spec.init_seed);
        let mut adam = new_adam(cfg).expect("adam");
        let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
        let mut order: Vec<usize> = (0..n).collect();
        let mut step = || {
            train_epoch(
                &eval,
                &mut params,
                &mut adam,
                &subset,
                cfg,
                &mut rng,
                &mut order,
            )
            .expect("training step")
            .0
        };
        let f0 = efa_tape::flops();
        step();
        let per_sample = (efa_tape::flops() - f0) as f64 / n as f64;
        let id = if uni {
            "synthetic_efa_uni"
        } else {
            "synthetic_efa_bi"
        };
        eprintln!(
            "train/{id}: {n} samples per iteration, {per_sample:.0} FLOPs per sample \
             (matmul and attention)"
        );
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(BenchmarkId::new("epoch_subset", id), |bench| {
            bench.iter(|| black_box(step()))
        });
    }
    g.finish();
}

criterion_group!(benches, ceiling::sgemm_ceiling, train);
criterion_main!(benches);
