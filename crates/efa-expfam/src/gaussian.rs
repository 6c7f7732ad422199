//! Gaussian with unknown mean and variance: η = (μ/s2, −1/(2 s2)), t(y) = (y, y²),
//! log h = −½ ln(2π), A(η) = −η₁²/(4η₂) − ½ ln(−2η₂).

use crate::common::{c, check_finite_obs, domain, no_sampler, HALF_LN_2PI};
use crate::ExpfamError;
use efa_num::Real;
use rand::Rng;
use rand_distr::{Distribution, Normal};

/// Reference name.
pub const NAME: &str = "gaussian";

/// Support check: y finite.
pub fn check_obs<T: Real>(y: T, row: usize) -> Result<(), ExpfamError> {
    check_finite_obs(NAME, y, row)
}

/// Domain check: η₁ finite, η₂ < 0 finite.
pub fn check_eta<T: Real>(eta: &[T], row: usize) -> Result<(), ExpfamError> {
    if !eta[0].is_finite() {
        return Err(domain(NAME, row, 0, eta[0], "a finite real number"));
    }
    if !(eta[1].is_finite() && eta[1] < T::ZERO) {
        return Err(domain(NAME, row, 1, eta[1], "eta2 = -1/(2 s2) < 0"));
    }
    Ok(())
}

/// (μ, s2) = (−η₁/(2η₂), −1/(2η₂)).
#[inline]
pub fn moments<T: Real>(eta: &[T]) -> (T, T) {
    let two_e2 = T::TWO * eta[1];
    (-eta[0] / two_e2, -T::ONE / two_e2)
}

/// A(η) = η₁ μ/2 − ½ ln(−2η₂)  (= −η₁²/(4η₂) − ½ ln(−2η₂)).
pub fn log_partition<T: Real>(eta: &[T]) -> T {
    let (mu, _) = moments(eta);
    eta[0] * mu * T::HALF - T::HALF * (-T::TWO * eta[1]).ln()
}

/// ∇A(η) = (μ, μ² + s2).
pub fn mean<T: Real>(eta: &[T], out: &mut [T]) {
    let (mu, s2) = moments(eta);
    out[0] = mu;
    out[1] = mu * mu + s2;
}

/// ∇²A(η) = [[s2, 2μ s2], [2μ s2, 2 s2 (2μ² + s2)]] (row-major 2×2).
pub fn hessian<T: Real>(eta: &[T], out: &mut [T]) {
    let (mu, s2) = moments(eta);
    let off = T::TWO * mu * s2;
    out[0] = s2;
    out[1] = off;
    out[2] = off;
    out[3] = T::TWO * s2 * (T::TWO * mu * mu + s2);
}

/// t(y) = (y, y²).
pub fn suff_stat<T: Real>(y: T, out: &mut [T]) {
    out[0] = y;
    out[1] = y * y;
}

/// log h(y) = −½ ln(2π).
pub fn log_base<T: Real>() -> T {
    -c::<T>(HALF_LN_2PI)
}

/// nll = (y − μ)²·(−η₂) + ½ ln(2π) − ½ ln(−2η₂);
/// ∂nll/∂η = (μ − y, (μ − y)(μ + y) + s2).
pub fn nll_grad<T: Real>(y: T, eta: &[T], grad: &mut [T]) -> T {
    let (mu, s2) = moments(eta);
    let d = mu - y;
    grad[0] = d;
    grad[1] = d * (mu + y) + s2;
    d * d * (-eta[1]) + c::<T>(HALF_LN_2PI) - T::HALF * (-T::TWO * eta[1]).ln()
}

/// Mean → natural: from (E y, E y²), s2 = E y² − (E y)² > 0, η = (μ/s2, −1/(2 s2)).
pub fn natural_from_mean<T: Real>(m: &[T], out: &mut [T], row: usize) -> Result<(), ExpfamError> {
    let s2 = m[1] - m[0] * m[0];
    if !(s2 > T::ZERO && s2.is_finite() && m[0].is_finite()) {
        return Err(domain(NAME, row, 1, m[1], "E[y^2] - E[y]^2 > 0"));
    }
    out[0] = m[0] / s2;
    out[1] = -T::ONE / (T::TWO * s2);
    Ok(())
}

/// Draws y ~ N(μ, s2).
pub fn sample<T: Real, R: Rng + ?Sized>(
    eta: &[T],
    rng: &mut R,
    row: usize,
) -> Result<T, ExpfamError> {
    let (mu, s2) = moments(eta);
    if !(mu.is_finite() && s2.is_finite()) {
        return Err(no_sampler(NAME, row, eta[1].to_f64()));
    }
    let d = Normal::new(mu.to_f64(), s2.to_f64().sqrt())
        .map_err(|_| no_sampler(NAME, row, eta[1].to_f64()))?;
    Ok(T::from_f64(d.sample(rng)))
}
