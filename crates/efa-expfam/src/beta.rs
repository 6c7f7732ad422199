//! Beta (a, b): η = (a − 1, b − 1), t(y) = (ln y, ln(1 − y)), log h = 0, A(η) = lβ(a, b).

use crate::common::{domain, support};
use crate::ExpfamError;
use efa_num::scalar::{digamma_diff, lbeta1p, trigamma, trigamma_diff};
use efa_num::Real;
use rand::Rng;
use rand_distr::{Beta, Distribution};

/// Reference name.
pub const NAME: &str = "beta";

/// Support check: 0 < y < 1.
pub fn check_obs<T: Real>(y: T, row: usize) -> Result<(), ExpfamError> {
    if y > T::ZERO && y < T::ONE {
        Ok(())
    } else {
        Err(support(NAME, row, 0, y, "0 < y < 1"))
    }
}

/// Domain check: η₁, η₂ > −1 finite.
pub fn check_eta<T: Real>(eta: &[T], row: usize) -> Result<(), ExpfamError> {
    for (i, &v) in eta.iter().enumerate() {
        if !(v.is_finite() && v > -T::ONE) {
            return Err(domain(NAME, row, i, v, "eta = shape - 1 > -1"));
        }
    }
    Ok(())
}

/// A(η) = lβ(1 + η₁, 1 + η₂) by [`lbeta1p`], which takes η itself: Stirling-split for large
/// shapes and a joint series near a = b = 1, where A ≈ −(η₁ + η₂) keeps its relative accuracy.
pub fn log_partition<T: Real>(eta: &[T]) -> T {
    lbeta1p(eta[0], eta[1])
}

/// ∇A(η) = (ψ(a) − ψ(a + b), ψ(b) − ψ(a + b)), each by `digamma_diff`.
pub fn mean<T: Real>(eta: &[T], out: &mut [T]) {
    let (a, b) = (eta[0] + T::ONE, eta[1] + T::ONE);
    out[0] = digamma_diff(a, b);
    out[1] = digamma_diff(b, a);
}

/// ∇²A(η) = [[ψ′(a) − ψ′(a + b), −ψ′(a + b)], [−ψ′(a + b), ψ′(b) − ψ′(a + b)]].
pub fn hessian<T: Real>(eta: &[T], out: &mut [T]) {
    let (a, b) = (eta[0] + T::ONE, eta[1] + T::ONE);
    let tc = trigamma(a + b);
    out[0] = trigamma_diff(a, b);
    out[1] = -tc;
    out[2] = -tc;
    out[3] = trigamma_diff(b, a);
}

/// t(y) = (ln y, ln_1p(−y)).
pub fn suff_stat<T: Real>(y: T, out: &mut [T]) {
    out[0] = y.ln();
    out[1] = (-y).ln_1p();
}

/// nll = lβ(a, b) − η₁ ln y − η₂ ln_1p(−y); ∂nll/∂η = ∇A(η) − t(y).
pub fn nll_grad<T: Real>(y: T, eta: &[T], grad: &mut [T]) -> T {
    let (ly, l1y) = (y.ln(), (-y).ln_1p());
    mean(eta, grad);
    grad[0] -= ly;
    grad[1] -= l1y;
    log_partition(eta) - eta[0] * ly - eta[1] * l1y
}

/// Mean → natural from (E ln y, E ln(1 − y)) by damped Newton on ∇A(η) = m with ∇²A.
pub fn natural_from_mean<T: Real>(m: &[T], out: &mut [T], row: usize) -> Result<(), ExpfamError> {
    let (m0, m1) = (m[0].to_f64(), m[1].to_f64());
    if !(m0 < 0.0 && m1 < 0.0 && (m0.exp() + m1.exp()) < 1.0) {
        return Err(domain(
            NAME,
            row,
            0,
            m[0],
            "E ln y < 0, E ln(1-y) < 0, e^m1 + e^m2 < 1",
        ));
    }
    let mut eta = [0.0f64, 0.0];
    let (mut g, mut h) = ([0.0f64; 2], [0.0f64; 4]);
    for _ in 0..200 {
        mean(&eta, &mut g);
        let r = [g[0] - m0, g[1] - m1];
        if r[0].abs() + r[1].abs() < 1e-14 * (m0.abs() + m1.abs()) {
            break;
        }
        hessian(&eta, &mut h);
        let det = h[0] * h[3] - h[1] * h[2];
        let step = [
            (h[3] * r[0] - h[1] * r[1]) / det,
            (h[0] * r[1] - h[2] * r[0]) / det,
        ];
        let mut t = 1.0;
        // Stay inside the domain η > −1.
        while eta[0] - t * step[0] <= -1.0 || eta[1] - t * step[1] <= -1.0 {
            t *= 0.5;
        }
        eta = [eta[0] - t * step[0], eta[1] - t * step[1]];
    }
    out[0] = T::from_f64(eta[0]);
    out[1] = T::from_f64(eta[1]);
    Ok(())
}

/// Draws y ~ Beta(a, b), clamped into the open interval (0, 1).
pub fn sample<T: Real, R: Rng + ?Sized>(eta: &[T], rng: &mut R) -> T {
    let d = Beta::new(eta[0].to_f64() + 1.0, eta[1].to_f64() + 1.0).expect("validated shapes");
    let y: f64 = d.sample(rng);
    T::from_f64(y.clamp(f64::MIN_POSITIVE, 1.0 - f64::EPSILON / 2.0))
}
