//! Gaussian with known variance s2: η = μ/s2, t(y) = y,
//! log h(y) = −y²/(2 s2) − ½ ln(2π s2), A(η) = s2 η²/2.

use crate::common::{c, check_finite_eta, check_finite_obs, no_sampler, HALF_LN_2PI};
use crate::ExpfamError;
use efa_num::Real;
use rand::Rng;
use rand_distr::{Distribution, Normal};

/// Reference name.
pub const NAME: &str = "gaussian_known_var";

/// Support check: y finite.
pub fn check_obs<T: Real>(y: T, row: usize) -> Result<(), ExpfamError> {
    check_finite_obs(NAME, y, row)
}

/// Domain check: η finite.
pub fn check_eta<T: Real>(eta: T, row: usize) -> Result<(), ExpfamError> {
    check_finite_eta(NAME, &[eta], row)
}

/// A(η) = s2 η²/2, computed as (s2 η)·η/2.
pub fn log_partition<T: Real>(s2: T, eta: T) -> T {
    (s2 * eta) * eta * T::HALF
}

/// ∇A(η) = μ = s2 η.
pub fn mean<T: Real>(s2: T, eta: T) -> T {
    s2 * eta
}

/// ∇²A(η) = s2.
pub fn hessian<T: Real>(s2: T, _eta: T) -> T {
    s2
}

/// log h(y) = −y²/(2 s2) − ½ ln(2π s2).
pub fn log_base<T: Real>(s2: T, y: T) -> T {
    -(y * y) / (T::TWO * s2) - (c::<T>(HALF_LN_2PI) + T::HALF * s2.ln())
}

/// nll = (μ − y)²/(2 s2) + ½ ln(2π s2) with μ − y = fma(s2, η, −y); ∂nll/∂η = μ − y.
pub fn nll_grad<T: Real>(s2: T, y: T, eta: T) -> (T, T) {
    let d = s2.mul_add(eta, -y);
    (
        d * d / (T::TWO * s2) + (c::<T>(HALF_LN_2PI) + T::HALF * s2.ln()),
        d,
    )
}

/// Mean → natural: η = μ/s2.
pub fn natural_from_mean<T: Real>(s2: T, mu: T) -> T {
    mu / s2
}

/// Draws y ~ N(s2 η, s2).
pub fn sample<T: Real, R: Rng + ?Sized>(
    s2: T,
    eta: T,
    rng: &mut R,
    row: usize,
) -> Result<T, ExpfamError> {
    let s2f = s2.to_f64();
    if !(s2f * eta.to_f64()).is_finite() {
        return Err(no_sampler(NAME, row, eta.to_f64()));
    }
    let d = Normal::new(s2f * eta.to_f64(), s2f.sqrt())
        .map_err(|_| no_sampler(NAME, row, eta.to_f64()))?;
    Ok(T::from_f64(d.sample(rng)))
}
