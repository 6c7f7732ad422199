//! tanh, erf and ln Γ of [`Dd`].

use super::consts::{FRAC_2_SQRT_PI, HALF_LN_2PI, ONE_MINUS_EULER, ZETA_MINUS_ONE};
use super::expansion::Expansion;
use super::Dd;

/// erf uses its power series below this |x| and the continued fraction of erfc above.
const ERF_SERIES_BELOW: f64 = 1.5;
/// Beyond this |x|, erfc(x) < 10⁻³¹⁹ underflows and erf(x) = ±1.
const ERF_ONE_FROM: f64 = 27.3;
/// ln Γ uses Stirling's series from here on, the recurrence below.
const STIRLING_FROM: f64 = 40.0;
/// B₂ₖ = num/den for k = 1..=15 (Stirling's series).
const BERNOULLI: [(f64, f64); 15] = [
    (1.0, 6.0),
    (-1.0, 30.0),
    (1.0, 42.0),
    (-1.0, 30.0),
    (5.0, 66.0),
    (-691.0, 2730.0),
    (7.0, 6.0),
    (-3617.0, 510.0),
    (43867.0, 798.0),
    (-174611.0, 330.0),
    (854513.0, 138.0),
    (-236364091.0, 2730.0),
    (8553103.0, 6.0),
    (-23749461029.0, 870.0),
    (8615841276005.0, 14322.0),
];

impl Dd {
    /// `tanh x` (odd): for `|x| < 20`, `e/(e + 2)` with `e = expm1(2|x|)` (relative condition
    /// ≤ 1 in e, full accuracy for tiny x); beyond, `1 − 2t/(1 + t)` with `t = e^(−2|x|)`.
    /// Relative error ≤ 10⁻³⁰; `tanh(±∞) = ±1`.
    pub(crate) fn tanh_dd(self) -> Dd {
        if self.is_nan() || self.hi.abs() < 1e-200 {
            // tanh x = x·(1 − x²/3 + …), and x²/3 < 10⁻⁴⁰⁰.
            return self;
        }
        let a = self.abs_dd();
        let t = if a.hi < 20.0 {
            let e = a.ldexp(1).exp_m1_dd();
            e / e.add_f64(2.0)
        } else {
            let t = (-a.ldexp(1)).exp_dd();
            Dd::from_f64(1.0) - t.ldexp(1) / t.add_f64(1.0)
        };
        if self.hi < 0.0 {
            -t
        } else {
            t
        }
    }

    /// `erf x` (odd). For `|x| < 1.5` the series without cancellation
    /// `erf x = (2/√π)·x·e^(−x²)·Σ_{n≥0} (2x²)ⁿ/(1·3·…·(2n+1))` (x² formed exactly); above,
    /// `erf x = 1 − erfc x` with the continued fraction
    /// `erfc x = e^(−x²)/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + …))))` evaluated backward
    /// from depth `1100/x² + 4x + 10` (truncation < 10⁻³⁴, checked with mpmath). Relative error
    /// ≤ 10⁻³⁰ (mpmath reference test).
    pub(crate) fn erf_dd(self) -> Dd {
        if self.is_nan() || self.hi == 0.0 {
            return self;
        }
        let a = self.abs_dd();
        let v = if a.hi < ERF_SERIES_BELOW {
            erf_series(a)
        } else if a.hi < ERF_ONE_FROM {
            Dd::from_f64(1.0) - erfc_cf(a)
        } else {
            Dd::from_f64(1.0)
        };
        if self.hi < 0.0 {
            -v
        } else {
            v
        }
    }

    /// `ln Γ(x)` for `x > 0`: `ln Γ(2 + ε) = (1 − γ)ε + Σ_{k≥2} (−1)ᵏ(ζ(k) − 1)εᵏ/k` on
    /// `|ε| ≤ ½` (63 terms, ζ from mpmath), reached by the recurrence
    /// `ln Γ(x) = ln Γ(x + 1) − ln x` upward from (0, 1.5) (with `ln_1p` of the exact `x − 1`,
    /// so the zeros at 1 and 2 keep full relative accuracy) and
    /// `ln Γ(x) = ln Γ(x − n) + ln Π_{k=1..n}(x − k)` downward from (2.5, 40); for `x ≥ 40`
    /// Stirling's series `(x − ½)ln x − x + ½ln 2π + Σ_{k=1}^{15} B₂ₖ/(2k(2k−1)x^{2k−1})`.
    /// Relative error ≤ 10⁻³⁰ for x > 0 (mpmath reference test). For x ≤ 0: `+∞` at the
    /// poles (0, −1, −2, … and −∞), and elsewhere **only f64 accuracy** (libm's `lgamma` of
    /// `hi`, i.e. `ln|Γ(x)|`, as for f64).
    pub(crate) fn lgamma_dd(self) -> Dd {
        let x = self;
        if x.is_nan() || x.hi == f64::INFINITY {
            return x;
        }
        if x.hi <= 0.0 {
            if x.hi == f64::NEG_INFINITY || x.floor_dd() == x {
                return Dd::from_f64(f64::INFINITY);
            }
            return Dd::from_f64(libm::lgamma(x.hi));
        }
        if x.hi < 0.5 {
            return lgamma_2p(x) - x.ln_dd() - x.ln_1p_dd();
        }
        if x.hi < 1.5 {
            let e = Dd::new(x.hi - 1.0, x.lo);
            return lgamma_2p(e) - e.ln_1p_dd();
        }
        if x.hi < STIRLING_FROM {
            return lgamma_down(x);
        }
        stirling(x)
    }
}

/// `x·e^(−x²)` with `x²` exact to ~u³ (a double-double and a third word).
fn x_exp_minus_sq(a: Dd) -> (Dd, Dd) {
    let mut e = Expansion::new();
    e.add_dd_prod(a, a);
    let (sq, c) = e.to_dd_ext();
    let g = (-sq).exp_dd();
    (sq, g.add_f64(-g.hi * c))
}

/// erf for `0 < a < 1.5` by the series of [`Dd::erf_dd`].
fn erf_series(a: Dd) -> Dd {
    let (sq, g) = x_exp_minus_sq(a);
    let z = sq.ldexp(1);
    let mut term = Dd::from_f64(1.0);
    let mut sum = term;
    for n in 0..200 {
        term = (term * z).div_f64((2 * n + 3) as f64);
        sum += term;
        if term.hi < sum.hi * 1e-34 {
            break;
        }
    }
    Dd::raw(FRAC_2_SQRT_PI.0, FRAC_2_SQRT_PI.1) * a * g * sum
}

/// erfc for `1.5 ≤ a < 27.3` by the continued fraction of [`Dd::erf_dd`].
fn erfc_cf(a: Dd) -> Dd {
    let depth = (1100.0 / (a.hi * a.hi) + 4.0 * a.hi + 10.0) as u32;
    let mut f = a;
    for k in (1..=depth).rev() {
        f = a + Dd::from_f64(k as f64 * 0.5) / f;
    }
    let (_, g) = x_exp_minus_sq(a);
    let inv_sqrt_pi = Dd::raw(FRAC_2_SQRT_PI.0, FRAC_2_SQRT_PI.1).ldexp(-1);
    g * inv_sqrt_pi / f
}

/// `ln Γ(2 + ε)` for `|ε| ≤ ½` (Horner in ε of the ζ series of [`Dd::lgamma_dd`]).
fn lgamma_2p(e: Dd) -> Dd {
    let mut p = Dd::from_f64(0.0);
    for (i, &(hi, lo)) in ZETA_MINUS_ONE.iter().enumerate().rev() {
        let k = (i + 2) as f64;
        let c = Dd::raw(hi, lo).div_f64(if i % 2 == 0 { k } else { -k });
        p = p * e + c;
    }
    (p * e + Dd::raw(ONE_MINUS_EULER.0, ONE_MINUS_EULER.1)) * e
}

/// `ln Γ(x)` for `1.5 ≤ x < 40`: `ln Γ(2 + ε) + ln Π_{k=1..n}(x − k)`, `x = n + 2 + ε`.
fn lgamma_down(x: Dd) -> Dd {
    let n = (x.hi - 1.5).floor();
    let e = Dd::new(x.hi - (n + 2.0), x.lo);
    let mut prod = Dd::from_f64(1.0);
    for k in 1..=(n as u32) {
        prod *= Dd::new(x.hi - k as f64, x.lo);
    }
    if n == 0.0 {
        return lgamma_2p(e);
    }
    lgamma_2p(e) + prod.ln_dd()
}

/// Stirling's series for `x ≥ 40` (Horner in `1/x²`).
fn stirling(x: Dd) -> Dd {
    let w = Dd::from_f64(1.0) / x.sqr();
    let mut s = Dd::from_f64(0.0);
    for (i, &(num, den)) in BERNOULLI.iter().enumerate().rev() {
        let k = (i + 1) as f64;
        s = s * w + Dd::from_f64(num).div_f64(den * 2.0 * k * (2.0 * k - 1.0));
    }
    let main = x.add_f64(-0.5) * x.ln_dd() - x;
    main + Dd::raw(HALF_LN_2PI.0, HALF_LN_2PI.1) + s / x
}
