//! Poisson: η = ln λ, t(y) = y ∈ {0, 1, …}, log h = −ln y!, A(η) = e^η.

use crate::common::{c, check_finite_eta, domain, is_count, no_sampler, support, HALF_LN_2PI};
use crate::ExpfamError;
use efa_num::scalar::{log1pmx, stirling_remainder};
use efa_num::Real;
use rand::Rng;
use rand_distr::{Distribution, Poisson};

/// Reference name.
pub const NAME: &str = "poisson";

/// Support check: y a non-negative integer.
pub fn check_obs<T: Real>(y: T, row: usize) -> Result<(), ExpfamError> {
    if is_count(y) {
        Ok(())
    } else {
        Err(support(NAME, row, 0, y, "a non-negative integer count"))
    }
}

/// Domain check: η finite.
pub fn check_eta<T: Real>(eta: T, row: usize) -> Result<(), ExpfamError> {
    check_finite_eta(NAME, &[eta], row)
}

/// A(η) = ∇A(η) = ∇²A(η) = e^η.
pub fn log_partition<T: Real>(eta: T) -> T {
    eta.exp()
}

/// log h(y) = −lnΓ(y + 1).
pub fn log_base<T: Real>(y: T) -> T {
    -(y + T::ONE).lgamma()
}

/// nll = λ − yη + lnΓ(y + 1), λ = e^η. For y ≥ 16 in Loader's saddle-point form
/// nll = S(y) + ½ ln(2πy) + bd0, with S the Stirling remainder and
/// bd0 = y ln(y/λ) + λ − y = −y·log1pmx((λ − y)/y) near the mode (|λ/y − 1| < ½).
/// ∂nll/∂η = λ − y.
pub fn nll_grad<T: Real>(y: T, eta: T) -> (T, T) {
    let lambda = eta.exp();
    let g = lambda - y;
    if y == T::ZERO {
        return (lambda, g);
    }
    if y < c(16.0) {
        return (lambda - y * eta + (y + T::ONE).lgamma(), g);
    }
    let w = g / y;
    let bd0 = if w.abs() < T::HALF {
        -y * log1pmx(w)
    } else {
        y * (y.ln() - eta) + g
    };
    (
        stirling_remainder(y) + c::<T>(HALF_LN_2PI) + T::HALF * y.ln() + bd0,
        g,
    )
}

/// Mean → natural: η = ln λ, λ > 0.
pub fn natural_from_mean<T: Real>(m: T, row: usize) -> Result<T, ExpfamError> {
    if m > T::ZERO && m.is_finite() {
        Ok(m.ln())
    } else {
        Err(domain(NAME, row, 0, m, "mean > 0"))
    }
}

/// Draws y ~ Poisson(e^η) (0 when e^η underflows; an error when e^η is beyond the
/// sampler's range).
pub fn sample<T: Real, R: Rng + ?Sized>(eta: T, rng: &mut R, row: usize) -> Result<T, ExpfamError> {
    let lambda = eta.to_f64().exp();
    if lambda <= 0.0 {
        return Ok(T::ZERO);
    }
    let d = Poisson::new(lambda).map_err(|_| no_sampler(NAME, row, eta.to_f64()))?;
    Ok(T::from_f64(d.sample(rng)))
}
