//! Gamma (shape α, rate β): η = (α − 1, −β), t(y) = (ln y, y), log h = 0,
//! A(η) = lnΓ(η₁ + 1) − (η₁ + 1) ln(−η₂).

use crate::common::{c, domain, no_sampler, support, HALF_LN_2PI};
use crate::ExpfamError;
use efa_num::scalar::{
    digamma1p, digamma_minus_ln, lgamma1p, log1pmx, stirling_remainder, trigamma,
};
use efa_num::Real;
use rand::Rng;
use rand_distr::{Distribution, Gamma};

/// Reference name.
pub const NAME: &str = "gamma";
/// Shapes at or above this use the Stirling forms.
const LARGE: f64 = 16.0;

/// Support check: y > 0 finite.
pub fn check_obs<T: Real>(y: T, row: usize) -> Result<(), ExpfamError> {
    if y.is_finite() && y > T::ZERO {
        Ok(())
    } else {
        Err(support(NAME, row, 0, y, "a finite y > 0"))
    }
}

/// Domain check: η₁ > −1, η₂ < 0, both finite.
pub fn check_eta<T: Real>(eta: &[T], row: usize) -> Result<(), ExpfamError> {
    if !(eta[0].is_finite() && eta[0] > -T::ONE) {
        return Err(domain(NAME, row, 0, eta[0], "eta1 = shape - 1 > -1"));
    }
    if !(eta[1].is_finite() && eta[1] < T::ZERO) {
        return Err(domain(NAME, row, 1, eta[1], "eta2 = -rate < 0"));
    }
    Ok(())
}

/// A(η) = lnΓ(α) − α ln β; for α ≥ 16 as α(ln(α/β) − 1) − ½ ln α + ½ ln 2π + S(α), below as
/// lgamma1p(η₁) − (η₁ ln β + ln β), so that a shape near 1 (η₁ ≈ 0, lnΓ(α) ≈ −γη₁) keeps its
/// relative accuracy ([`lgamma1p`] never forms 1 + η₁).
pub fn log_partition<T: Real>(eta: &[T]) -> T {
    let a = eta[0] + T::ONE;
    let beta = -eta[1];
    if a >= c(LARGE) {
        a * ((a / beta).ln() - T::ONE) - T::HALF * a.ln()
            + c::<T>(HALF_LN_2PI)
            + stirling_remainder(a)
    } else {
        let lb = beta.ln();
        lgamma1p(eta[0]) - (eta[0] * lb + lb)
    }
}

/// E ln y = ψ(α) − ln β: as (ψ(α) − ln α) + ln(α/β) for α ≥ 16, else as
/// [`digamma1p`](η₁) − ln β (ψ(1 + η₁) without forming 1 + η₁, so ψ keeps its relative
/// accuracy near its root α ≈ 1.4616).
fn mean_log<T: Real>(eta1: T, a: T, beta: T) -> T {
    if a >= c(LARGE) {
        digamma_minus_ln(a) + (a / beta).ln()
    } else {
        digamma1p(eta1) - beta.ln()
    }
}

/// ∇A(η) = (ψ(α) − ln β, α/β).
pub fn mean<T: Real>(eta: &[T], out: &mut [T]) {
    let a = eta[0] + T::ONE;
    let beta = -eta[1];
    out[0] = mean_log(eta[0], a, beta);
    out[1] = a / beta;
}

/// ∇²A(η) = [[ψ′(α), 1/β], [1/β, α/β²]].
pub fn hessian<T: Real>(eta: &[T], out: &mut [T]) {
    let a = eta[0] + T::ONE;
    let beta = -eta[1];
    out[0] = trigamma(a);
    out[1] = T::ONE / beta;
    out[2] = out[1];
    out[3] = a / beta / beta;
}

/// t(y) = (ln y, y).
pub fn suff_stat<T: Real>(y: T, out: &mut [T]) {
    out[0] = y.ln();
    out[1] = y;
}

/// nll = lnΓ(α) − α ln β − η₁ ln y + βy. For α ≥ 16 and w = (βy − α)/α with |w| < ½:
/// nll = S(α) + ½ ln 2π − ½ ln α + ln y − α·log1pmx(w) (no cancellation at the mode).
/// ∂nll/∂η = (ψ(α) − ln β − ln y, α/β − y) = ((ψ(α) − ln α) − ln_1p(w), −(βy − α)/β) there.
pub fn nll_grad<T: Real>(y: T, eta: &[T], grad: &mut [T]) -> T {
    let a = eta[0] + T::ONE;
    let beta = -eta[1];
    let excess = beta.mul_add(y, -a); // βy − α
    grad[1] = -excess / beta;
    let w = excess / a;
    if a >= c(LARGE) && w.abs() < T::HALF {
        grad[0] = digamma_minus_ln(a) - w.ln_1p();
        return stirling_remainder(a) + c::<T>(HALF_LN_2PI) - T::HALF * a.ln() + y.ln()
            - a * log1pmx(w);
    }
    grad[0] = mean_log(eta[0], a, beta) - y.ln();
    log_partition(eta) - eta[0] * y.ln() + beta * y
}

/// Mean → natural from (E ln y, E y): solves ψ(α) − ln α = E ln y − ln E y (< 0) by Newton
/// in ln α, then β = α / E y.
pub fn natural_from_mean<T: Real>(m: &[T], out: &mut [T], row: usize) -> Result<(), ExpfamError> {
    let (ml, my) = (m[0].to_f64(), m[1].to_f64());
    if !(my > 0.0 && my.is_finite()) {
        return Err(domain(NAME, row, 1, m[1], "E[y] > 0"));
    }
    let target = ml - my.ln();
    if !(target < 0.0 && target.is_finite()) {
        return Err(domain(NAME, row, 0, m[0], "E[ln y] < ln E[y]"));
    }
    // ψ(α) − ln α ≈ −1/(2α): start there; Newton on g(s) = ψ(e^s) − s − target.
    let mut s = (0.5 / -target).ln();
    for _ in 0..100 {
        let a = s.exp();
        let g = digamma_minus_ln(a) - target;
        let dg = a * trigamma(a) - 1.0;
        let step = g / dg;
        s -= step.clamp(-2.0, 2.0);
        if step.abs() < 1e-15 * s.abs().max(1.0) {
            break;
        }
    }
    let a = s.exp();
    out[0] = T::from_f64(a - 1.0);
    out[1] = T::from_f64(-a / my);
    Ok(())
}

/// Draws y ~ Gamma(α, rate β).
pub fn sample<T: Real, R: Rng + ?Sized>(
    eta: &[T],
    rng: &mut R,
    row: usize,
) -> Result<T, ExpfamError> {
    let a = eta[0].to_f64() + 1.0;
    let scale = 1.0 / -eta[1].to_f64();
    if !scale.is_finite() {
        return Err(no_sampler(NAME, row, eta[1].to_f64()));
    }
    let d = Gamma::new(a, scale).map_err(|_| no_sampler(NAME, row, eta[1].to_f64()))?;
    Ok(T::from_f64(d.sample(rng)))
}
