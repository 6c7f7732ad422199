//! `Dd`: a double-double real, the precision reference of efa (about 106 significant bits).
//!
//! A value is the unevaluated sum `hi + lo` of two f64 with `hi = fl(hi + lo)` (so
//! `|lo| ≤ ulp(hi)/2`). Everything is built on error-free transformations of f64:
//!
//! - TwoSum (Knuth): `s = fl(a + b)`, `e = (a − (s − b′)) + (b − b′)` with `b′ = s − a`, so
//!   `s + e = a + b` exactly;
//! - Fast2Sum (Dekker), for `|a| ≥ |b|`: `s = fl(a + b)`, `e = b − (s − a)`;
//! - TwoProd: `p = fl(a·b)`, `e = fma(a, b, −p)`, so `p + e = a·b` exactly.
//!
//! On these, the algorithms of Joldes, Muller and Popescu (2017, "Tight and rigorous error
//! bounds for basic building blocks of double-word arithmetic") give `+`, `−` with relative
//! error ≤ 3u² and `×` with ≤ 4u² (u = 2⁻⁵³, so u² = 2⁻¹⁰⁶ ≈ 1.2·10⁻³²); `÷` takes the
//! exact remainder and two correction quotients (relative error about u²). The elementary
//! functions ([`crate::Real`] for `Dd`) reach a relative error below 10⁻³⁰ on their domains
//! (see each method and the mpmath reference test in `dd/tests_ref.rs`).
//!
//! Non-finite values follow f64: NaN propagates, ±∞ behave as in f64 (`∞ + 1 = ∞`,
//! `1/0 = ∞`, `1/∞ = 0`), and a non-finite `hi` always comes with `lo = 0`.
//!
//! Full precision needs `|hi| ≥ 2⁻⁹⁶⁹` ([`crate::Real::MIN_POSITIVE`]): below that `lo` falls
//! into the subnormal range and bits are lost (the value is still as accurate as an f64).
//!
//! ```
//! use efa_num::{Dd, Real};
//! let third = Dd::ONE / Dd::from_f64(3.0);
//! // 1/3 to 32 digits, far beyond f64.
//! assert_eq!(format!("{third:.32}"), "0.33333333333333333333333333333333");
//! let back = third * Dd::from_f64(3.0);
//! assert!((back - Dd::ONE).abs() < Dd::from_f64(1e-31));
//! ```

mod arith;
pub(crate) mod cast;
mod consts;
mod exp_log;
mod expansion;
mod fmt;
mod pow;
mod real_impl;
mod round;
mod special;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_props;
#[cfg(test)]
mod tests_ref;

use std::cmp::Ordering;

/// A double-double real: the unevaluated sum `hi + lo` of two f64 with `hi = fl(hi + lo)`.
///
/// Construct with [`Dd::from_f64`] (exact), [`Dd::new`] (any two f64, renormalised) or the
/// constants of [`crate::Real`]; read with [`Dd::hi`], [`Dd::lo`], [`Dd::parts`]. All
/// arithmetic and elementary functions of [`crate::Real`] are implemented at double-double
/// precision; see the module documentation for the error bounds.
#[derive(Clone, Copy)]
pub struct Dd {
    hi: f64,
    lo: f64,
}

/// TwoSum: `(s, e)` with `s = fl(a + b)` and `s + e = a + b` exactly (finite inputs, no
/// overflow).
#[inline(always)]
pub(crate) fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

/// Fast2Sum: `(s, e)` with `s = fl(a + b)`, `s + e = a + b` exactly, provided `|a| ≥ |b|`
/// (or `a = 0`).
#[inline(always)]
pub(crate) fn fast_two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    (s, b - (s - a))
}

/// TwoProd: `(p, e)` with `p = fl(a·b)` and `p + e = a·b` exactly (exact unless the product
/// underflows). With the `fma` target feature, `e = fma(a, b, −p)`; without it (a plain
/// x86-64 build, where `f64::mul_add` is a software call) Dekker's product of Veltkamp halves
/// gives the same exact `e` wherever the halves cannot overflow (|a|, |b| < 2⁹⁹⁵), and the
/// software fma the rest.
#[inline(always)]
pub(crate) fn two_prod(a: f64, b: f64) -> (f64, f64) {
    let p = a * b;
    if cfg!(target_feature = "fma") {
        return (p, a.mul_add(b, -p));
    }
    const LIMIT: f64 = 3.348_464_397_457_085_4e299; // 2⁹⁹⁵
    if a.abs() < LIMIT && b.abs() < LIMIT && p.is_finite() {
        let (ah, al) = split(a);
        let (bh, bl) = split(b);
        (p, ((ah * bh - p) + ah * bl + al * bh) + al * bl)
    } else {
        (p, a.mul_add(b, -p))
    }
}

/// Veltkamp's split of `a` into `hi + lo` with 26-bit halves (exact for |a| < 2⁹⁹⁵).
#[inline(always)]
fn split(a: f64) -> (f64, f64) {
    let t = 134_217_729.0 * a; // 2²⁷ + 1
    let hi = t - (t - a);
    (hi, a - hi)
}

impl Dd {
    /// The exact double-double of one f64: `x + 0`.
    #[inline(always)]
    pub const fn from_f64(x: f64) -> Dd {
        Dd { hi: x, lo: 0.0 }
    }

    /// `hi + lo` for any two f64, renormalised with TwoSum (exact when both are finite and
    /// the sum does not overflow); a non-finite sum gives `(hi + lo, 0)`.
    #[inline]
    pub fn new(hi: f64, lo: f64) -> Dd {
        let (s, e) = two_sum(hi, lo);
        Dd::finish(s, e)
    }

    /// The pair as stored, for constants known to be normalised (`hi = fl(hi + lo)`).
    #[inline(always)]
    pub(crate) const fn raw(hi: f64, lo: f64) -> Dd {
        Dd { hi, lo }
    }

    /// A normalised pair from `(s, e)` with `s = fl(s + e)`, or `(s, 0)` if `s` is not finite.
    #[inline(always)]
    pub(crate) fn finish(s: f64, e: f64) -> Dd {
        if s.is_finite() {
            Dd { hi: s, lo: e }
        } else {
            Dd { hi: s, lo: 0.0 }
        }
    }

    /// The leading word: `hi = fl(hi + lo)`, the value rounded to the nearest f64.
    #[inline(always)]
    pub const fn hi(self) -> f64 {
        self.hi
    }

    /// The trailing word: `lo = (value) − hi`, with `|lo| ≤ ulp(hi)/2`.
    #[inline(always)]
    pub const fn lo(self) -> f64 {
        self.lo
    }

    /// Both words, `(hi, lo)`.
    #[inline(always)]
    pub const fn parts(self) -> (f64, f64) {
        (self.hi, self.lo)
    }

    /// Whether the value is NaN (its `hi` is).
    #[inline(always)]
    pub fn is_nan(self) -> bool {
        self.hi.is_nan()
    }

    /// Whether the value is neither infinite nor NaN.
    #[inline(always)]
    pub fn is_finite(self) -> bool {
        self.hi.is_finite()
    }

    /// Whether the sign bit of `hi` is set (−0 included).
    #[inline(always)]
    pub fn is_sign_negative(self) -> bool {
        self.hi.is_sign_negative()
    }

    /// `x·2ⁿ`, exact unless the result leaves the normal range (applied in steps so that
    /// `2ⁿ` itself never overflows; each step renormalised, which matters only for subnormal
    /// words).
    pub fn ldexp(self, n: i32) -> Dd {
        let mut x = self;
        let mut n = n;
        while n != 0 {
            let step = n.clamp(-1000, 1000);
            let f = pow2(step);
            x = Dd::new(x.hi * f, x.lo * f);
            n -= step;
        }
        x
    }
}

/// `2ⁿ` as an f64 for `|n| ≤ 1000` (built from the exponent bits).
#[inline(always)]
pub(crate) fn pow2(n: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&n));
    f64::from_bits(((n + 1023) as u64) << 52)
}

impl Default for Dd {
    /// 0
    fn default() -> Dd {
        Dd::from_f64(0.0)
    }
}

impl From<f64> for Dd {
    /// The exact double-double of an f64.
    fn from(x: f64) -> Dd {
        Dd::from_f64(x)
    }
}

impl PartialEq for Dd {
    /// Equal values: both words equal (as f64, so `0 = −0` and NaN ≠ NaN).
    fn eq(&self, other: &Dd) -> bool {
        self.hi == other.hi && self.lo == other.lo
    }
}

impl PartialOrd for Dd {
    /// Compares `hi`, then `lo` (valid for normalised pairs); `None` if either is NaN.
    fn partial_cmp(&self, other: &Dd) -> Option<Ordering> {
        match self.hi.partial_cmp(&other.hi)? {
            Ordering::Equal => self.lo.partial_cmp(&other.lo),
            o => Some(o),
        }
    }
}

impl std::iter::Sum for Dd {
    /// `Σ xᵢ` accumulated in double-double, in iteration order.
    fn sum<I: Iterator<Item = Dd>>(iter: I) -> Dd {
        iter.fold(Dd::from_f64(0.0), |s, x| s + x)
    }
}

impl<'a> std::iter::Sum<&'a Dd> for Dd {
    /// `Σ xᵢ` accumulated in double-double, in iteration order.
    fn sum<I: Iterator<Item = &'a Dd>>(iter: I) -> Dd {
        iter.fold(Dd::from_f64(0.0), |s, x| s + *x)
    }
}

impl num_traits::Zero for Dd {
    fn zero() -> Dd {
        Dd::from_f64(0.0)
    }
    fn is_zero(&self) -> bool {
        self.hi == 0.0
    }
}

impl num_traits::One for Dd {
    fn one() -> Dd {
        Dd::from_f64(1.0)
    }
}

impl ndarray::ScalarOperand for Dd {}
