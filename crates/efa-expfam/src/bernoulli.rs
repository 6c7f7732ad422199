//! Bernoulli: η = logit p, t(y) = y ∈ {0, 1}, log h = 0, A(η) = softplus(η).

use crate::common::{check_finite_eta, logistic_parts, support};
use crate::ExpfamError;
use efa_num::scalar::{sigmoid, softplus};
use efa_num::Real;
use rand::Rng;

/// Reference name.
pub const NAME: &str = "bernoulli";

/// Support check: y ∈ {0, 1}.
pub fn check_obs<T: Real>(y: T, row: usize) -> Result<(), ExpfamError> {
    if y == T::ZERO || y == T::ONE {
        Ok(())
    } else {
        Err(support(NAME, row, 0, y, "y in {0, 1}"))
    }
}

/// Domain check: η finite.
pub fn check_eta<T: Real>(eta: T, row: usize) -> Result<(), ExpfamError> {
    check_finite_eta(NAME, &[eta], row)
}

/// A(η) = softplus(η) = max(η, 0) + ln_1p(e^(−|η|)).
pub fn log_partition<T: Real>(eta: T) -> T {
    softplus(eta)
}

/// ∇A(η) = σ(η).
pub fn mean<T: Real>(eta: T) -> T {
    sigmoid(eta)
}

/// ∇²A(η) = σ(η) σ(−η)  (never 1 − σ by subtraction).
pub fn hessian<T: Real>(eta: T) -> T {
    sigmoid(eta) * sigmoid(-eta)
}

/// nll = softplus(−η) for y = 1, softplus(η) for y = 0;
/// ∂nll/∂η = σ(η) − y = −σ(−η) (y = 1) or σ(η) (y = 0).
pub fn nll_grad<T: Real>(y: T, eta: T) -> (T, T) {
    let (sp, sm, sig, sig_m) = logistic_parts(eta);
    if y == T::ONE {
        (sm, -sig_m)
    } else {
        (sp, sig)
    }
}

/// Mean → natural: η = logit p = ln p − ln_1p(−p), for 0 < p < 1.
pub fn natural_from_mean<T: Real>(p: T, row: usize) -> Result<T, ExpfamError> {
    if !(p > T::ZERO && p < T::ONE) {
        return Err(ExpfamError::Domain {
            family: NAME,
            row: Some(row),
            component: 0,
            value: p.to_f64(),
            expected: "mean p in (0, 1)",
        });
    }
    Ok(p.ln() - (-p).ln_1p())
}

/// Draws y ~ Bernoulli(σ(η)).
pub fn sample<T: Real, R: Rng + ?Sized>(eta: T, rng: &mut R) -> T {
    let u: f64 = rng.random();
    if u < sigmoid(eta.to_f64()) {
        T::ONE
    } else {
        T::ZERO
    }
}
