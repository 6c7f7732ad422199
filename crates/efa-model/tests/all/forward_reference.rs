//! The models' forward passes on the tape against independent, loop-by-loop f64
//! implementations written from the paper's description (docs/paper.md §2.3–§2.4), plus exact
//! evaluation and training smoke runs.

use efa_data::samples::Direction as SeqDir;
use efa_model::batch::{Samples, Targets};
use efa_model::{
    Direction, EfaConfig, FmConfig, ForwardPlan, ModelConfig, Objective, Params, Positions,
    ValueTable,
};
use efa_paper::synthetic;
use efa_paper::ModelKind;
use efa_tape::Tape;
use efa_train::evaluator::MICRO_BATCH;
use efa_train::{fit, Evaluator, FitOptions, Threads, TrainConfig};
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

/// The EFA of docs/paper.md §2.3 for one sample, written with plain loops.
fn efa_reference(
    cfg: &EfaConfig,
    p: &Params<f64>,
    tokens: &[usize],
    values: &[usize],
    len: usize,
    pred: usize,
) -> Vec<f64> {
    let n = tokens.len();
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
        let a = attention_reference(cfg, p, l, &x, |i, j| match cfg.direction {
            Direction::Padding => j < len,
            Direction::Causal => j <= i,
            Direction::CausalPadding => j <= i && j < len,
        });
        for (xi, ai) in x.iter_mut().zip(a) {
            for (v, w) in xi.iter_mut().zip(ai) {
                *v += w;
            }
        }
    }
    head_reference(cfg, p, &x[pred])
}

/// Block `l`'s multi-head attention at every row of `x`, output projection included: Q, K, V
/// with biases, softmax of `q·k/√K` over the keys `j` with `visible(i, j)`, heads
/// concatenated.
fn attention_reference(
    cfg: &EfaConfig,
    p: &Params<f64>,
    l: usize,
    x: &[Vec<f64>],
    visible: impl Fn(usize, usize) -> bool,
) -> Vec<Vec<f64>> {
    let (n, h, k) = (x.len(), cfg.heads, cfg.key_dim);
    let proj = |name: &str| -> Vec<Vec<f64>> {
        let w = mat(p, &format!("block{l}.attn.{name}.w"));
        let b = vec1(p, &format!("block{l}.attn.{name}.b"));
        x.iter().map(|r| affine(r, &w, Some(&b))).collect()
    };
    let (q, kk, v) = (proj("q"), proj("k"), proj("v"));
    let wo = mat(p, &format!("block{l}.attn.o.w"));
    let bo = vec1(p, &format!("block{l}.attn.o.b"));
    (0..n)
        .map(|i| {
            let keys: Vec<usize> = (0..n).filter(|&j| visible(i, j)).collect();
            let mut concat = vec![0.0; h * k];
            for head in 0..h {
                let scores: Vec<f64> = keys
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
                for (s, &j) in scores.iter().zip(&keys) {
                    let w = (s - m).exp() / z;
                    for c in 0..k {
                        concat[head * k + c] += w * v[j][head * k + c];
                    }
                }
            }
            affine(&concat, &wo, Some(&bo))
        })
        .collect()
}

/// The head MLP (ReLU layers) and the output layer at one row.
fn head_reference(cfg: &EfaConfig, p: &Params<f64>, x: &[f64]) -> Vec<f64> {
    let mut hdn = x.to_vec();
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
        Direction::Padding,
        Direction::Causal,
        Direction::CausalPadding,
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
    let (model, batch) = synthetic::audit_batch(SeqDir::Bi, ModelKind::Efa, 23).unwrap();
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
        let spec = synthetic::spec(&data, SeqDir::Bi, kind(efa), cfg.clone(), 9).unwrap();
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
    let spec = synthetic::spec(&data, SeqDir::Uni, ModelKind::Efa, cfg.clone(), 4).unwrap();
    assert_eq!(trained_bits(&spec, &cfg, 1), trained_bits(&spec, &cfg, 1));
}

#[test]
fn micro_batched_gradients_equal_the_mean_of_per_sample_gradients() {
    // 300 samples run as micro-batches of 128, 128 and 44 in parallel; the loss and every
    // gradient must equal the mean over single-sample tapes (f64, up to round-off).
    let (model, batch) = synthetic::audit_batch(SeqDir::Bi, ModelKind::Efa, 300).unwrap();
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
    let spec = synthetic::spec(&data, SeqDir::Bi, ModelKind::Efa, cfg.clone(), 4).unwrap();
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

/// `Dense(b)(relu(Dense(a)(x)))` for one row.
fn mlp2(p: &Params<f64>, a: &str, b: &str, x: &[f64]) -> Vec<f64> {
    let bias = |n: &str| vec1(p, &format!("{n}.b"));
    let h: Vec<f64> = affine(x, &mat(p, &format!("{a}.w")), Some(&bias(a)))
        .into_iter()
        .map(|v| v.max(0.0))
        .collect();
    affine(&h, &mat(p, &format!("{b}.w")), Some(&bias(b)))
}

/// `(x − μ)/√(σ² + ε)·γ + β` for one row (biased variance, as Keras).
fn layer_norm_row(p: &Params<f64>, prefix: &str, x: &[f64], eps: f64) -> Vec<f64> {
    let n = x.len() as f64;
    let mu = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n;
    let (g, b) = (
        vec1(p, &format!("{prefix}.gain")),
        vec1(p, &format!("{prefix}.bias")),
    );
    (0..x.len())
        .map(|i| (x[i] - mu) / (var + eps).sqrt() * g[i] + b[i])
        .collect()
}

/// The temperature EFA of docs/paper.md §6.2–§6.3 for one sample, with plain loops: value MLP (or
/// the mask row at the target) ‖ site MLP (‖ lag row) → fusion MLP; post-LN blocks of full
/// attention and a ReLU feed-forward; head MLP at the target.
fn temperature_reference(
    cfg: &EfaConfig,
    p: &Params<f64>,
    temps: &[f64],
    sites: &[usize],
    lags: &[usize],
    pred: usize,
) -> f64 {
    let c = cfg.continuous.as_ref().unwrap();
    let n = temps.len();
    let mut x: Vec<Vec<f64>> = (0..n)
        .map(|j| {
            let mut row = if j == pred {
                mat(p, "mask_emb").row(1).to_vec()
            } else {
                mlp2(p, "value_mlp1", "value_mlp2", &[temps[j]])
            };
            row.extend(mlp2(p, "site_mlp1", "site_mlp2", &c.sites[sites[j]]));
            if c.lag_rows.is_some() {
                row.extend(mat(p, "lag_emb").row(lags[j]).iter());
            }
            mlp2(p, "fuse1", "fuse2", &row)
        })
        .collect();
    for l in 0..cfg.layers {
        let a = attention_reference(cfg, p, l, &x, |_, _| true);
        x = x
            .iter()
            .zip(a)
            .map(|(xi, ai)| {
                let r: Vec<f64> = xi.iter().zip(ai).map(|(x, a)| x + a).collect();
                let r = layer_norm_row(p, &format!("block{l}.ln1"), &r, cfg.ln_eps);
                let f = mlp2(p, &format!("block{l}.ffn1"), &format!("block{l}.ffn2"), &r);
                let r: Vec<f64> = r.iter().zip(f).map(|(x, f)| x + f).collect();
                layer_norm_row(p, &format!("block{l}.ln2"), &r, cfg.ln_eps)
            })
            .collect();
    }
    head_reference(cfg, p, &x[pred])[0]
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
