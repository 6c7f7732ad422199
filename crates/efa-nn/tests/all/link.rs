//! The natural-parameter links: values land in each family's domain, agree between the tape
//! and plain-value forms, and their gradients (composed with the nll) match finite differences.

use efa_check::CheckOptions;
use efa_expfam::link::natural_rows as natural_values;
use efa_expfam::Family;
use efa_nn::TapeNn;
use efa_tape::audit::audit;
use efa_tape::Tape;
use ndarray::{arr2, Array2};

fn families() -> Vec<(Family, Array2<f64>)> {
    // (family, valid observations y [3, 1])
    vec![
        (Family::Gaussian, arr2(&[[0.3], [-1.0], [2.0]])),
        (Family::Gamma, arr2(&[[0.7], [3.0], [0.2]])),
        (Family::Exponential, arr2(&[[0.2], [1.5], [0.0]])),
        (Family::Beta, arr2(&[[0.3], [0.9], [0.5]])),
        (
            Family::NegativeBinomial { r: 2.5 },
            arr2(&[[0.0], [4.0], [10.0]]),
        ),
        (Family::Poisson, arr2(&[[0.0], [2.0], [5.0]])),
    ]
}

fn z_for(family: &Family) -> Array2<f64> {
    let d = family.eta_dim();
    // Unconstrained outputs of both signs, including large magnitudes.
    Array2::from_shape_fn((3, d), |(i, j)| {
        [-30.0, 0.4, 25.0][i] * if j == 0 { 1.0 } else { -0.5 }
    })
}

#[test]
fn links_map_any_output_into_the_domain_and_match_plain_values() {
    for (family, _) in families() {
        let z = z_for(&family);
        let mut tape = Tape::<f64>::new();
        let v = tape.input(z.clone().into_dyn());
        let eta = tape.natural(&family, v).unwrap();
        let got = tape
            .value(eta)
            .clone()
            .into_dimensionality::<ndarray::Ix2>()
            .unwrap();
        assert_eq!(got, natural_values(&family, &z), "{family:?}");
        for i in 0..3 {
            family
                .check_eta(got.row(i).as_slice().unwrap(), i)
                .unwrap_or_else(|e| panic!("{family:?} row {i}: {e}"));
        }
    }
    // Hand values: exponential η = −softplus(0) = −ln 2; negative binomial η = log σ(0) = −ln 2;
    // beta η = softplus(0) − 1 = ln 2 − 1.
    let ln2 = std::f64::consts::LN_2;
    let z0 = Array2::zeros((1, 1));
    assert_eq!(natural_values(&Family::Exponential, &z0)[[0, 0]], -ln2);
    assert_eq!(
        natural_values(&Family::NegativeBinomial { r: 1.0 }, &z0)[[0, 0]],
        -ln2
    );
    assert_eq!(
        natural_values(&Family::Beta, &Array2::zeros((1, 2)))[[0, 1]],
        ln2 - 1.0
    );
}

#[test]
fn link_then_nll_gradients_match_finite_differences() {
    for (family, y) in families() {
        let z = z_for(&family).mapv(|v| v / 10.0);
        let report = audit(
            &[("z", z.into_dyn())],
            |t, v| {
                let eta = t.natural(&family, v[0])?;
                let l = t.nll(&family, eta, &y, None)?;
                t.sum_all(l)
            },
            &CheckOptions::default(),
        )
        .unwrap();
        assert!(report.passed(), "{family:?}\n{report}");
    }
}
