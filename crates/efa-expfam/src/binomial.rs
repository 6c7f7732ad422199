//! Binomial(n): η = logit p, t(y) = y ∈ {0..n}, log h = ln C(n, y), A(η) = n softplus(η).

use crate::common::{check_finite_eta, is_count, logistic_parts, support};
use crate::ExpfamError;
use efa_num::scalar::{ln_binomial, sigmoid, softplus};
use efa_num::Real;
use rand::Rng;
use rand_distr::{Binomial, Distribution};

/// Reference name.
pub const NAME: &str = "binomial";

/// Support check: y integer in [0, n].
pub fn check_obs<T: Real>(n: T, y: T, row: usize) -> Result<(), ExpfamError> {
    if is_count(y) && y <= n {
        Ok(())
    } else {
        Err(support(NAME, row, 0, y, "an integer count 0 <= y <= n"))
    }
}

/// Domain check: η finite.
pub fn check_eta<T: Real>(eta: T, row: usize) -> Result<(), ExpfamError> {
    check_finite_eta(NAME, &[eta], row)
}

/// A(η) = n softplus(η).
pub fn log_partition<T: Real>(n: T, eta: T) -> T {
    n * softplus(eta)
}

/// ∇A(η) = n σ(η).
pub fn mean<T: Real>(n: T, eta: T) -> T {
    n * sigmoid(eta)
}

/// ∇²A(η) = n σ(η) σ(−η).
pub fn hessian<T: Real>(n: T, eta: T) -> T {
    n * sigmoid(eta) * sigmoid(-eta)
}

/// log h(y) = ln C(n, y) = −ln(n + 1) − lβ(y + 1, n − y + 1).
pub fn log_base<T: Real>(n: T, y: T) -> T {
    ln_binomial(n, y)
}

/// nll = −ln C(n, y) + y softplus(−η) + (n − y) softplus(η);
/// ∂nll/∂η = n σ(η) − y = (n − y) σ(η) − y σ(−η).
pub fn nll_grad<T: Real>(n: T, y: T, eta: T) -> (T, T) {
    let m = n - y;
    let (sp, sm, sig, sig_m) = logistic_parts(eta);
    let mut nll = -ln_binomial(n, y);
    let mut g = T::ZERO;
    if y > T::ZERO {
        nll += y * sm;
        g -= y * sig_m;
    }
    if m > T::ZERO {
        nll += m * sp;
        g += m * sig;
    }
    (nll, g)
}

/// Mean → natural: η = logit(m/n).
pub fn natural_from_mean<T: Real>(n: T, m: T, row: usize) -> Result<T, ExpfamError> {
    crate::bernoulli::natural_from_mean(m / n, row).map_err(|_| ExpfamError::Domain {
        family: NAME,
        row: Some(row),
        component: 0,
        value: m.to_f64(),
        expected: "mean in (0, n)",
    })
}

/// Draws y ~ Binomial(n, σ(η)).
pub fn sample<T: Real, R: Rng + ?Sized>(n: u64, eta: T, rng: &mut R) -> T {
    let d = Binomial::new(n, sigmoid(eta.to_f64())).expect("p in [0, 1]");
    T::from_f64(d.sample(rng) as f64)
}
