//! Categorical(K): η = K unnormalised log-probabilities (−∞ allowed: probability 0),
//! t(y) = one-hot(y), log h = 0, A(η) = logsumexp(η).

use crate::common::{domain, support};
use crate::ExpfamError;
use efa_num::scalar::{logsumexp, lse_parts};
use efa_num::Real;
use rand::Rng;

/// Reference name.
pub const NAME: &str = "categorical";

/// Support check: y an integer category in [0, K).
pub fn check_obs<T: Real>(k: usize, y: T, row: usize) -> Result<usize, ExpfamError> {
    if y.is_finite() && y >= T::ZERO && y == y.floor() && y.to_f64() < k as f64 {
        Ok(y.to_f64() as usize)
    } else {
        Err(support(NAME, row, 0, y, "a category index 0 <= y < K"))
    }
}

/// Domain check shared with the multinomial: no NaN, no +∞, at least one finite entry.
pub(crate) fn check_logits<T: Real>(
    family: &'static str,
    eta: &[T],
    row: usize,
) -> Result<(), ExpfamError> {
    for (i, &v) in eta.iter().enumerate() {
        if v.is_nan() || v == T::INFINITY {
            return Err(domain(family, row, i, v, "a finite logit or -inf"));
        }
    }
    if eta.iter().all(|&v| v == T::NEG_INFINITY) {
        return Err(domain(family, row, 0, eta[0], "at least one finite logit"));
    }
    Ok(())
}

/// Domain check: no NaN or +∞, not all −∞.
pub fn check_eta<T: Real>(eta: &[T], row: usize) -> Result<(), ExpfamError> {
    check_logits(NAME, eta, row)
}

/// A(η) = logsumexp(η) = m + ln_1p(Σ_{i≠argmax} e^(ηᵢ − m)).
pub fn log_partition<T: Real>(eta: &[T]) -> T {
    logsumexp(eta)
}

/// Softmax pieces: writes pᵢ = e^(ηᵢ − m)/(1 + s) into `p` and returns (argmax, m, s).
pub(crate) fn probs<T: Real>(eta: &[T], p: &mut [T]) -> (usize, T, T) {
    let (j, m, s) = lse_parts(eta);
    let denom = T::ONE + s;
    for (i, (pi, &e)) in p.iter_mut().zip(eta).enumerate() {
        *pi = if i == j {
            T::ONE / denom
        } else {
            (e - m).exp() / denom
        };
    }
    (j, m, s)
}

/// Σ_{i≠y} pᵢ without forming 1 − p_y: (1 + Σ_{i∉{argmax,y}} e^(ηᵢ−m))/(1 + s), or s/(1 + s)
/// when y is the argmax.
pub(crate) fn rest<T: Real>(eta: &[T], y: usize, j: usize, m: T, s: T) -> T {
    if y == j {
        return s / (T::ONE + s);
    }
    let mut others = T::ONE;
    for (i, &e) in eta.iter().enumerate() {
        if i != j && i != y {
            others += (e - m).exp();
        }
    }
    others / (T::ONE + s)
}

/// ∇A(η) = softmax(η).
pub fn mean<T: Real>(eta: &[T], out: &mut [T]) {
    probs(eta, out);
}

/// ∇²A(η) = diag(p) − p pᵀ, with diagonal pᵢ Σ_{j≠i} pⱼ (row-major K×K).
pub fn hessian<T: Real>(eta: &[T], out: &mut [T]) {
    let k = eta.len();
    let mut p = vec![T::ZERO; k];
    let (j, m, s) = probs(eta, &mut p);
    for a in 0..k {
        for b in 0..k {
            out[a * k + b] = if a == b {
                p[a] * rest(eta, a, j, m, s)
            } else {
                -(p[a] * p[b])
            };
        }
    }
}

/// nll = (m − η_y) + ln_1p(s); ∂nll/∂ηᵢ = pᵢ for i ≠ y and −Σ_{i≠y} pᵢ for i = y, with
/// Σ_{i≠y} pᵢ = (1 + (s − e_y))/(1 + s) (≥ 1/(1 + s), so the inner difference costs nothing).
pub fn nll_grad<T: Real>(y: usize, eta: &[T], grad: &mut [T]) -> T {
    let (j, m, s) = lse_parts(eta);
    let denom = T::ONE + s;
    let mut e_y = T::ONE;
    for (i, (g, &e)) in grad.iter_mut().zip(eta).enumerate() {
        let ei = if i == j { T::ONE } else { (e - m).exp() };
        if i == y {
            e_y = ei;
        }
        *g = ei / denom;
    }
    grad[y] = if y == j {
        -(s / denom)
    } else {
        -((T::ONE + (s - e_y)) / denom)
    };
    (m - eta[y]) + s.ln_1p()
}

/// Mean → natural: ηᵢ = ln pᵢ (pᵢ ≥ 0, not all 0).
pub fn natural_from_mean<T: Real>(p: &[T], out: &mut [T], row: usize) -> Result<(), ExpfamError> {
    for (i, (o, &v)) in out.iter_mut().zip(p).enumerate() {
        if !(v >= T::ZERO && v.is_finite()) {
            return Err(domain(NAME, row, i, v, "probabilities >= 0"));
        }
        *o = v.ln();
    }
    check_eta(out, row)
}

/// Draws a category by inverting the cumulative softmax probabilities.
pub fn sample<T: Real, R: Rng + ?Sized>(eta: &[T], rng: &mut R) -> T {
    let mut p = vec![T::ZERO; eta.len()];
    probs(eta, &mut p);
    T::from_usize(sample_index(&p, rng))
}

/// Index drawn with probabilities `p` (summing to 1) by inverse CDF; never a zero-probability
/// index.
pub(crate) fn sample_index<T: Real, R: Rng + ?Sized>(p: &[T], rng: &mut R) -> usize {
    let u: f64 = rng.random();
    let mut acc = 0.0;
    let mut last = 0;
    for (i, &pi) in p.iter().enumerate() {
        let pi = pi.to_f64();
        if pi > 0.0 {
            acc += pi;
            last = i;
            if u < acc {
                return i;
            }
        }
    }
    last
}
