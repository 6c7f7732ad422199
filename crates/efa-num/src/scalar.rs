//! Numerically stable scalar functions (docs/design.md §4), generic over [`Real`].
//!
//! Rules followed throughout: never form `ln(eˣ + 1)`, `1 − σ(x)`, `1 − eˣ` or
//! `lgamma(a) + lgamma(b) − lgamma(a + b)` by subtraction where the result can be small
//! relative to the terms; factor out maxima; use `exp_m1` / `ln_1p`.

use crate::Real;

mod lngamma;
mod psi_root;

pub use psi_root::digamma1p;

pub use lngamma::{
    lbeta, lbeta1p, lgamma, lgamma1p, lgamma_diff, ln_binomial, stirling_remainder, EULER_GAMMA,
};

/// `½ ln(2π)`.
const HALF_LN_2PI: f64 = 0.918_938_533_204_672_8;
/// Arguments at or above this use asymptotic series (digamma, trigamma, Stirling).
const ASYMPTOTIC_FROM: f64 = 16.0;

#[inline(always)]
fn c<T: Real>(x: f64) -> T {
    T::from_f64(x)
}

/// softplus(x) = ln(1 + eˣ) = max(x, 0) + ln_1p(e^(−|x|)).
#[inline]
pub fn softplus<T: Real>(x: T) -> T {
    if x.is_nan() {
        return x;
    }
    x.max(T::ZERO) + (-x.abs()).exp().ln_1p()
}

/// σ(x) = 1 / (1 + e^(−x)), computed as `1/(1+e^(−x))` for x ≥ 0 and `eˣ/(1+eˣ)` for x < 0,
/// so neither side overflows.
#[inline]
pub fn sigmoid<T: Real>(x: T) -> T {
    if x >= T::ZERO {
        T::ONE / (T::ONE + (-x).exp())
    } else {
        let e = x.exp();
        e / (T::ONE + e)
    }
}

/// ln σ(x) = −softplus(−x).
#[inline]
pub fn log_sigmoid<T: Real>(x: T) -> T {
    -softplus(-x)
}

/// log1mexp(x) = ln(1 − eˣ) for x ≤ 0: `ln(−expm1 x)` for x > −ln 2, `ln_1p(−eˣ)` otherwise.
/// Returns −∞ at x = 0 and NaN for x > 0.
#[inline]
pub fn log1mexp<T: Real>(x: T) -> T {
    if x > -T::LN_2 {
        (-x.exp_m1()).ln()
    } else {
        (-x.exp()).ln_1p()
    }
}

/// log1pmx(x) = ln(1 + x) − x for x > −1, accurate for small |x|: with s = x/(2 + x),
/// ln(1 + x) − x = 2 Σ_{k≥1} s^(2k+1)/(2k+1) − s·x  (|x| < ½), else direct.
pub fn log1pmx<T: Real>(x: T) -> T {
    if x.abs() >= T::HALF {
        return x.ln_1p() - x;
    }
    let s = x / (T::TWO + x);
    let s2 = s * s;
    let mut pow = s * s2;
    let mut sum = T::ZERO;
    let mut k = 3usize;
    loop {
        let term = pow / T::from_usize(k);
        sum += term;
        if term.abs() <= sum.abs() * T::EPSILON * T::HALF || k > 80 {
            break;
        }
        pow *= s2;
        k += 2;
    }
    T::TWO * sum - s * x
}

/// The index and value of the first maximum of a slice (NaN entries are never chosen).
fn argmax<T: Real>(x: &[T]) -> (usize, T) {
    let mut best = 0usize;
    let mut m = T::NEG_INFINITY;
    for (i, &v) in x.iter().enumerate() {
        if v > m {
            m = v;
            best = i;
        }
    }
    (best, m)
}

/// The pieces of a stable logsumexp: `(argmax, m, s)` with m = max xᵢ and
/// s = Σ_{i≠argmax} exp(xᵢ − m), so that logsumexp = m + ln_1p(s).
/// For an all −∞ (or empty) slice m = −∞ and s = 0; if m = +∞, s = 0.
pub fn lse_parts<T: Real>(x: &[T]) -> (usize, T, T) {
    let (j, m) = argmax(x);
    if !m.is_finite() {
        return (j, m, T::ZERO);
    }
    let mut s = T::ZERO;
    for (i, &v) in x.iter().enumerate() {
        if i != j {
            s += (v - m).exp();
        }
    }
    (j, m, s)
}

/// logsumexp(x) = m + ln_1p(Σ_{i≠argmax} exp(xᵢ − m)); all −∞ (or empty) gives −∞, any +∞
/// gives +∞, any NaN gives NaN.
pub fn logsumexp<T: Real>(x: &[T]) -> T {
    if x.iter().any(|v| v.is_nan()) {
        return T::NAN;
    }
    let (_, m, s) = lse_parts(x);
    if !m.is_finite() {
        return m;
    }
    m + s.ln_1p()
}

/// softmax(x)ᵢ = exp(xᵢ − m)/(1 + s) written into `out` (same length as `x`).
/// All −∞ gives all zeros; +∞ entries share the mass equally.
pub fn softmax_into<T: Real>(x: &[T], out: &mut [T]) {
    debug_assert_eq!(x.len(), out.len());
    let (j, m, s) = lse_parts(x);
    if m == T::NEG_INFINITY {
        out.iter_mut().for_each(|o| *o = T::ZERO);
        return;
    }
    if m == T::INFINITY {
        let count = x.iter().filter(|&&v| v == T::INFINITY).count();
        let share = T::ONE / T::from_usize(count);
        for (o, &v) in out.iter_mut().zip(x) {
            *o = if v == T::INFINITY { share } else { T::ZERO };
        }
        return;
    }
    let denom = T::ONE + s;
    for (i, (o, &v)) in out.iter_mut().zip(x).enumerate() {
        *o = if i == j {
            T::ONE / denom
        } else {
            (v - m).exp() / denom
        };
    }
}

/// In-place softmax, see [`softmax_into`].
pub fn softmax_in_place<T: Real>(x: &mut [T]) {
    let (j, m, s) = lse_parts(x);
    if !m.is_finite() {
        let tmp: Vec<T> = x.to_vec();
        softmax_into(&tmp, x);
        return;
    }
    let denom = T::ONE + s;
    for (i, v) in x.iter_mut().enumerate() {
        *v = if i == j {
            T::ONE / denom
        } else {
            (*v - m).exp() / denom
        };
    }
}

/// log_softmax(x)ᵢ = xᵢ − m − ln_1p(s) (= xᵢ − logsumexp x) written into `out`.
/// All −∞ gives all −∞; +∞ entries share the mass (−ln count), the others get −∞.
pub fn log_softmax_into<T: Real>(x: &[T], out: &mut [T]) {
    let (_, m, s) = lse_parts(x);
    if m == T::NEG_INFINITY {
        out.iter_mut().for_each(|o| *o = T::NEG_INFINITY);
        return;
    }
    if m == T::INFINITY {
        let count = x.iter().filter(|&&v| v == T::INFINITY).count();
        let share = -T::from_usize(count).ln();
        for (o, &v) in out.iter_mut().zip(x) {
            *o = if v == T::INFINITY {
                share
            } else {
                T::NEG_INFINITY
            };
        }
        return;
    }
    let l = s.ln_1p();
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (v - m) - l;
    }
}

/// xlogy(x, y) = x·ln y, with xlogy(0, y) = 0 for every y (including 0).
#[inline]
pub fn xlogy<T: Real>(x: T, y: T) -> T {
    if x == T::ZERO && !y.is_nan() {
        T::ZERO
    } else {
        x * y.ln()
    }
}

/// xlog1py(x, y) = x·ln(1 + y), with xlog1py(0, y) = 0.
#[inline]
pub fn xlog1py<T: Real>(x: T, y: T) -> T {
    if x == T::ZERO && !y.is_nan() {
        T::ZERO
    } else {
        x * y.ln_1p()
    }
}

/// Digamma ψ(x) = d/dx lnΓ(x). Recurrence ψ(x) = ψ(x + 1) − 1/x up to x ≥ 16, then
/// ψ(x) ≈ ln x − 1/(2x) − Σ B₂ₖ/(2k x²ᵏ); reflection ψ(x) = ψ(1 − x) − π/tan(πx) for x < 0.
/// Within ¼ of the positive root x₀ = 1.4616… the Taylor series at x₀ instead, so ψ keeps its
/// relative accuracy where it is small (see [`digamma1p`] for ψ(1 + x)).
/// NaN at the poles x = 0, −1, −2, ….
pub fn digamma<T: Real>(x: T) -> T {
    if x.is_nan() || x == T::NEG_INFINITY {
        return T::NAN;
    }
    if x == T::INFINITY {
        return x;
    }
    if let Some(v) = psi_root::digamma_near_root(x) {
        return v;
    }
    if x <= T::ZERO {
        if x == x.floor() {
            return T::NAN;
        }
        let xf = x.to_f64();
        let cot = std::f64::consts::PI / (std::f64::consts::PI * xf).tan();
        return digamma(T::ONE - x) - c(cot);
    }
    let mut x = x;
    let mut acc = T::ZERO;
    while x < c(ASYMPTOTIC_FROM) {
        acc -= T::ONE / x;
        x += T::ONE;
    }
    acc + x.ln() + digamma_asymptotic_tail(x)
}

/// ψ(x) − ln x for x ≥ 16: −1/(2x) − Σ B₂ₖ/(2k x²ᵏ).
fn digamma_asymptotic_tail<T: Real>(x: T) -> T {
    let r = T::ONE / x;
    let r2 = r * r;
    let mut acc = T::ZERO;
    for &k in DIGAMMA_COEF.iter().rev() {
        acc = acc * r2 + c(k);
    }
    -(acc * r2) - T::HALF * r
}

/// ψ(x) − ln x for x > 0, without cancellation for large x (asymptotic tail for x ≥ 16).
pub fn digamma_minus_ln<T: Real>(x: T) -> T {
    if x >= c(ASYMPTOTIC_FROM) {
        digamma_asymptotic_tail(x)
    } else {
        digamma(x) - x.ln()
    }
}

/// Trigamma ψ′(x). Recurrence ψ′(x) = ψ′(x + 1) + 1/x² up to x ≥ 16, then
/// ψ′(x) ≈ 1/x + 1/(2x²) + Σ B₂ₖ/x²ᵏ⁺¹; reflection ψ′(x) = π²/sin²(πx) − ψ′(1 − x) for x < 0.
pub fn trigamma<T: Real>(x: T) -> T {
    if x.is_nan() || x == T::NEG_INFINITY {
        return T::NAN;
    }
    if x == T::INFINITY {
        return T::ZERO;
    }
    if x <= T::ZERO {
        if x == x.floor() {
            return T::NAN;
        }
        let s = (std::f64::consts::PI * x.to_f64()).sin();
        let refl = std::f64::consts::PI * std::f64::consts::PI / (s * s);
        return c::<T>(refl) - trigamma(T::ONE - x);
    }
    let mut x = x;
    let mut acc = T::ZERO;
    while x < c(ASYMPTOTIC_FROM) {
        acc += T::ONE / (x * x);
        x += T::ONE;
    }
    acc + trigamma_asymptotic(x)
}

/// Bernoulli-number coefficients of the trigamma series: ψ′(x) ≈ 1/x + 1/(2x²) + Σ cₖ/x^(2k+1).
const TRIGAMMA_COEF: [f64; 7] = [
    1.0 / 6.0,
    -1.0 / 30.0,
    1.0 / 42.0,
    -1.0 / 30.0,
    5.0 / 66.0,
    -691.0 / 2730.0,
    7.0 / 6.0,
];
/// Coefficients dₖ of the digamma series ψ(x) ≈ ln x − 1/(2x) − Σ dₖ/x^(2k).
const DIGAMMA_COEF: [f64; 7] = [
    1.0 / 12.0,
    -1.0 / 120.0,
    1.0 / 252.0,
    -1.0 / 240.0,
    1.0 / 132.0,
    -691.0 / 32760.0,
    1.0 / 12.0,
];

fn trigamma_asymptotic<T: Real>(x: T) -> T {
    let r = T::ONE / x;
    let r2 = r * r;
    let mut acc = T::ZERO;
    for &k in TRIGAMMA_COEF.iter().rev() {
        acc = acc * r2 + c(k);
    }
    r + r2 * (T::HALF + acc * r)
}

/// uⁿ − vⁿ = (u − v)·Σ_{i<n} uⁱ v^(n−1−i), given an accurate `d = u − v`.
fn pow_diff<T: Real>(u: T, v: T, d: T, n: i32) -> T {
    let mut sum = T::ZERO;
    for i in 0..n {
        sum += u.powi(i) * v.powi(n - 1 - i);
    }
    d * sum
}

/// ψ(a) − ψ(a + b) for a, b > 0, accurate also when b ≪ a (no difference of two large
/// digammas): shift with 1/x − 1/(x + b) = b/(x(x + b)) until x ≥ 16, then
/// −ln_1p(b/x) + [tail(x) − tail(x + b)] with each power difference factored.
pub fn digamma_diff<T: Real>(a: T, b: T) -> T {
    if a.is_nan() || b.is_nan() {
        return T::NAN;
    }
    let mut x = a;
    let mut acc = T::ZERO;
    while x < c(ASYMPTOTIC_FROM) {
        acc -= (b / (x + b)) / x;
        x += T::ONE;
    }
    let y = x + b;
    let u = T::ONE / x;
    let v = T::ONE / y;
    let d = (b / y) / x; // u − v
                         // −1/(2x) + 1/(2y) = −d/2; −Σ dₖ (u^(2k) − v^(2k)).
    let mut series = -T::HALF * d;
    for (k, &coef) in DIGAMMA_COEF.iter().enumerate() {
        series -= c::<T>(coef) * pow_diff(u, v, d, 2 * (k as i32 + 1));
    }
    acc - (b / x).ln_1p() + series
}

/// ψ′(a) − ψ′(a + b) for a, b > 0, accurate when b ≪ a (same construction as
/// [`digamma_diff`]; 1/x² − 1/(x + b)² = b(2x + b)/(x²(x + b)²)).
pub fn trigamma_diff<T: Real>(a: T, b: T) -> T {
    if a.is_nan() || b.is_nan() {
        return T::NAN;
    }
    let mut x = a;
    let mut acc = T::ZERO;
    while x < c(ASYMPTOTIC_FROM) {
        let y = x + b;
        // b(x + y)/(x²y²) = [b/(xy)]·[(x + y)/(xy)], factored so huge b cannot overflow.
        let bxy = (b / y) / x;
        acc += bxy * ((x + y) / y / x);
        x += T::ONE;
    }
    let y = x + b;
    let u = T::ONE / x;
    let v = T::ONE / y;
    let d = (b / y) / x;
    let mut series = d + T::HALF * pow_diff(u, v, d, 2);
    for (k, &coef) in TRIGAMMA_COEF.iter().enumerate() {
        series += c::<T>(coef) * pow_diff(u, v, d, 2 * k as i32 + 3);
    }
    acc + series
}

#[cfg(test)]
mod tests {
    use super::*;

    const EULER_GAMMA: f64 = 0.577_215_664_901_532_9;

    fn rel(a: f64, b: f64) -> f64 {
        if a == b {
            0.0
        } else {
            (a - b).abs() / b.abs().max(f64::MIN_POSITIVE)
        }
    }

    #[test]
    fn softplus_sigmoid_extremes() {
        // softplus(−800) = ln(1 + e^−800) = e^−800 (underflows to 0 in f64) and softplus(−700)
        // = e^−700 to full precision.
        assert_eq!(softplus(-800.0f64), 0.0);
        assert!(rel(softplus(-700.0f64), (-700.0f64).exp()) < 1e-15);
        assert_eq!(softplus(800.0f64), 800.0);
        assert!(rel(softplus(0.0f64), std::f64::consts::LN_2) < 1e-16);
        assert_eq!(sigmoid(-1000.0f64), 0.0);
        assert_eq!(sigmoid(1000.0f64), 1.0);
        assert!(
            rel(
                sigmoid(-40.0f64),
                (-40.0f64).exp() / (1.0 + (-40.0f64).exp())
            ) < 1e-15
        );
        assert!(rel(log_sigmoid(-1000.0f64), -1000.0) < 1e-16);
        assert!(rel(log_sigmoid(40.0f64), -(-40.0f64).exp()) < 1e-15);
        assert_eq!(softplus(-200.0f32), 0.0);
        assert!(rel(softplus(-50.0f32) as f64, (-50.0f64).exp()) < 1e-6);
    }

    #[test]
    fn log1mexp_both_branches() {
        // ln(1 − e^−1e−20) = ln(1e−20 − …) ≈ −46.0517; ln(1 − e^−50) ≈ −e^−50.
        assert!(rel(log1mexp(-1e-20f64), (1e-20f64).ln()) < 1e-15);
        assert!(rel(log1mexp(-50.0f64), -(-50.0f64).exp()) < 1e-15);
        let x = -0.5f64;
        assert!(rel(log1mexp(x), (1.0 - x.exp()).ln()) < 1e-15);
        assert_eq!(log1mexp(0.0f64), f64::NEG_INFINITY);
    }

    #[test]
    fn log1pmx_matches_series_and_direct() {
        for &x in &[1e-8f64, -1e-5, 0.1, -0.3, 0.49, 0.7, -0.9, 3.0] {
            // Reference: Σ (−1)^(k+1) x^k / k − x computed in high order for small x,
            // direct for larger.
            let want = if x.abs() < 0.2 {
                let mut s = 0.0;
                for k in (2..60).rev() {
                    s += (-1f64).powi(k + 1) * x.powi(k) / k as f64;
                }
                s
            } else {
                x.ln_1p() - x
            };
            assert!(rel(log1pmx(x), want) < 1e-14, "{x}");
        }
    }

    #[test]
    fn logsumexp_softmax_edge_cases() {
        let ninf = f64::NEG_INFINITY;
        assert_eq!(logsumexp(&[ninf, ninf]), ninf);
        assert_eq!(logsumexp::<f64>(&[]), ninf);
        assert_eq!(logsumexp(&[1.0, f64::INFINITY]), f64::INFINITY);
        assert!(logsumexp(&[1.0, f64::NAN]).is_nan());
        assert!(
            rel(
                logsumexp(&[1000.0, 1000.0]),
                1000.0 + std::f64::consts::LN_2
            ) < 1e-16
        );
        assert_eq!(logsumexp(&[1000.0, 0.0, -1000.0]), 1000.0);
        let mut p = [0.0; 3];
        softmax_into(&[0.0, ninf, 0.0], &mut p);
        assert_eq!(p, [0.5, 0.0, 0.5]);
        softmax_into(&[ninf, ninf, ninf], &mut p);
        assert_eq!(p, [0.0; 3]);
        let mut q = [1.0f64, 2.0, 3.0];
        softmax_in_place(&mut q);
        let z: f64 = [1.0f64, 2.0, 3.0].iter().map(|v| v.exp()).sum();
        assert!(rel(q[2], 3f64.exp() / z) < 1e-15);
        let mut l = [0.0; 3];
        log_softmax_into(&[1.0, 2.0, 3.0], &mut l);
        assert!(rel(l[0], 1.0 - z.ln()) < 1e-15);
        log_softmax_into(&[ninf, ninf, ninf], &mut l);
        assert_eq!(l, [ninf; 3]);
        log_softmax_into(&[ninf, 0.0, f64::INFINITY], &mut l);
        assert_eq!(l, [ninf, ninf, 0.0]);
    }

    #[test]
    fn xlogy_zero_convention() {
        assert_eq!(xlogy(0.0f64, 0.0), 0.0);
        assert_eq!(xlogy(2.0f64, 1.0), 0.0);
        assert_eq!(xlog1py(0.0f64, -1.0), 0.0);
        assert!(rel(xlogy(3.0f64, 2.0), 3.0 * 2f64.ln()) < 1e-16);
    }

    #[test]
    fn digamma_trigamma_closed_forms() {
        use std::f64::consts::{LN_2, PI};
        assert!(rel(digamma(1.0f64), -EULER_GAMMA) < 1e-15);
        assert!(rel(digamma(0.5f64), -EULER_GAMMA - 2.0 * LN_2) < 1e-15);
        // ψ(n) = H_{n−1} − γ.
        let h: f64 = (1..30).map(|k| 1.0 / k as f64).sum();
        assert!(rel(digamma(30.0f64), h - EULER_GAMMA) < 1e-15);
        assert!(rel(trigamma(1.0f64), PI * PI / 6.0) < 1e-15);
        assert!(rel(trigamma(0.5f64), PI * PI / 2.0) < 1e-15);
        // ψ′(n) = π²/6 − Σ_{k<n} 1/k².
        let s: f64 = (1..40).map(|k| 1.0 / (k * k) as f64).sum();
        assert!(rel(trigamma(40.0f64), PI * PI / 6.0 - s) < 1e-13);
        // Recurrence identities at non-integers, across the 16 switch point.
        for &x in &[0.3f64, 2.7, 15.5, 16.2, 123.4] {
            assert!((digamma(x + 1.0) - digamma(x) - 1.0 / x).abs() < 4e-15 * (1.0 + 1.0 / x));
            assert!(rel(trigamma(x) - 1.0 / (x * x), trigamma(x + 1.0)) < 1e-14);
        }
        // Reflection: ψ(1 − x) − ψ(x) = π cot(πx).
        let x = -0.3f64;
        assert!((digamma(1.0 - x) - digamma(x) - PI / (PI * x).tan()).abs() < 1e-13);
        assert!(digamma(0.0f64).is_nan() && digamma(-2.0f64).is_nan());
        assert!(rel(digamma(1.0f32) as f64, -EULER_GAMMA) < 1e-6);
        // Small-argument behaviour: ψ(x) ≈ −1/x − γ, ψ′(x) ≈ 1/x² + π²/6.
        assert!(rel(digamma(1e-9f64), -1e9 - EULER_GAMMA + PI * PI / 6.0 * 1e-9) < 1e-15);
    }

    #[test]
    fn digamma_trigamma_differences_match_direct_where_safe() {
        for &(a, b) in &[(0.5f64, 0.7), (3.0, 20.0), (30.0, 2.0), (1e-3, 1e3)] {
            let d = digamma(a) - digamma(a + b);
            assert!(
                (digamma_diff(a, b) - d).abs() < 1e-13 * d.abs().max(1.0),
                "{a} {b}"
            );
            let t = trigamma(a) - trigamma(a + b);
            assert!(
                (trigamma_diff(a, b) - t).abs() < 1e-13 * t.abs().max(1.0),
                "{a} {b}"
            );
        }
        // Tiny b: ψ(a) − ψ(a + b) ≈ −b ψ′(a) − b²/2 ψ″(a); with a = 100, ψ″(a) ≈ −1/a².
        let (a, b) = (100.0f64, 1e-9);
        let want = -b * trigamma(a) + b * b / 2.0 / (a * a);
        assert!(rel(digamma_diff(a, b), want) < 1e-12);
        let want_t = b / (a * a) + b / (a * a * a); // −b ψ″(a) ≈ b(1/a² + 1/a³)
        assert!(rel(trigamma_diff(a, b), want_t) < 1e-3);
        // Exact identity: ψ(a) − ψ(a + 1) = −1/a.
        assert!(rel(digamma_diff(1e8f64, 1.0), -1e-8) < 1e-14);
        assert!(rel(trigamma_diff(5.0f64, 1.0), 1.0 / 25.0) < 1e-14);
        // Huge b: ψ(a + b) ≈ ln b and ψ′(a + b) ≈ 1/b, no overflow inside.
        let want = digamma(2.0f64) - 1e300f64.ln();
        assert!(rel(digamma_diff(2.0f64, 1e300), want) < 1e-15);
        assert!(rel(trigamma_diff(2.0f64, 1e300), trigamma(2.0f64)) < 1e-15);
    }
}
