//! The models' forward passes on the tape against independent, loop-by-loop f64
//! implementations written from the paper's description (PAPER.md §2.3–§2.4), plus exact
//! evaluation and training smoke runs.

use efa_model::batch::{Samples, Targets};
use efa_model::experiments::synthetic;
use efa_model::train::{evaluate, fit, predict, TrainConfig};
use efa_model::{
    register, Direction, EfaConfig, FmConfig, ModelConfig, Objective, Params, Positions, ValueTable,
};
use efa_tape::Tape;
use ndarray::{Array2, ArrayD};

fn mat(p: &Params<f64>, name: &str) -> Array2<f64> {
    p.get(name).unwrap().clone().into_dimensionality().unwrap()
}

fn vec1(p: &Params<f64>, name: &str) -> Vec<f64> {
    p.get(name).unwrap().iter().copied().collect()
}

/// `x·W + b` for one row.
fn affine(x: &[f64], w: &Array2<f64>, b: Option<&[f64]>) -> Vec<f64> {
    (0..w.ncols())
        .map(|j| (0..x.len()).map(|i| x[i] * w[[i, j]]).sum::<f64>() + b.map_or(0.0, |b| b[j]))
        .collect()
}

/// The EFA of PAPER.md §2.3 for one sample, written with plain loops.
fn efa_reference(
    cfg: &EfaConfig,
    p: &Params<f64>,
    tokens: &[usize],
    values: &[usize],
    len: usize,
    pred: usize,
) -> Vec<f64> {
    let n = tokens.len();
    let (h, k) = (cfg.heads, cfg.key_dim);
    let item = mat(p, "item_emb");
    let pos = mat(p, "pos_emb");
    let only_valid = cfg.positions.as_ref().is_some_and(|p| p.only_valid);
    let mut x: Vec<Vec<f64>> = (0..n)
        .map(|i| {
            let pad = tokens[i] == 0;
            let mut row: Vec<f64> = item.row(tokens[i]).to_vec();
            if pad && cfg.zero_padding {
                row.fill(0.0);
            }
            if cfg.values.is_some() {
                row.extend(mat(p, "value_emb").row(values[i]).iter());
            }
            if pad && only_valid {
                row
            } else {
                row.iter().zip(pos.row(i)).map(|(a, b)| a + b).collect()
            }
        })
        .collect();
    for l in 0..cfg.layers {
        let proj = |name: &str, x: &Vec<Vec<f64>>| -> Vec<Vec<f64>> {
            let w = mat(p, &format!("block{l}.attn.{name}.w"));
            let b = vec1(p, &format!("block{l}.attn.{name}.b"));
            x.iter().map(|r| affine(r, &w, Some(&b))).collect()
        };
        let (q, kk, v) = (proj("q", &x), proj("k", &x), proj("v", &x));
        let mut concat = vec![vec![0.0; h * k]; n];
        for head in 0..h {
            for i in 0..n {
                let visible: Vec<usize> = (0..n)
                    .filter(|&j| match cfg.direction {
                        Direction::Padding => j < len,
                        Direction::Causal => j <= i,
                        Direction::CausalPadding => j <= i && j < len,
                    })
                    .collect();
                let scores: Vec<f64> = visible
                    .iter()
                    .map(|&j| {
                        (0..k)
                            .map(|c| q[i][head * k + c] * kk[j][head * k + c])
                            .sum::<f64>()
                            / (k as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = scores.iter().map(|s| (s - m).exp()).sum();
                for (s, &j) in scores.iter().zip(&visible) {
                    let w = (s - m).exp() / z;
                    for c in 0..k {
                        concat[i][head * k + c] += w * v[j][head * k + c];
                    }
                }
            }
        }
        let wo = mat(p, &format!("block{l}.attn.o.w"));
        let bo = vec1(p, &format!("block{l}.attn.o.b"));
        for i in 0..n {
            let a = affine(&concat[i], &wo, Some(&bo));
            for (xi, ai) in x[i].iter_mut().zip(a) {
                *xi += ai;
            }
        }
    }
    let mut hdn = x[pred].clone();
    for i in 0..cfg.head_hidden.len() {
        let b = vec1(p, &format!("head{i}.b"));
        hdn = affine(&hdn, &mat(p, &format!("head{i}.w")), Some(&b))
            .into_iter()
            .map(|v| v.max(0.0))
            .collect();
    }
    let b = cfg.out_bias.then(|| vec1(p, "out.b"));
    affine(&hdn, &mat(p, "out.w"), b.as_deref())
}

fn tiny_rating_batch() -> Samples {
    // Three samples of width 4: lengths 4, 2, 1 (padding after), targets anywhere valid.
    Samples {
        tokens: Array2::from_shape_vec((3, 4), vec![1, 3, 2, 4, 2, 4, 0, 0, 3, 0, 0, 0]).unwrap(),
        values: Some(
            Array2::from_shape_vec((3, 4), vec![1, 5, 2, 3, 4, 5, 0, 0, 5, 0, 0, 0]).unwrap(),
        ),
        weights: Some(
            Array2::from_shape_vec(
                (3, 4),
                vec![2.0, -1.5, 3.0, 0.5, 4.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            )
            .unwrap(),
        ),
        center: Some(vec![2, 1, 4]),
        lengths: vec![4, 2, 1],
        pred_idx: vec![1, 1, 0],
        targets: Targets::Real(vec![1.0, -2.0, 3.5]),
        group: None,
    }
}

fn tape_eta(model: &ModelConfig, p: &Params<f64>, batch: &Samples) -> ArrayD<f64> {
    let mut tape = Tape::new();
    let vars = register(&mut tape, p).unwrap();
    let eta = model.forward(&mut tape, &vars, batch).unwrap();
    tape.value(eta).clone()
}

#[test]
fn efa_forward_matches_loop_reference_for_every_direction() {
    let batch = tiny_rating_batch();
    for direction in [
        Direction::Padding,
        Direction::Causal,
        Direction::CausalPadding,
    ] {
        let cfg = EfaConfig {
            items: 5,
            item_dim: 6,
            zero_padding: false,
            values: Some(ValueTable { rows: 6, dim: 4 }),
            positions: Some(Positions {
                max_len: 4,
                only_valid: false,
            }),
            layers: 2,
            heads: 2,
            key_dim: 3,
            ffn: None,
            norm: Default::default(),
            ln_eps: 1e-3,
            head_hidden: vec![5],
            out_dim: 2,
            out_bias: true,
            direction,
            continuous: None,
        };
        let p = cfg.init::<f64>(11);
        // Larger weights than the initialiser's, so attention is far from uniform.
        let p = scaled(&p, 4.0);
        let model = ModelConfig::Efa(cfg.clone());
        let eta = tape_eta(&model, &p, &batch);
        for s in 0..batch.len() {
            let want = efa_reference(
                &cfg,
                &p,
                batch.tokens.row(s).as_slice().unwrap(),
                batch.values.as_ref().unwrap().row(s).as_slice().unwrap(),
                batch.lengths[s],
                batch.pred_idx[s],
            );
            for (j, w) in want.iter().enumerate() {
                let got = eta[[s, j]];
                assert!(
                    (got - w).abs() <= 1e-12 * (1.0 + w.abs()),
                    "{direction:?} sample {s} out {j}: {got} vs {w}"
                );
            }
        }
    }
}

#[test]
fn item_efa_forward_matches_loop_reference_with_zeroed_padding() {
    // The item models (PAPER.md §3.4): no value table, padding rows zeroed and no position
    // embedding at padding; every direction, baskets of lengths 5, 3 and 1 in width 5.
    let tokens = Array2::from_shape_vec(
        (4, 5),
        vec![3, 1, 7, 2, 5, 4, 7, 6, 0, 0, 7, 0, 0, 0, 0, 2, 7, 3, 0, 0],
    )
    .unwrap();
    let batch = Samples {
        tokens: tokens.clone(),
        values: None,
        weights: None,
        center: None,
        lengths: vec![5, 3, 1, 3],
        pred_idx: vec![2, 1, 0, 1],
        targets: Targets::Class(vec![0, 1, 2, 3]),
        group: None,
    };
    for direction in [
        Direction::Padding,
        Direction::Causal,
        Direction::CausalPadding,
    ] {
        let cfg = EfaConfig {
            direction,
            ..efa_model::experiments::movielens::item_efa_config(6, 5, false)
        };
        let p = scaled(&cfg.init::<f64>(5), 3.0);
        let model = ModelConfig::Efa(cfg.clone());
        let eta = tape_eta(&model, &p, &batch);
        for s in 0..batch.len() {
            let want = efa_reference(
                &cfg,
                &p,
                tokens.row(s).as_slice().unwrap(),
                &[0; 5],
                batch.lengths[s],
                batch.pred_idx[s],
            );
            for (j, w) in want.iter().enumerate() {
                let got = eta[[s, j]];
                assert!(
                    (got - w).abs() <= 1e-12 * (1.0 + w.abs()),
                    "{direction:?} sample {s} out {j}: {got} vs {w}"
                );
            }
        }
    }
}

fn scaled(p: &Params<f64>, c: f64) -> Params<f64> {
    let mut q = p.clone();
    for (_, v) in q.iter_mut() {
        v.mapv_inplace(|x| x * c);
    }
    q
}

#[test]
fn rating_fm_is_the_rating_weighted_mean_dotted_with_the_center() {
    let batch = tiny_rating_batch();
    let model = ModelConfig::Fm(FmConfig::Rating { items: 5, dim: 3 });
    let p = scaled(&model.init::<f64>(3), 10.0);
    let eta = tape_eta(&model, &p, &batch);
    let (alpha, rho) = (mat(&p, "alpha"), mat(&p, "rho"));
    let w = batch.weights.as_ref().unwrap();
    for s in 0..batch.len() {
        let mut c = [0.0; 3];
        for j in 0..4 {
            for d in 0..3 {
                c[d] += w[[s, j]] * alpha[[batch.tokens[[s, j]], d]] / batch.lengths[s] as f64;
            }
        }
        let center = batch.center.as_ref().unwrap()[s];
        let want: f64 = (0..3).map(|d| rho[[center, d]] * c[d]).sum();
        assert!(
            (eta[[s, 0]] - want).abs() < 1e-12,
            "sample {s}: {} vs {want}",
            eta[[s, 0]]
        );
    }
}

#[test]
fn item_fm_ignores_padding_and_sums_context_rows() {
    let model = ModelConfig::Fm(FmConfig::Item {
        tokens: 6,
        dim: 4,
        classes: 3,
    });
    let p = scaled(&model.init::<f64>(5), 10.0);
    let batch = Samples {
        tokens: Array2::from_shape_vec((2, 3), vec![1, 5, 0, 0, 0, 0]).unwrap(),
        values: None,
        weights: None,
        center: None,
        lengths: vec![2, 0],
        pred_idx: vec![0, 0],
        targets: Targets::Class(vec![0, 2]),
        group: None,
    };
    let eta = tape_eta(&model, &p, &batch);
    let (alpha, w) = (mat(&p, "alpha"), mat(&p, "out.w"));
    for c in 0..3 {
        let want: f64 = (0..4)
            .map(|d| (alpha[[1, d]] + alpha[[5, d]]) * w[[d, c]])
            .sum();
        assert!((eta[[0, c]] - want).abs() < 1e-12);
        // An all-padding context gives η = 0 (uniform probabilities; no bias anywhere).
        assert_eq!(eta[[1, c]], 0.0);
    }
}

#[test]
fn evaluation_is_the_exact_mean_whatever_the_batch_size() {
    let (model, batch) = synthetic::audit_batch(false, true, 23).unwrap();
    let p = model.init::<f64>(1);
    let eta = predict(&model, &p, &batch, 5).unwrap();
    let Targets::Real(y) = &batch.targets else {
        panic!("real targets")
    };
    let want = y
        .iter()
        .enumerate()
        .map(|(i, y)| (eta[[i, 0]] - y).powi(2))
        .sum::<f64>()
        / y.len() as f64;
    for bs in [1, 4, 23, 100] {
        let got = evaluate(&model, &Objective::Mse, &p, &batch, bs).unwrap();
        assert!(
            (got - want).abs() <= 1e-12 * want,
            "batch {bs}: {got} vs {want}"
        );
    }
}

#[test]
fn training_lowers_the_loss_and_restores_the_best_weights() {
    let data = synthetic::data(200).unwrap();
    for efa in [false, true] {
        let cfg = TrainConfig {
            lr: 3e-3,
            batch_size: 64,
            max_epochs: 6,
            patience: 3,
            seed: 5,
            eval_batch: 128,
            batching: Default::default(),
        };
        let spec = synthetic::spec(&data, false, efa, cfg.clone(), 9).unwrap();
        let mut p = spec.model.init::<f32>(9);
        let before = evaluate(&spec.model, &spec.objective, &p, &spec.val, 128).unwrap();
        let fit = fit(
            &spec.model,
            &spec.objective,
            &mut p,
            &spec.train,
            &spec.val,
            &cfg,
            &mut |_| {},
        )
        .unwrap();
        let after = evaluate(&spec.model, &spec.objective, &p, &spec.val, 128).unwrap();
        assert!(after < 0.9 * before, "efa={efa}: val {before} -> {after}");
        // The restored weights are exactly the best epoch's: same validation loss.
        assert_eq!(after, fit.best_val, "efa={efa}");
        let best = fit
            .history
            .iter()
            .map(|h| h.val_loss)
            .fold(f64::INFINITY, f64::min);
        assert_eq!(best, fit.best_val);
        assert_eq!(fit.history[fit.best_epoch - 1].val_loss, fit.best_val);
    }
}

#[test]
fn training_is_bitwise_deterministic_for_a_seed() {
    let data = synthetic::data(80).unwrap();
    let cfg = TrainConfig {
        lr: 1e-3,
        batch_size: 32,
        max_epochs: 2,
        patience: 5,
        seed: 3,
        eval_batch: 64,
        batching: Default::default(),
    };
    let spec = synthetic::spec(&data, true, true, cfg.clone(), 4).unwrap();
    assert_eq!(trained_bits(&spec, &cfg, 1), trained_bits(&spec, &cfg, 1));
}

#[test]
fn micro_batched_gradients_equal_the_mean_of_per_sample_gradients() {
    // 300 samples run as micro-batches of 128, 128 and 44 in parallel; the loss and every
    // gradient must equal the mean over single-sample tapes (f64, up to round-off).
    let (model, batch) = synthetic::audit_batch(false, true, 300).unwrap();
    assert!(batch.len() > efa_model::train::MICRO_BATCH);
    let p = model.init::<f64>(2);
    let (loss, grads) =
        efa_model::train::loss_and_grads(&model, &Objective::Mse, &p, &batch).unwrap();
    let n = batch.len() as f64;
    let mut want_loss = 0.0;
    let mut want: Vec<ArrayD<f64>> = grads.iter().map(|g| ArrayD::zeros(g.raw_dim())).collect();
    for i in 0..batch.len() {
        let (l, g) =
            efa_model::train::loss_and_grads(&model, &Objective::Mse, &p, &batch.select(&[i]))
                .unwrap();
        want_loss += l / n;
        for (w, gi) in want.iter_mut().zip(&g) {
            w.scaled_add(1.0 / n, gi);
        }
    }
    assert!(
        (loss - want_loss).abs() <= 1e-12 * want_loss,
        "{loss} vs {want_loss}"
    );
    for ((name, _), (g, w)) in p.iter().zip(grads.iter().zip(&want)) {
        for (a, b) in g.iter().zip(w.iter()) {
            assert!(
                (a - b).abs() <= 1e-11 * (1.0 + b.abs()),
                "{name}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn training_gives_the_same_bits_with_one_and_two_threads() {
    // Batches of 200 are split into parallel micro-batches; the result must not depend on
    // the number of threads.
    let data = synthetic::data(120).unwrap();
    let cfg = TrainConfig {
        lr: 1e-3,
        batch_size: 200,
        max_epochs: 2,
        patience: 5,
        seed: 3,
        eval_batch: 100,
        batching: Default::default(),
    };
    let spec = synthetic::spec(&data, false, true, cfg.clone(), 4).unwrap();
    assert_eq!(trained_bits(&spec, &cfg, 1), trained_bits(&spec, &cfg, 2));
}

/// Trains `spec`'s model from seed 4 in a pool of `threads` threads; the parameters' bits.
fn trained_bits(
    spec: &efa_model::experiments::RunSpec,
    cfg: &TrainConfig,
    threads: usize,
) -> Vec<u32> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| {
        let mut p = spec.model.init::<f32>(4);
        fit(
            &spec.model,
            &spec.objective,
            &mut p,
            &spec.train,
            &spec.val,
            cfg,
            &mut |_| {},
        )
        .unwrap();
        p.iter()
            .flat_map(|(_, v)| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
            .collect()
    })
}
