//! The models' forward passes on the tape against independent, loop-by-loop f64
//! implementations written from the paper's description (docs/paper.md §2.3–§2.4, in
//! `loop_reference`), plus exact evaluation and training smoke runs.

use crate::loop_reference::{efa_reference, mat, temperature_reference};
use efa_data::samples::Direction;
use efa_model::batch::{Samples, Targets};
use efa_model::{
    EfaConfig, FmConfig, ForwardPlan, ModelConfig, Objective, Params, Positions, ValueTable,
    Visibility,
};
use efa_paper::synthetic;
use efa_paper::ModelKind;
use efa_tape::Tape;
use efa_train::evaluator::MICRO_BATCH;
use efa_train::{fit, Evaluator, FitOptions, Threads, TrainConfig};
use ndarray::{Array2, ArrayD};

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

/// η by every forward plan that applies to the model and batch (each is checked against the
/// loop reference by the callers), and by the automatic choice; all must agree.
fn tape_eta(model: &ModelConfig, p: &Params<f64>, batch: &Samples) -> ArrayD<f64> {
    let eta_of = |plan: ForwardPlan| {
        let mut tape = Tape::new();
        let reg = model.register(&mut tape, p).unwrap();
        let eta = model.forward(&mut tape, &reg.vars, batch, plan).unwrap();
        tape.value(eta).clone()
    };
    let auto = eta_of(model.plan_for(batch, None).unwrap());
    for plan in ForwardPlan::ALL {
        if model.plan_for(batch, Some(plan)).is_ok() {
            let eta = eta_of(plan);
            for (a, b) in eta.iter().zip(auto.iter()) {
                assert!(
                    (a - b).abs() <= 1e-12 * (1.0 + b.abs()),
                    "plan {plan}: {a} vs {b}"
                );
            }
        }
    }
    auto
}

#[test]
fn efa_forward_matches_loop_reference_for_every_direction() {
    let batch = tiny_rating_batch();
    for direction in [
        Visibility::Padding,
        Visibility::Causal,
        Visibility::CausalPadding,
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
    // The item models (docs/paper.md §3.4): no value table, padding rows zeroed and no position
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
        Visibility::Padding,
        Visibility::Causal,
        Visibility::CausalPadding,
    ] {
        let cfg = EfaConfig {
            direction,
            ..efa_paper::movielens::item_efa_config(6, 5, false)
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
    let (model, batch) = synthetic::audit_batch(Direction::Bi, ModelKind::Efa, 23).unwrap();
    let p = model.init::<f64>(1);
    let eta = Evaluator::new(&model, &Objective::Mse)
        .predict(&p, &batch, 5)
        .unwrap();
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
        let got = Evaluator::new(&model, &Objective::Mse)
            .evaluate(&p, &batch, bs)
            .unwrap();
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
        let spec = synthetic::spec(&data, Direction::Bi, kind(efa), cfg.clone(), 9).unwrap();
        let mut p = spec.model.init::<f32>(9);
        let before = spec.evaluator().evaluate(&p, &spec.val, 128).unwrap();
        let fit = fit(
            &spec.evaluator(),
            &mut p,
            &spec.train,
            &spec.val,
            &cfg,
            FitOptions::default(),
        )
        .unwrap();
        let after = spec.evaluator().evaluate(&p, &spec.val, 128).unwrap();
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
    let spec = synthetic::spec(&data, Direction::Uni, ModelKind::Efa, cfg.clone(), 4).unwrap();
    assert_eq!(trained_bits(&spec, &cfg, 1), trained_bits(&spec, &cfg, 1));
}

#[test]
fn micro_batched_gradients_equal_the_mean_of_per_sample_gradients() {
    // 300 samples run as micro-batches of 128, 128 and 44 in parallel; the loss and every
    // gradient must equal the mean over single-sample tapes (f64, up to round-off).
    let (model, batch) = synthetic::audit_batch(Direction::Bi, ModelKind::Efa, 300).unwrap();
    assert!(batch.len() > MICRO_BATCH);
    let p = model.init::<f64>(2);
    let (loss, grads) = Evaluator::new(&model, &Objective::Mse)
        .loss_and_grads(&p, &batch)
        .unwrap();
    let n = batch.len() as f64;
    let mut want_loss = 0.0;
    let mut want: Vec<ArrayD<f64>> = grads.iter().map(|g| ArrayD::zeros(g.raw_dim())).collect();
    for i in 0..batch.len() {
        let (l, g) = Evaluator::new(&model, &Objective::Mse)
            .loss_and_grads(&p, &batch.select(&[i]))
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
    let spec = synthetic::spec(&data, Direction::Bi, ModelKind::Efa, cfg.clone(), 4).unwrap();
    assert_eq!(trained_bits(&spec, &cfg, 1), trained_bits(&spec, &cfg, 2));
}

/// Trains `spec`'s model from seed 4 on `threads` threads; the parameters' bits.
fn trained_bits(spec: &efa_paper::RunSpec, cfg: &TrainConfig, threads: usize) -> Vec<u32> {
    let threads = Threads::new(threads).unwrap();
    let mut p = spec.model.init::<f32>(4);
    fit(
        &spec.evaluator().with_threads(&threads),
        &mut p,
        &spec.train,
        &spec.val,
        cfg,
        FitOptions::default(),
    )
    .unwrap();
    p.iter()
        .flat_map(|(_, v)| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
        .collect()
}

#[test]
fn temperature_efa_forward_matches_loop_reference() {
    use efa_data::temperature::{City, TempDay};
    use efa_paper::temperature;
    let cities: Vec<City> = [(33.5, -86.8), (35.4, -94.4), (36.7, -119.8), (41.8, -87.7)]
        .iter()
        .enumerate()
        .map(|(i, &(latitude, longitude))| City {
            state: format!("S{i}"),
            city: format!("C{i}"),
            latitude,
            longitude,
        })
        .collect();
    // Three days; day 2 repeats a temperature of day 0 at another city, so equal values at
    // different sites and days occur.
    let days: Vec<TempDay> = [
        [61.0, 54.5, 70.0, 48.0],
        [63.5, 52.0, 69.0, 45.5],
        [58.0, 61.0, 72.5, 50.0],
    ]
    .iter()
    .enumerate()
    .map(|(d, t)| TempDay {
        date: (2010, 10, d as u32 + 1),
        temps: t.to_vec(),
        lags: vec![
            vec![60.0 - d as f64, 55.0, 71.0 + d as f64, 47.0],
            vec![57.5, 53.0 + d as f64, 70.5, 49.0 - d as f64],
        ],
    })
    .collect();
    for (layers, lag) in [(1, 0), (2, 0), (3, 1), (1, 2), (4, 2)] {
        let mut cfg = temperature::efa_config(&cities, layers, lag);
        (cfg.item_dim, cfg.key_dim, cfg.ffn, cfg.head_hidden) = (6, 3, Some(7), vec![5, 4]);
        let inputs = cfg.continuous.as_mut().unwrap();
        (inputs.hidden, inputs.dim, inputs.fuse) = (9, 5, 8);
        let days: Vec<TempDay> = days
            .iter()
            .map(|d| TempDay {
                lags: d.lags[..lag].to_vec(),
                ..d.clone()
            })
            .collect();
        let batch = temperature::efa_samples(&days, cities.len()).unwrap();
        // Larger query/key weights than the initialiser's, so attention is far from uniform;
        // the value and site MLPs see raw °F and degrees, so their first layers are scaled
        // down; non-zero biases (the initialiser's are zero), positive in the head so that its
        // ReLUs stay alive.
        let mut p = cfg.init::<f64>(7);
        for (name, v) in p.iter_mut() {
            if name.ends_with(".q.w") || name.ends_with(".k.w") {
                v.mapv_inplace(|x| 4.0 * x);
            } else if name == "value_mlp1.w" || name == "site_mlp1.w" {
                v.mapv_inplace(|x| 0.1 * x);
            } else if name.ends_with(".b") || name.ends_with(".bias") {
                let head = name.starts_with("head");
                for (i, x) in v.iter_mut().enumerate() {
                    *x = if head {
                        0.5
                    } else {
                        0.1 * (i % 5) as f64 - 0.2
                    };
                }
            }
        }
        let model = ModelConfig::Efa(cfg.clone());
        let eta = tape_eta(&model, &p, &batch);
        let weights = batch.weights.as_ref().unwrap();
        let lag_ids = batch.values.as_ref().unwrap();
        for s in 0..batch.len() {
            let want = temperature_reference(
                &cfg,
                &p,
                weights.row(s).as_slice().unwrap(),
                batch.tokens.row(s).as_slice().unwrap(),
                lag_ids.row(s).as_slice().unwrap(),
                batch.pred_idx[s],
            );
            let got = eta[[s, 0]];
            assert!(
                (got - want).abs() <= 1e-11 * (1.0 + want.abs()),
                "L={layers} lag {lag} sample {s}: {got} vs {want}"
            );
        }
    }
}

/// The model family from an "is EFA" flag.
fn kind(efa: bool) -> ModelKind {
    if efa {
        ModelKind::Efa
    } else {
        ModelKind::Fm
    }
}
