//! Exponential: η = −λ < 0, t(y) = y ≥ 0, log h = 0, A(η) = −ln(−η).

use crate::common::{domain, support};
use crate::ExpfamError;
use efa_num::Real;
use rand::Rng;
use rand_distr::{Distribution, Exp};

/// Reference name.
pub const NAME: &str = "exponential";

/// Support check: y ≥ 0 finite.
pub fn check_obs<T: Real>(y: T, row: usize) -> Result<(), ExpfamError> {
    if y.is_finite() && y >= T::ZERO {
        Ok(())
    } else {
        Err(support(NAME, row, 0, y, "a finite y >= 0"))
    }
}

/// Domain check: η < 0 finite.
pub fn check_eta<T: Real>(eta: T, row: usize) -> Result<(), ExpfamError> {
    if eta.is_finite() && eta < T::ZERO {
        Ok(())
    } else {
        Err(domain(NAME, row, 0, eta, "eta = -rate < 0"))
    }
}

/// A(η) = −ln λ, λ = −η.
pub fn log_partition<T: Real>(eta: T) -> T {
    -(-eta).ln()
}

/// ∇A(η) = 1/λ.
pub fn mean<T: Real>(eta: T) -> T {
    T::ONE / (-eta)
}

/// ∇²A(η) = 1/λ² = (1/λ)².
pub fn hessian<T: Real>(eta: T) -> T {
    let m = T::ONE / (-eta);
    m * m
}

/// nll = λy − ln λ; ∂nll/∂η = 1/λ − y = fma(−λ, y, 1)/λ.
pub fn nll_grad<T: Real>(y: T, eta: T) -> (T, T) {
    let lambda = -eta;
    (
        lambda.mul_add(y, -lambda.ln()),
        (-lambda).mul_add(y, T::ONE) / lambda,
    )
}

/// Mean → natural: η = −1/m, m > 0.
pub fn natural_from_mean<T: Real>(m: T, row: usize) -> Result<T, ExpfamError> {
    if m > T::ZERO && m.is_finite() {
        Ok(-T::ONE / m)
    } else {
        Err(domain(NAME, row, 0, m, "mean > 0"))
    }
}

/// Draws y ~ Exp(λ).
pub fn sample<T: Real, R: Rng + ?Sized>(eta: T, rng: &mut R) -> T {
    let d = Exp::new(-eta.to_f64()).expect("rate > 0");
    T::from_f64(d.sample(rng))
}
