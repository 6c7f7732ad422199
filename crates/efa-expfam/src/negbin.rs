//! Negative binomial(r): η = ln p < 0 (p the success probability, y the successes before the
//! r-th failure), t(y) = y, log h = lnΓ(y + r) − lnΓ(r) − lnΓ(y + 1), A(η) = −r ln(1 − e^η).

use crate::common::{domain, is_count, no_sampler, support};
use crate::ExpfamError;
use efa_num::scalar::{lbeta, lgamma1p, lgamma_diff, log1mexp};
use efa_num::Real;
use rand::Rng;
use rand_distr::{Distribution, Gamma, Poisson};

/// Reference name.
pub const NAME: &str = "negative_binomial";

/// Support check: y a non-negative integer.
pub fn check_obs<T: Real>(y: T, row: usize) -> Result<(), ExpfamError> {
    if is_count(y) {
        Ok(())
    } else {
        Err(support(NAME, row, 0, y, "a non-negative integer count"))
    }
}

/// Domain check: η < 0 finite.
pub fn check_eta<T: Real>(eta: T, row: usize) -> Result<(), ExpfamError> {
    if eta.is_finite() && eta < T::ZERO {
        Ok(())
    } else {
        Err(domain(NAME, row, 0, eta, "eta = log p < 0"))
    }
}

/// A(η) = −r log1mexp(η).
pub fn log_partition<T: Real>(r: T, eta: T) -> T {
    -r * log1mexp(eta)
}

/// q = e^η/(1 − e^η) = 1/expm1(−η).
#[inline]
fn odds<T: Real>(eta: T) -> T {
    T::ONE / (-eta).exp_m1()
}

/// ∇A(η) = r q, q = 1/expm1(−η).
pub fn mean<T: Real>(r: T, eta: T) -> T {
    r * odds(eta)
}

/// ∇²A(η) = r q (1 + q).
pub fn hessian<T: Real>(r: T, eta: T) -> T {
    let q = odds(eta);
    r * q * (T::ONE + q)
}

/// log h(y) = lnΓ(y + r) − lnΓ(r) − lnΓ(y + 1); exactly 0 for y = 0 and for r = 1
/// (h = C(y + r − 1, y) = 1). For ½ ≤ r ≤ 2, with ρ = r − 1 (exact there), log h ≈ ρ·H_y is
/// small and is computed without forming lgamma of 1 + ρ or y + 1 + ρ:
/// * y < 16: Σ_{j=1..y} ln_1p(ρ/j) (h = Π_{j=1..y} (j + ρ)/j, terms of one sign);
/// * y ≥ 16: [`lgamma_diff`]\(y + 1, ρ) − [`lgamma1p`]\(ρ) ≈ ρ(ψ(y + 1) + γ), two terms of the
///   sign of ρ.
///
/// Otherwise −lβ(r, y + 1) − ln(y + r) with the stable lβ.
pub fn log_base<T: Real>(r: T, y: T) -> T {
    if y == T::ZERO || r == T::ONE {
        T::ZERO
    } else if r >= T::HALF && r <= T::TWO {
        let rho = r - T::ONE;
        if y < T::from_f64(16.0) {
            let mut acc = T::ZERO;
            let mut j = T::ONE;
            while j <= y {
                acc += (rho / j).ln_1p();
                j += T::ONE;
            }
            acc
        } else {
            lgamma_diff(y + T::ONE, rho) - lgamma1p(rho)
        }
    } else {
        -lbeta(r, y + T::ONE) - (y + r).ln()
    }
}

/// nll = lβ(r, y + 1) + ln(y + r) − yη − r log1mexp(η); ∂nll/∂η = r q − y.
pub fn nll_grad<T: Real>(r: T, y: T, eta: T) -> (T, T) {
    let a = -r * log1mexp(eta);
    let g = r * odds(eta) - y;
    if y == T::ZERO {
        return (a, g);
    }
    (-log_base(r, y) - y * eta + a, g)
}

/// Mean → natural: η = −ln_1p(r/m), m > 0.
pub fn natural_from_mean<T: Real>(r: T, m: T, row: usize) -> Result<T, ExpfamError> {
    if m > T::ZERO && m.is_finite() {
        Ok(-(r / m).ln_1p())
    } else {
        Err(domain(NAME, row, 0, m, "mean > 0"))
    }
}

/// Draws y as a Gamma–Poisson mixture: G ~ Gamma(r, scale q), y ~ Poisson(G).
pub fn sample<T: Real, R: Rng + ?Sized>(
    r: f64,
    eta: T,
    rng: &mut R,
    row: usize,
) -> Result<T, ExpfamError> {
    let q = 1.0 / (-eta.to_f64()).exp_m1();
    if !q.is_finite() {
        return Err(no_sampler(NAME, row, eta.to_f64()));
    }
    let bad = |_| no_sampler(NAME, row, eta.to_f64());
    let g = Gamma::new(r, q).map_err(bad)?.sample(rng);
    if g <= 0.0 {
        return Ok(T::ZERO);
    }
    let p = Poisson::new(g).map_err(|_| no_sampler(NAME, row, eta.to_f64()))?;
    Ok(T::from_f64(p.sample(rng)))
}
