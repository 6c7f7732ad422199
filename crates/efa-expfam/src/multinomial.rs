//! Multinomial(n, K): η = K unnormalised log-probabilities, t(y) = count vector,
//! log h = ln n! − Σ ln yᵢ!, A(η) = n logsumexp(η).

use crate::categorical::{check_logits, probs, rest};
use crate::common::{is_count, support};
use crate::ExpfamError;
use efa_num::scalar::{ln_binomial, logsumexp};
use efa_num::Real;
use rand::Rng;
use rand_distr::{Binomial, Distribution};

/// Reference name.
pub const NAME: &str = "multinomial";

/// Support check: every yᵢ a non-negative integer and Σ yᵢ = n.
pub fn check_obs<T: Real>(n: T, y: &[T], row: usize) -> Result<(), ExpfamError> {
    let mut total = T::ZERO;
    for (i, &v) in y.iter().enumerate() {
        if !is_count(v) {
            return Err(support(NAME, row, i, v, "a non-negative integer count"));
        }
        total += v;
    }
    if total != n {
        return Err(ExpfamError::Support {
            family: NAME,
            row: Some(row),
            component: y.len(),
            value: total.to_f64(),
            expected: "counts summing to n (value shown is the sum)",
        });
    }
    Ok(())
}

/// Domain check: no NaN or +∞, not all −∞.
pub fn check_eta<T: Real>(eta: &[T], row: usize) -> Result<(), ExpfamError> {
    check_logits(NAME, eta, row)
}

/// A(η) = n logsumexp(η).
pub fn log_partition<T: Real>(n: T, eta: &[T]) -> T {
    n * logsumexp(eta)
}

/// ∇A(η) = n softmax(η).
pub fn mean<T: Real>(n: T, eta: &[T], out: &mut [T]) {
    probs(eta, out);
    out.iter_mut().for_each(|v| *v *= n);
}

/// ∇²A(η) = n (diag p − p pᵀ).
pub fn hessian<T: Real>(n: T, eta: &[T], out: &mut [T]) {
    crate::categorical::hessian(eta, out);
    out.iter_mut().for_each(|v| *v *= n);
}

/// log h(y) = ln n! − Σ ln yᵢ! = Σᵢ ln C(y₀ + … + yᵢ, yᵢ) (a product of stable binomials).
pub fn log_base<T: Real>(y: &[T]) -> T {
    let mut cum = T::ZERO;
    let mut acc = T::ZERO;
    for &v in y {
        cum += v;
        acc += ln_binomial(cum, v);
    }
    acc
}

/// nll = −log h(y) + Σ_{yᵢ>0} yᵢ (m − ηᵢ + ln_1p(s));
/// ∂nll/∂ηᵢ = n pᵢ − yᵢ, as (n − yᵢ) − n Σ_{j≠i} pⱼ when pᵢ > ½.
pub fn nll_grad<T: Real>(n: T, y: &[T], eta: &[T], grad: &mut [T]) -> T {
    let (j, m, s) = probs(eta, grad);
    let l = s.ln_1p();
    let mut nll = -log_base(y);
    for i in 0..eta.len() {
        if y[i] > T::ZERO {
            nll += y[i] * ((m - eta[i]) + l);
        }
        grad[i] = if grad[i] > T::HALF {
            (n - y[i]) - n * rest(eta, i, j, m, s)
        } else {
            n * grad[i] - y[i]
        };
    }
    nll
}

/// Mean → natural: ηᵢ = ln(mᵢ/n).
pub fn natural_from_mean<T: Real>(
    n: T,
    m: &[T],
    out: &mut [T],
    row: usize,
) -> Result<(), ExpfamError> {
    let p: Vec<T> = m.iter().map(|&v| v / n).collect();
    crate::categorical::natural_from_mean(&p, out, row)
}

/// Draws counts by sequential binomials: yᵢ ~ Bin(n − Σ_{j<i} yⱼ, pᵢ / Σ_{j≥i} pⱼ).
pub fn sample<T: Real, R: Rng + ?Sized>(n: u64, eta: &[T], rng: &mut R, out: &mut [T]) {
    let k = eta.len();
    let mut p = vec![T::ZERO; k];
    probs(eta, &mut p);
    let mut tail = vec![0.0f64; k + 1];
    for i in (0..k).rev() {
        tail[i] = tail[i + 1] + p[i].to_f64();
    }
    let mut left = n;
    for i in 0..k {
        let draw = if i + 1 == k || left == 0 {
            left
        } else {
            let q = (p[i].to_f64() / tail[i]).clamp(0.0, 1.0);
            Binomial::new(left, q).expect("q in [0, 1]").sample(rng)
        };
        out[i] = T::from_f64(draw as f64);
        left -= draw;
    }
}
