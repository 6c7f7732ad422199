//! The exponential-family nll tape ops: forward equals the family's own per-row nll, and the
//! gradients (to η, and to the cut-points of the ordinal model) agree with central finite
//! differences in f64 under a non-uniform cotangent.

use efa_check::CheckOptions;
use efa_expfam::Family;
use efa_nn::TapeNn;
use efa_tape::audit::audit;
use efa_tape::Tape;
use ndarray::{arr1, arr2, Array2, ArrayD};

/// (family, η [3, eta_dim], y [3, obs_dim]) with η inside the natural parameter space.
fn cases() -> Vec<(Family, Array2<f64>, Array2<f64>)> {
    vec![
        (
            Family::GaussianKnownVar { s2: 2.0 },
            arr2(&[[0.3], [-1.2], [2.0]]),
            arr2(&[[0.5], [-3.0], [1.0]]),
        ),
        (
            Family::Gaussian,
            arr2(&[[0.5, -0.4], [-1.0, -2.0], [0.1, -0.1]]),
            arr2(&[[0.3], [-1.0], [2.0]]),
        ),
        (
            Family::Bernoulli,
            arr2(&[[0.3], [-2.0], [5.0]]),
            arr2(&[[1.0], [0.0], [1.0]]),
        ),
        (
            Family::Binomial { n: 7 },
            arr2(&[[0.3], [-2.0], [1.5]]),
            arr2(&[[0.0], [3.0], [7.0]]),
        ),
        (
            Family::Poisson,
            arr2(&[[0.3], [-1.0], [2.0]]),
            arr2(&[[0.0], [2.0], [5.0]]),
        ),
        (
            Family::Categorical { k: 4 },
            arr2(&[
                [0.3, -1.0, 2.0, 0.1],
                [1.0, 1.5, -0.5, 0.0],
                [-3.0, 0.2, 0.4, 2.2],
            ]),
            arr2(&[[0.0], [3.0], [2.0]]),
        ),
        (
            Family::Multinomial { n: 5, k: 3 },
            arr2(&[[0.3, -1.0, 2.0], [1.0, 1.5, -0.5], [-3.0, 0.2, 0.4]]),
            arr2(&[[2.0, 2.0, 1.0], [0.0, 5.0, 0.0], [1.0, 1.0, 3.0]]),
        ),
        (
            Family::Gamma,
            arr2(&[[0.5, -1.0], [2.0, -0.5], [-0.3, -2.0]]),
            arr2(&[[0.7], [3.0], [0.2]]),
        ),
        (
            Family::Exponential,
            arr2(&[[-1.0], [-0.5], [-3.0]]),
            arr2(&[[0.2], [1.5], [0.0]]),
        ),
        (
            Family::Beta,
            arr2(&[[0.5, 1.0], [2.0, -0.3], [-0.2, 0.4]]),
            arr2(&[[0.3], [0.9], [0.5]]),
        ),
        (
            Family::NegativeBinomial { r: 3.5 },
            arr2(&[[-0.5], [-2.0], [-0.1]]),
            arr2(&[[0.0], [4.0], [10.0]]),
        ),
    ]
}

const W: [f64; 3] = [0.3, -1.2, 2.0];

#[test]
fn nll_op_forward_matches_the_family_and_gradients_match_finite_differences() {
    for (family, eta, y) in cases() {
        // Forward: the op's rows are the family's own nll.
        let mut tape = Tape::<f64>::new();
        let e = tape.input(eta.clone().into_dyn());
        let out = tape.nll(&family, e, &y, None).unwrap();
        for i in 0..3 {
            let want = family
                .nll(
                    y.row(i).as_slice().unwrap(),
                    eta.row(i).as_slice().unwrap(),
                    i,
                )
                .unwrap();
            assert_eq!(tape.value(out)[[i]], want, "{family:?} row {i}");
        }
        // Backward under the weights W.
        let y2 = y.clone();
        let report = audit(
            &[("eta", eta.clone().into_dyn())],
            |t, v| {
                let l = t.nll(&family, v[0], &y2, None)?;
                let w = t.constant(arr1(&W).into_dyn());
                let p = t.mul(l, w)?;
                t.sum_all(p)
            },
            &CheckOptions::default(),
        )
        .unwrap();
        assert!(report.passed(), "{family:?}\n{report}");
    }
}

#[test]
fn ordinal_nll_gradients_flow_to_eta_and_cutpoints() {
    let eta = arr2(&[[0.3], [-1.0], [2.0]]).into_dyn();
    let cut: ArrayD<f64> = arr1(&[-1.0, 0.5, 2.0]).into_dyn();
    let y = arr2(&[[0.0], [2.0], [3.0]]);
    // Uniform cotangent (one batched call) and row-dependent cotangent (per-row calls).
    for weights in [[1.0, 1.0, 1.0], W] {
        let report = audit(
            &[("eta", eta.clone()), ("cutpoints", cut.clone())],
            |t, v| {
                let l = t.ordinal_nll(v[0], v[1], &y, None)?;
                let w = t.constant(arr1(&weights).into_dyn());
                let p = t.mul(l, w)?;
                t.sum_all(p)
            },
            &CheckOptions::default(),
        )
        .unwrap();
        assert!(report.passed(), "weights {weights:?}\n{report}");
        assert_eq!(report.params.len(), 2);
    }
}

#[test]
fn masked_rows_give_zero_and_bad_observations_are_named() {
    let mut tape = Tape::<f64>::new();
    let e = tape
        .param("eta", arr2(&[[0.3], [-1.0]]).into_dyn())
        .unwrap();
    // Row 1 is masked and holds an invalid count: ignored, zero loss and zero gradient.
    let y = arr2(&[[2.0], [f64::NAN]]);
    let l = tape
        .nll(&Family::Poisson, e, &y, Some(&[true, false]))
        .unwrap();
    assert_eq!(tape.value(l)[[1]], 0.0);
    let s = tape.sum_all(l).unwrap();
    let g = tape.backward(s).unwrap();
    let ge = g.param("eta").unwrap();
    assert_eq!(ge[[1, 0]], 0.0);
    // d/dη (e^η − yη + log y!) = e^η − y.
    assert!((ge[[0, 0]] - (0.3f64.exp() - 2.0)).abs() < 1e-15);
    // Unmasked, the same row is an error naming family, value and row.
    let mut tape = Tape::<f64>::new();
    let e = tape.input(arr2(&[[0.3], [-1.0]]).into_dyn());
    let msg = tape
        .nll(&Family::Poisson, e, &arr2(&[[2.0], [-1.0]]), None)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("poisson") && msg.contains("-1") && msg.contains('1'),
        "{msg}"
    );
}
