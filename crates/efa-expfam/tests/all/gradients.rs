//! Finite-difference audits in f64: ∂nll/∂η against central differences of nll, ∇A against
//! differences of A, ∇²A against differences of ∇A, and the ordinal model's η / cut-point
//! gradients and second derivative.

use crate::common;

use common::central_diff;
use efa_expfam::{ordinal, Family};

fn cases() -> Vec<(Family, Vec<f64>, Vec<f64>)> {
    vec![
        (Family::GaussianKnownVar { s2: 2.0 }, vec![0.7], vec![1.3]),
        (Family::Gaussian, vec![0.4, -0.8], vec![0.3]),
        (Family::Gaussian, vec![-30.0, -2.5], vec![-5.9]),
        (Family::Bernoulli, vec![0.3], vec![1.0]),
        (Family::Bernoulli, vec![-2.0], vec![0.0]),
        (Family::Binomial { n: 12 }, vec![0.5], vec![4.0]),
        (Family::Poisson, vec![1.2], vec![3.0]),
        (Family::Poisson, vec![3.5], vec![40.0]),
        (Family::Poisson, vec![5.0], vec![20.0]),
        (
            Family::Categorical { k: 4 },
            vec![0.1, -0.5, 1.2, 0.3],
            vec![2.0],
        ),
        (
            Family::Categorical { k: 3 },
            vec![5.0, -1.0, 0.5],
            vec![0.0],
        ),
        (
            Family::Multinomial { n: 7, k: 3 },
            vec![0.2, -0.4, 0.9],
            vec![2.0, 1.0, 4.0],
        ),
        (
            Family::Multinomial { n: 5, k: 3 },
            vec![4.0, -0.4, 0.9],
            vec![5.0, 0.0, 0.0],
        ),
        (Family::Gamma, vec![1.5, -2.0], vec![0.8]),
        (Family::Gamma, vec![30.0, -3.0], vec![10.5]),
        (Family::Gamma, vec![-0.5, -0.3], vec![4.0]),
        (Family::Exponential, vec![-1.7], vec![0.9]),
        (Family::Beta, vec![1.2, 0.5], vec![0.3]),
        (Family::Beta, vec![40.0, 60.0], vec![0.45]),
        (Family::Beta, vec![-0.4, 20.0], vec![0.02]),
        (Family::NegativeBinomial { r: 2.5 }, vec![-0.7], vec![4.0]),
        (
            Family::NegativeBinomial { r: 30.0 },
            vec![-0.05],
            vec![500.0],
        ),
    ]
}

fn close(fd: f64, an: f64, what: &str) {
    let tol = 1e-6 * an.abs().max(1.0);
    assert!(
        (fd - an).abs() <= tol,
        "{what}: finite difference {fd} vs analytic {an}"
    );
}

#[test]
fn dnll_matches_central_differences() {
    for (fam, eta, y) in cases() {
        let mut g = vec![0.0; fam.eta_dim()];
        fam.nll_grad(&y, &eta, &mut g, 0).unwrap();
        let f = |e: &[f64]| fam.nll(&y, e, 0).unwrap();
        let fd = central_diff(&f, &eta);
        for i in 0..g.len() {
            close(fd[i], g[i], &format!("{} dnll[{i}] at {eta:?}", fam.name()));
        }
    }
}

#[test]
fn mean_is_derivative_of_log_partition_and_hessian_of_mean() {
    for (fam, eta, _) in cases() {
        let d = fam.eta_dim();
        let mut m = vec![0.0; d];
        fam.mean(&eta, &mut m, 0).unwrap();
        let fd = central_diff(&|e: &[f64]| fam.log_partition(e, 0).unwrap(), &eta);
        for i in 0..d {
            close(fd[i], m[i], &format!("{} dA[{i}]", fam.name()));
        }
        let mut h = vec![0.0; d * d];
        fam.hessian(&eta, &mut h, 0).unwrap();
        for i in 0..d {
            let mi = |e: &[f64]| {
                let mut out = vec![0.0; d];
                fam.mean(e, &mut out, 0).unwrap();
                out[i]
            };
            let fd = central_diff(&mi, &eta);
            for j in 0..d {
                close(
                    fd[j],
                    h[i * d + j],
                    &format!("{} d2A[{i}][{j}]", fam.name()),
                );
            }
        }
    }
}

#[test]
fn ordinal_gradients_match_central_differences() {
    let cut = [-1.3, -0.2, 0.4, 2.0];
    for y in 0..5usize {
        for &eta in &[-2.0, 0.1, 1.7] {
            let mut ge = 0.0;
            let mut gc = vec![0.0; cut.len()];
            ordinal::nll_grad(&cut, y, eta, &mut ge, &mut gc);
            // Parameters packed as [eta, c0..c3].
            let f = |p: &[f64]| {
                let (mut a, mut b) = (0.0, vec![0.0; 4]);
                ordinal::nll_grad(&p[1..], y, p[0], &mut a, &mut b)
            };
            let mut x = vec![eta];
            x.extend_from_slice(&cut);
            let fd = central_diff(&f, &x);
            close(fd[0], ge, &format!("ordinal dnll/deta y={y}"));
            for j in 0..cut.len() {
                close(fd[j + 1], gc[j], &format!("ordinal dnll/dc[{j}] y={y}"));
            }
            let dg = |p: &[f64]| {
                let (mut a, mut b) = (0.0, vec![0.0; 4]);
                ordinal::nll_grad(&cut, y, p[0], &mut a, &mut b);
                a
            };
            close(
                central_diff(&dg, &[eta])[0],
                ordinal::d2nll(&cut, y, eta),
                "ordinal d2nll",
            );
        }
    }
    // The probabilities sum to one and match differences of the cumulative logits.
    let mut p = vec![0.0; 5];
    ordinal::probs(&cut, 0.3, &mut p);
    assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-15);
    let s = |x: f64| 1.0 / (1.0 + (-x).exp());
    assert!((p[2] - (s(cut[2] - 0.3) - s(cut[1] - 0.3))).abs() < 1e-15);
}

#[test]
fn natural_from_mean_inverts_mean() {
    for (fam, eta, _) in cases() {
        let d = fam.eta_dim();
        let mut m = vec![0.0; d];
        fam.mean(&eta, &mut m, 0).unwrap();
        let mut back = vec![0.0; d];
        fam.natural_from_mean(&m, &mut back, 0).unwrap();
        // Categorical/multinomial η are identified up to an additive constant: compare means.
        let mut m2 = vec![0.0; d];
        fam.mean(&back, &mut m2, 0).unwrap();
        for i in 0..d {
            assert!(
                (m2[i] - m[i]).abs() <= 1e-9 * m[i].abs().max(1.0),
                "{} mean→natural→mean [{i}]: {} vs {}",
                fam.name(),
                m2[i],
                m[i]
            );
        }
    }
}
