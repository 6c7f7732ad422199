//! Adam / AdamW / SGD trajectories against hand derivations, clipping, schedules, errors.

use efa_optim::*;

fn run<T: efa_num::Real>(
    cfg: AdamConfig,
    w0: f64,
    grad: impl Fn(f64) -> f64,
    steps: usize,
) -> Vec<f64> {
    let mut adam = Adam::<T>::new(cfg).unwrap();
    let mut w = vec![T::from_f64(w0)];
    let mut out = Vec::new();
    for _ in 0..steps {
        let g = vec![T::from_f64(grad(w[0].to_f64()))];
        adam.step(&mut [Param::new("w", &mut w, Some(&g))]).unwrap();
        out.push(w[0].to_f64());
    }
    out
}

fn textbook(lr: f64, eps: f64) -> AdamConfig {
    AdamConfig {
        placement: EpsPlacement::Textbook,
        eps,
        ..AdamConfig::keras(lr)
    }
}

#[test]
fn textbook_quadratic_three_steps() {
    // f(w) = ½(w − 3)², g = w − 3, w0 = 0, lr 0.1, β1 0.9, β2 0.999, ε 1e-8.
    // t=1: g = −3; m = −0.3, v = 0.009; m̂ = −3, v̂ = 9; w1 = 0.1·3/(3 + 1e-8) = 0.0999999996667.
    // t=2: g = w1 − 3 = −2.9000000003333; m = 0.9(−0.3) + 0.1g = −0.56000000003333;
    //      v = 0.999·0.009 + 0.001·g² = 0.017401000001933; m̂ = m/0.19 = −2.9473684212;
    //      v̂ = v/0.001999 = 8.7048524272; √v̂ = 2.9503987…; w2 = w1 + 0.1·2.94736842/2.95039871
    //      = 0.19989729224945.
    // t=3: same recurrences with 1 − β1³ = 0.271, 1 − β2³ = 0.002997003: w3 = 0.29961847604218.
    let want = [0.09999999966666677, 0.1998972922494483, 0.2996184760421759];
    let got = run::<f64>(textbook(0.1, 1e-8), 0.0, |w| w - 3.0, 3);
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-13, "{g} vs {w}");
    }
    // f32 follows the same path to single precision.
    let got32 = run::<f32>(textbook(0.1, 1e-8), 0.0, |w| w - 3.0, 3);
    for (g, w) in got32.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{g} vs {w}");
    }
}

#[test]
fn keras_quadratic_three_steps() {
    // Same problem, Keras form, ε = 1e-7: α_t = 0.1·√(1 − 0.999ᵗ)/(1 − 0.9ᵗ).
    // t=1: m = 0.1·(−3) = −0.3, v = 0.001·9 = 0.009, α1 = 0.1·√0.001/0.1 = 0.0316227766;
    //      w1 = α1·0.3/(√0.009 + 1e-7) = 0.0316227766·0.3/0.0948684330 = 0.0999998945909.
    //      (textbook would give 0.1·3/(3 + 1e-7): Keras's ε acts as ε/√(1 − β2ᵗ) = 3.16e-6.)
    // t=2, t=3 by the same recurrences: 0.19989711190758, 0.29961823355259.
    let want = [
        0.09999989459085576,
        0.19989711190758108,
        0.29961823355259154,
    ];
    let got = run::<f64>(AdamConfig::keras(0.1), 0.0, |w| w - 3.0, 3);
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-13, "{g} vs {w}");
    }
}

#[test]
fn eps_placement_closed_form_constant_gradient() {
    // Linear loss f(w) = c·w: every gradient is c. Then m_t = (1 − β1ᵗ)c and
    // v_t = (1 − β2ᵗ)c² exactly (both forms), so the step is
    //   textbook: lr·c/(|c| + ε)                       (constant in t)
    //   Keras:    lr·c/(|c| + ε/√(1 − β2ᵗ))             (ε inflated early on).
    // With a deliberately large ε = 0.5, c = 1, lr = 0.01:
    let (lr, eps, c, b2) = (0.01, 0.5, 1.0, 0.999f64);
    let t_steps = run::<f64>(textbook(lr, eps), 0.0, |_| c, 20);
    let k_steps = run::<f64>(
        AdamConfig {
            eps,
            ..AdamConfig::keras(lr)
        },
        0.0,
        |_| c,
        20,
    );
    let (mut wt, mut wk) = (0.0, 0.0);
    for t in 1..=20 {
        wt -= lr * c / (c + eps);
        wk -= lr * c / (c + eps / (1.0 - b2.powi(t)).sqrt());
        assert!(
            (t_steps[t as usize - 1] - wt).abs() < 1e-12,
            "textbook t={t}"
        );
        assert!((k_steps[t as usize - 1] - wk).abs() < 1e-12, "keras t={t}");
    }
    // And they really differ: Keras moved far less.
    assert!(k_steps[19].abs() < 0.5 * t_steps[19].abs());
}

#[test]
fn adamw_differs_from_l2_as_expected() {
    // Zero data gradient, w0 = 1, lr 0.1, λ = 0.01, Keras form.
    // AdamW: w1 = w0·(1 − lr·λ) = 0.999 exactly-ish; moments stay 0, so the Adam part is 0.
    // L2: g = λ·w0 = 0.01 → m = 0.001, v = 1e-7, α1 = √0.001;
    //     w1 = 1 − √0.001·0.001/(√1e-7 + 1e-7) = 0.900031612779763 (Adam normalises the decay
    //     gradient into a full-size step).
    let dec = run::<f64>(
        AdamConfig {
            weight_decay: WeightDecay::Decoupled(0.01),
            ..AdamConfig::keras(0.1)
        },
        1.0,
        |_| 0.0,
        2,
    );
    let l2 = run::<f64>(
        AdamConfig {
            weight_decay: WeightDecay::L2(0.01),
            ..AdamConfig::keras(0.1)
        },
        1.0,
        |_| 0.0,
        1,
    );
    assert!((dec[0] - 0.999).abs() < 1e-15);
    assert!((dec[1] - 0.999 * 0.999).abs() < 1e-15);
    assert!((l2[0] - 0.900031612779763).abs() < 1e-13);
}

#[test]
fn clipping_scales_gradients_by_global_norm() {
    let a = [3.0f64];
    let b = [4.0f64];
    assert_eq!(global_norm::<f64>(&[&a, &b]), 5.0);
    assert_eq!(clip_scale(5.0, 1.0), 0.2);
    assert_eq!(clip_scale(0.5, 1.0), 1.0);
    let (mut ga, mut gb) = ([3.0f64], [4.0f64]);
    let n = clip_global_norm::<f64>(&mut [&mut ga, &mut gb], 1.0);
    assert_eq!(n, 5.0);
    assert!((ga[0] - 0.6).abs() < 1e-15 && (gb[0] - 0.8).abs() < 1e-15);

    // Inside Adam: m1 = (1 − β1)·clipped g = 0.1·[0.6, 0.8].
    let mut adam = Adam::<f64>::new(AdamConfig {
        clip_norm: Some(1.0),
        ..AdamConfig::keras(0.1)
    })
    .unwrap();
    let (mut wa, mut wb) = (vec![0.0], vec![0.0]);
    let info = adam
        .step(&mut [
            Param::new("a", &mut wa, Some(&a)),
            Param::new("b", &mut wb, Some(&b)),
        ])
        .unwrap();
    assert_eq!(info.grad_norm, Some(5.0));
    assert!((info.clip_scale - 0.2).abs() < 1e-15);
    assert!((adam.moments()[0].m[0] - 0.06).abs() < 1e-15);
    assert!((adam.moments()[1].m[0] - 0.08).abs() < 1e-15);
}

#[test]
fn schedules_report_rates() {
    assert_eq!(Schedule::Constant { lr: 0.3 }.rate(1000), 0.3);
    let s = Schedule::Step {
        lr: 1.0,
        every: 10,
        gamma: 0.5,
    };
    assert_eq!(
        (s.rate(0), s.rate(9), s.rate(10), s.rate(25)),
        (1.0, 1.0, 0.5, 0.25)
    );
    let c = Schedule::WarmupCosine {
        lr: 1.0,
        warmup: 10,
        total: 110,
        min_lr: 0.0,
    };
    // warm-up (t+1)/10; then ½(1 + cos(π(t − 10)/100)).
    assert!((c.rate(0) - 0.1).abs() < 1e-15);
    assert!((c.rate(9) - 1.0).abs() < 1e-15);
    assert!((c.rate(10) - 1.0).abs() < 1e-15);
    assert!((c.rate(60) - 0.5).abs() < 1e-15);
    assert!(c.rate(110).abs() < 1e-15 && c.rate(500).abs() < 1e-15);
    assert!(Schedule::WarmupCosine {
        lr: 1.0,
        warmup: 5,
        total: 5,
        min_lr: 0.0
    }
    .validate()
    .is_err());
    assert!(Schedule::Step {
        lr: 1.0,
        every: 0,
        gamma: 0.5
    }
    .validate()
    .is_err());
    // The optimizer uses rate(steps taken).
    let mut adam = Adam::<f64>::new(AdamConfig {
        schedule: s,
        ..Default::default()
    })
    .unwrap();
    let (mut w, g) = (vec![1.0], vec![1.0]);
    for t in 0..12u64 {
        // What the next step will use is known before it is taken.
        assert_eq!(adam.next_lr(), s.rate(t));
        let info = adam.step(&mut [Param::new("w", &mut w, Some(&g))]).unwrap();
        assert_eq!(info.lr, s.rate(t));
        assert_eq!(info.step, t + 1);
    }
}

#[test]
fn sgd_momentum_hand_trajectory() {
    // f = ½w², w0 = 1, lr 0.1, μ 0.9: b1 = 1, w1 = 0.9; b2 = 0.9 + 0.9 = 1.8, w2 = 0.72;
    // b3 = 1.62 + 0.72 = 2.34, w3 = 0.486.
    let mut sgd = Sgd::<f64>::new(0.1, 0.9).unwrap();
    let mut w = vec![1.0];
    let mut got = Vec::new();
    for _ in 0..3 {
        let g = w.clone();
        sgd.step(&mut [Param::new("w", &mut w, Some(&g))]).unwrap();
        got.push(w[0]);
    }
    for (g, e) in got.iter().zip([0.9, 0.72, 0.486]) {
        assert!((g - e).abs() < 1e-15, "{g} vs {e}");
    }
    assert!(Sgd::<f64>::new(0.1, 1.0).is_err());
}

#[test]
fn errors_name_the_parameter() {
    let mut adam = Adam::<f32>::new(AdamConfig::default()).unwrap();
    let (mut a, mut b) = (vec![0.0f32; 4], vec![0.0f32; 2]);
    let (ga, gb) = (vec![1.0f32; 4], vec![1.0f32; 3]);
    let e = adam
        .step(&mut [
            Param::new("alpha", &mut a, Some(&ga)),
            Param::new("beta", &mut b, None),
        ])
        .unwrap_err();
    assert_eq!(
        e,
        OptimError::MissingGrad {
            name: "beta".into()
        }
    );
    assert!(e.to_string().contains("`beta`"));
    let e = adam
        .step(&mut [Param::new("beta", &mut b, Some(&gb))])
        .unwrap_err();
    assert!(
        matches!(e, OptimError::GradLength { ref name, value_len: 2, grad_len: 3 } if name == "beta")
    );
    // Nothing was modified by the failed calls, and no state was created.
    assert_eq!(a, vec![0.0; 4]);
    assert_eq!(adam.steps(), 0);
    adam.step(&mut [Param::with_shape("alpha", &[2, 2], &mut a, Some(&ga))])
        .unwrap();
    let e = adam
        .step(&mut [Param::with_shape("alpha", &[4, 1], &mut a, Some(&ga))])
        .unwrap_err();
    assert!(e.to_string().contains("alpha") && e.to_string().contains("[2, 2]"));
    let gb2 = vec![1.0f32; 2];
    let e = adam
        .step(&mut [Param::new("beta", &mut b, Some(&gb2))])
        .unwrap_err();
    assert_eq!(
        e,
        OptimError::UnknownParam {
            name: "beta".into()
        }
    );
    let e = adam
        .step(&mut [Param::with_shape("alpha", &[3], &mut a, Some(&ga))])
        .unwrap_err();
    assert!(matches!(e, OptimError::ShapeLength { .. }));
    assert!(Adam::<f64>::new(AdamConfig {
        beta1: 1.0,
        ..Default::default()
    })
    .is_err());
}

#[test]
fn ndarray_params_and_parallel_path_match_sequential() {
    use ndarray::{ArrayD, IxDyn};
    let n = efa_optim::adam::PAR_MIN_LEN + 12_345;
    let init: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let grad: Vec<f32> = (0..n)
        .map(|i| ((i * 104_729) % 997) as f32 / 300.0 - 1.5)
        .collect();
    let mut results = Vec::new();
    for parallel in [true, false] {
        let mut w = ArrayD::from_shape_vec(IxDyn(&[n]), init.clone()).unwrap();
        let g = ArrayD::from_shape_vec(IxDyn(&[n]), grad.clone()).unwrap();
        let mut adam = Adam::<f32>::new(AdamConfig {
            parallel,
            ..AdamConfig::keras(1e-3)
        })
        .unwrap();
        for _ in 0..3 {
            adam.step(&mut [Param::from_array("w", &mut w, Some(&g)).unwrap()])
                .unwrap();
        }
        results.push(w.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    }
    assert_eq!(results[0], results[1]);
}
