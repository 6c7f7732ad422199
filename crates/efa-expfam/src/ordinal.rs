//! Ordinal cumulative-logit model with K = len(c) + 1 categories 0..K−1 and strictly increasing
//! cut-points c: P(Y ≤ k) = σ(c_k − η). Not an exponential family in η: A, t and log h do not
//! exist; the model gives category probabilities, nll, ∂nll/∂η, ∂nll/∂c and ∂²nll/∂η².
//!
//! With u = c_y − η (absent for y = K − 1) and l = c_{y−1} − η (absent for y = 0):
//! P(Y = y) = σ(u) σ(−l) (1 − e^(l−u)), where l − u = c_{y−1} − c_y is taken from the
//! cut-points directly, so
//! nll = −ln σ(u) − ln σ(−l) − log1mexp(c_{y−1} − c_y).

use crate::common::{domain, support};
use crate::ExpfamError;
use efa_num::scalar::{log1mexp, log_sigmoid, sigmoid};
use efa_num::Real;
use rand::Rng;

/// Reference name.
pub const NAME: &str = "ordinal_logit";

/// Checks the cut-points: at least one, finite, strictly increasing.
pub fn check_cutpoints<T: Real>(cut: &[T]) -> Result<(), ExpfamError> {
    if cut.is_empty() {
        return Err(ExpfamError::Shape {
            family: NAME,
            what: "cutpoints",
            expected: 1,
            got: 0,
        });
    }
    for (i, &v) in cut.iter().enumerate() {
        if !v.is_finite() || (i > 0 && v <= cut[i - 1]) {
            return Err(ExpfamError::Param {
                family: NAME,
                name: format!("cutpoints[{i}]"),
                value: v.to_f64(),
                expected: "finite and strictly increasing",
            });
        }
    }
    Ok(())
}

/// Support check: y an integer category in [0, K), K = len(cut) + 1.
pub fn check_obs<T: Real>(k: usize, y: T, row: usize) -> Result<usize, ExpfamError> {
    if y.is_finite() && y >= T::ZERO && y == y.floor() && y.to_f64() < k as f64 {
        Ok(y.to_f64() as usize)
    } else {
        Err(support(NAME, row, 0, y, "a category index 0 <= y < K"))
    }
}

/// Domain check: η finite.
pub fn check_eta<T: Real>(eta: T, row: usize) -> Result<(), ExpfamError> {
    if eta.is_finite() {
        Ok(())
    } else {
        Err(domain(NAME, row, 0, eta, "a finite location"))
    }
}

/// P(Y = k) for every k, written into `out` (length K):
/// σ(c₀ − η), σ(u)σ(−l)(−expm1(c_{k−1} − c_k)), …, σ(η − c_{K−2}).
pub fn probs<T: Real>(cut: &[T], eta: T, out: &mut [T]) {
    let kk = cut.len() + 1;
    out[0] = sigmoid(cut[0] - eta);
    out[kk - 1] = sigmoid(eta - cut[kk - 2]);
    for k in 1..kk - 1 {
        let u = cut[k] - eta;
        let l = cut[k - 1] - eta;
        out[k] = sigmoid(u) * sigmoid(-l) * -(cut[k - 1] - cut[k]).exp_m1();
    }
}

/// nll = −ln P(Y = y) and its gradients: returns nll, writes ∂nll/∂η into `grad_eta` and
/// ADDS ∂nll/∂c into `grad_cut` (so rows accumulate):
/// ∂η = σ(−u) − σ(l); ∂c_y = −σ(−u) − g; ∂c_{y−1} = σ(l) + g, g = 1/expm1(c_y − c_{y−1})
/// (g only when both bounds exist).
pub fn nll_grad<T: Real>(cut: &[T], y: usize, eta: T, grad_eta: &mut T, grad_cut: &mut [T]) -> T {
    let kk = cut.len() + 1;
    let mut nll = T::ZERO;
    let mut ge = T::ZERO;
    let has_upper = y + 1 < kk;
    let has_lower = y > 0;
    let g = if has_upper && has_lower {
        let gap = cut[y] - cut[y - 1];
        nll -= log1mexp(-gap);
        T::ONE / gap.exp_m1()
    } else {
        T::ZERO
    };
    if has_upper {
        let u = cut[y] - eta;
        let su = sigmoid(-u);
        nll -= log_sigmoid(u);
        ge += su;
        grad_cut[y] -= su + g;
    }
    if has_lower {
        let l = cut[y - 1] - eta;
        let sl = sigmoid(l);
        nll -= log_sigmoid(-l);
        ge -= sl;
        grad_cut[y - 1] += sl + g;
    }
    *grad_eta = ge;
    nll
}

/// ∂²nll/∂η² = σ(u)σ(−u) + σ(l)σ(−l) (terms present as in [`nll_grad`]).
pub fn d2nll<T: Real>(cut: &[T], y: usize, eta: T) -> T {
    let kk = cut.len() + 1;
    let mut h = T::ZERO;
    if y + 1 < kk {
        let u = cut[y] - eta;
        h += sigmoid(u) * sigmoid(-u);
    }
    if y > 0 {
        let l = cut[y - 1] - eta;
        h += sigmoid(l) * sigmoid(-l);
    }
    h
}

/// Draws a category with probabilities [`probs`].
pub fn sample<T: Real, R: Rng + ?Sized>(cut: &[T], eta: T, rng: &mut R) -> T {
    let mut p = vec![T::ZERO; cut.len() + 1];
    probs(cut, eta, &mut p);
    T::from_usize(crate::categorical::sample_index(&p, rng))
}
