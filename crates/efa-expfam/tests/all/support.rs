//! Support and domain checks: errors name the family, the value and the row.

use efa_expfam::{nll_batch, ordinal_nll_batch, ExpfamError, Family};
use ndarray::{arr2, Array2};

fn batch_err(fam: Family, y: Array2<f64>, eta: Array2<f64>) -> String {
    let rows = y.nrows();
    let mut nll = vec![0.0; rows];
    let mut g = Array2::zeros((rows, fam.eta_dim()));
    let e = nll_batch(&fam, y.view(), eta.view(), None, &mut nll, g.view_mut()).unwrap_err();
    e.to_string()
}

fn assert_mentions(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "message {msg:?} should mention {p:?}");
    }
}

#[test]
fn observations_outside_support_are_named() {
    let ones = |r: usize, c: usize| Array2::from_elem((r, c), 0.5);
    let m = batch_err(
        Family::Poisson,
        arr2(&[[1.0], [2.0], [0.0], [-1.0]]),
        ones(4, 1),
    );
    assert_mentions(&m, &["poisson", "-1", "row 3"]);
    let m = batch_err(Family::Binomial { n: 5 }, arr2(&[[1.0], [2.5]]), ones(2, 1));
    assert_mentions(&m, &["binomial", "2.5", "row 1"]);
    let m = batch_err(Family::Binomial { n: 5 }, arr2(&[[6.0]]), ones(1, 1));
    assert_mentions(&m, &["binomial", "6", "row 0"]);
    let m = batch_err(Family::Bernoulli, arr2(&[[0.0], [1.0], [0.5]]), ones(3, 1));
    assert_mentions(&m, &["bernoulli", "0.5", "row 2"]);
    let m = batch_err(Family::Beta, arr2(&[[0.2], [1.0]]), ones(2, 2));
    assert_mentions(&m, &["beta", "= 1 ", "row 1"]);
    let m = batch_err(Family::Categorical { k: 3 }, arr2(&[[3.0]]), ones(1, 3));
    assert_mentions(&m, &["categorical", "3", "row 0"]);
    let m = batch_err(Family::Gaussian, arr2(&[[f64::NAN]]), arr2(&[[0.0, -1.0]]));
    assert_mentions(&m, &["gaussian", "NaN", "row 0"]);
    let m = batch_err(
        Family::NegativeBinomial { r: 2.0 },
        arr2(&[[-2.0]]),
        arr2(&[[-1.0]]),
    );
    assert_mentions(&m, &["negative_binomial", "-2", "row 0"]);
    let m = batch_err(
        Family::Multinomial { n: 4, k: 2 },
        arr2(&[[2.0, 2.0], [1.0, 2.0]]),
        ones(2, 2),
    );
    assert_mentions(&m, &["multinomial", "row 1", "sum"]);
    let m = batch_err(Family::Gamma, arr2(&[[0.0]]), arr2(&[[0.5, -1.0]]));
    assert_mentions(&m, &["gamma", "row 0"]);
}

#[test]
fn natural_parameters_outside_domain_are_named() {
    let m = batch_err(
        Family::Gaussian,
        arr2(&[[0.1], [0.2]]),
        arr2(&[[0.0, -1.0], [0.0, 0.5]]),
    );
    assert_mentions(&m, &["gaussian", "eta[1] = 0.5", "row 1"]);
    let m = batch_err(Family::Exponential, arr2(&[[1.0]]), arr2(&[[0.0]]));
    assert_mentions(&m, &["exponential", "eta[0] = 0", "row 0"]);
    let m = batch_err(Family::Bernoulli, arr2(&[[1.0]]), arr2(&[[f64::NAN]]));
    assert_mentions(&m, &["bernoulli", "NaN", "row 0"]);
    let m = batch_err(Family::Gamma, arr2(&[[1.0]]), arr2(&[[-1.5, -1.0]]));
    assert_mentions(&m, &["gamma", "-1.5"]);
    let m = batch_err(
        Family::Categorical { k: 2 },
        arr2(&[[0.0]]),
        arr2(&[[f64::NEG_INFINITY, f64::NEG_INFINITY]]),
    );
    assert_mentions(&m, &["categorical", "row 0"]);
}

#[test]
fn shapes_and_parameters_are_checked() {
    let fam = Family::Gaussian;
    let mut nll = vec![0.0; 2];
    let mut g = Array2::zeros((2, 2));
    let e = nll_batch(
        &fam,
        Array2::zeros((2, 1)).view(),
        Array2::zeros((2, 3)).view(),
        None,
        &mut nll,
        g.view_mut(),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            ExpfamError::Shape {
                expected: 2,
                got: 3,
                ..
            }
        ),
        "{e}"
    );
    let e = Family::GaussianKnownVar { s2: -1.0 }
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("s2 = -1"));
    let mut gc = vec![0.0; 2];
    let mut ge = Array2::zeros((1, 1));
    let e = ordinal_nll_batch(
        &[0.5, 0.5],
        arr2(&[[0.0]]).view(),
        arr2(&[[0.0]]).view(),
        None,
        &mut nll[..1],
        ge.view_mut(),
        &mut gc,
    )
    .unwrap_err();
    assert!(e.to_string().contains("cutpoints[1]"), "{e}");
    let e = ordinal_nll_batch(
        &[0.0, 1.0],
        arr2(&[[3.0]]).view(),
        arr2(&[[0.0]]).view(),
        None,
        &mut nll[..1],
        ge.view_mut(),
        &mut gc,
    )
    .unwrap_err();
    assert_mentions(&e.to_string(), &["ordinal_logit", "3", "row 0"]);
}

#[test]
fn samplers_reject_parameters_they_cannot_draw_from() {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let mut y = [0.0];
    let e = Family::Poisson
        .sample(&[700.0], &mut rng, &mut y, 4)
        .unwrap_err();
    assert!(
        e.to_string().contains("poisson") && e.to_string().contains("row 4"),
        "{e}"
    );
    let e = Family::Gamma
        .sample(&[0.5, -1e-320], &mut rng, &mut y, 2)
        .unwrap_err();
    assert!(
        e.to_string().contains("gamma") && e.to_string().contains("row 2"),
        "{e}"
    );
    let e = Family::NegativeBinomial { r: 2.0 }
        .sample(&[-1e-320], &mut rng, &mut y, 1)
        .unwrap_err();
    assert!(e.to_string().contains("negative_binomial"), "{e}");
}
