//! The sharded computation of a multi-process job, through the in-process simulated group:
//! each member computes its round-robin share of every wave of micro-batches and evaluation
//! chunks, the members exchange them, and every member folds all of them in micro-batch
//! order. Losses, gradients, evaluations and whole training runs must be bit-identical to one
//! process at every group size (1–5), thread count and batching, with uneven micro-batch
//! counts (the share of the last member is smaller or empty).

use efa_model::Samples;
use efa_train::collective::{Collective, SimGroup, Solo};
use efa_train::evaluator::MICRO_BATCH;
use efa_train::userdata::{build, read_csv, UserConfig};
use efa_train::{fit, Batching, Evaluator, FitOptions, Threads, TrainConfig, TrainError};
use std::path::{Path, PathBuf};

use efa_testkit::scratch;

const CONFIG: &str = "direction = \"bi\"\n[family]\nkind = \"poisson\"\n[model.efa]\nitems = 6\nitem_dim = 4\nlayers = 1\nheads = 2\nkey_dim = 2\nout_dim = 1\nout_bias = true\nvalues = { rows = 8, dim = 2 }\npositions = { max_len = 12 }\n[train]\nlr = 0.01\nbatch_size = 600\nmax_epochs = 3\npatience = 3\nseed = 5\neval_batch = 100\n";

/// `n` sequences of 2–11 rows with fixed item and value patterns (about 6.5 rows each).
fn write_csv(dir: &Path, n: usize) -> PathBuf {
    let mut s = String::from("seq,order,item,value\n");
    for k in 0..n {
        for o in 0..2 + k % 10 {
            s += &format!("s{k},{o},{},{}\n", 1 + (k * 3 + o) % 5, (k + 2 * o) % 6);
        }
    }
    let p = dir.join(format!("seqs{n}.csv"));
    std::fs::write(&p, s).unwrap();
    p
}

fn setup(n: usize, tag: &str) -> (UserConfig, Samples) {
    let dir = scratch::scratch(tag);
    let cfg = UserConfig::from_toml(CONFIG, Path::new("c.toml"))
        .unwrap()
        .0;
    let data = read_csv(&write_csv(&dir, n), &cfg).unwrap();
    let set = build(&data, &cfg).samples;
    let mut dense = set.dense();
    // Sequence ids, so both batchings apply.
    let mut seq = Vec::new();
    for (k, s) in data.sequences.iter().enumerate() {
        seq.extend(std::iter::repeat_n(k, s.len()));
    }
    dense.group = Some(seq);
    (cfg, dense)
}

/// Runs `f(member)` on every member of a simulated group of `size`, one thread each, and
/// returns the results in rank order.
fn on_group<R: Send>(size: usize, f: impl Fn(&SimGroup) -> R + Sync) -> Vec<R> {
    let group = SimGroup::new(size);
    std::thread::scope(|s| {
        let handles: Vec<_> = group.iter().map(|m| s.spawn(|| f(m))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn bits32(g: &[ndarray::ArrayD<f32>]) -> Vec<u32> {
    g.iter()
        .flat_map(|a| a.iter().map(|x| x.to_bits()))
        .collect()
}

#[test]
fn one_minibatch_loss_gradients_and_evaluation_are_bit_identical_at_every_group_size() {
    // 100 sequences, about 650 samples: 6 micro-batches of 128 (the last one shorter), so
    // groups of 4 and 5 get uneven shares and, in one wave, some members none.
    let (cfg, batch) = setup(100, "efa-shard-step");
    let n_micro = batch.len().div_ceil(MICRO_BATCH);
    assert!(n_micro >= 5, "{n_micro} micro-batches");
    let objective = cfg.objective();
    let params = cfg.model.init::<f32>(3);
    for threads in [1, 2] {
        let threads = Threads::new(threads).unwrap();
        let solo = Evaluator::new(&cfg.model, &objective).with_threads(&threads);
        let (l0, g0) = solo.loss_and_grads(&params, &batch).unwrap();
        let e0 = solo.evaluate(&params, &batch, 40).unwrap();
        for size in 1..=5 {
            let got = on_group(size, |m| {
                let eval = solo.with_group(m);
                let (l, g) = eval.loss_and_grads(&params, &batch).unwrap();
                let e = eval.evaluate(&params, &batch, 40).unwrap();
                (l.to_bits(), bits32(&g), e.to_bits())
            });
            for (rank, (l, g, e)) in got.iter().enumerate() {
                assert_eq!(*l, l0.to_bits(), "size {size} rank {rank} loss");
                assert_eq!(g, &bits32(&g0), "size {size} rank {rank} gradients");
                assert_eq!(*e, e0.to_bits(), "size {size} rank {rank} evaluation");
            }
        }
    }
}

#[test]
fn training_is_bit_identical_at_every_group_size_and_batching() {
    let (cfg, all) = setup(120, "efa-shard-fit");
    let (train, val) = (
        all.select(&(0..600).collect::<Vec<_>>()),
        all.select(&(600..all.len()).collect::<Vec<_>>()),
    );
    let objective = cfg.objective();
    for batching in [Batching::Samples, Batching::Sequences] {
        let tc = TrainConfig {
            batching,
            ..cfg.train.clone()
        };
        let run = |group: &dyn Collective, threads: usize| {
            let threads = Threads::new(threads).unwrap();
            let eval = Evaluator::new(&cfg.model, &objective)
                .with_threads(&threads)
                .with_group(group);
            let mut p = cfg.model.init::<f32>(cfg.init_seed);
            let r = fit(&eval, &mut p, &train, &val, &tc, FitOptions::default()).unwrap();
            let losses: Vec<(u64, u64)> = r
                .history
                .iter()
                .map(|h| (h.train_loss.to_bits(), h.val_loss.to_bits()))
                .collect();
            let p: Vec<ndarray::ArrayD<f32>> = p.iter().map(|(_, v)| v.clone()).collect();
            (bits32(&p), losses, r.best_epoch)
        };
        let want = run(&Solo, 2);
        for size in 2..=5 {
            for got in on_group(size, |m| run(m, 1 + m.rank() % 2)) {
                assert_eq!(got, want, "{batching:?}, {size} members");
            }
        }
    }
}

#[test]
fn an_error_on_one_member_is_an_error_on_every_member_naming_it() {
    // One member evaluates a batch whose target is outside the model: its error reaches the
    // others through the exchange instead of leaving them waiting.
    let (cfg, batch) = setup(100, "efa-shard-error");
    let objective = cfg.objective();
    let params = cfg.model.init::<f32>(3);
    let mut bad = batch.clone();
    bad.tokens[[0, 0]] = 99; // item 99 of a 6-row table, in the first micro-batch
    let errors = on_group(3, |m| {
        let eval = Evaluator::new(&cfg.model, &objective).with_group(m);
        let b = if m.rank() == 0 { &bad } else { &batch };
        eval.loss_and_grads(&params, b).unwrap_err()
    });
    for (rank, e) in errors.iter().enumerate() {
        match e {
            TrainError::Rank { rank: r, .. } if rank != 0 => assert_eq!(*r, 0, "{e}"),
            TrainError::Rank { .. } => panic!("rank 0 reports its own error: {e}"),
            _ if rank == 0 => {}
            other => panic!("rank {rank}: {other}"),
        }
    }
}
