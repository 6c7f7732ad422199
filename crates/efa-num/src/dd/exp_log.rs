//! exp, exp_m1, ln and ln_1p of [`Dd`].
//!
//! **exp.** `x = k·ln 2 + r` with `k = round(x/ln 2)` and `r` formed exactly from ln 2 in
//! three words (each `k·cᵢ` by TwoProd, summed in an [`Expansion`]), `|r| ≤ 0.35`. Then
//! `t = r/2³`, `eᵗ − 1 = t·(1 + t/2·(1 + t/3·(… (1 + t/16))))` (Horner, truncation below
//! 10⁻³⁶ relative), three doublings in the `expm1` form `s ← s·(s + 2)` (which keeps the
//! relative error of `s` instead of doubling it), and `eˣ = 2ᵏ·(1 + s)`.
//!
//! **ln.** `x = 2ᵉ·m` with `m ∈ [√½, √2)`, `d = m − 1` (exact), and
//! `ln(1 + d) = 2·atanh(s)`, `s = d/(2 + d) = S + σ` (S the double-double quotient, σ from
//! the exactly formed remainder `d − S·(2 + d)`):
//! `ln(1 + d) = 2S + 2S³·Σ_{j≥0} S²ʲ/(2j + 3) + 2σ/(1 − S²)`.
//! The terms and `e·ln 2` are summed exactly, giving the logarithm to about 2⁻¹¹² relative
//! (used by powf) before the final rounding to double-double.

use super::consts::LN_2_TRIPLE;
use super::expansion::Expansion;
use super::{pow2, Dd};

/// Halvings of the reduced argument before the series of `eᵗ − 1`.
const EXP_HALVINGS: i32 = 3;
/// Terms of the Horner form of `(eᵗ − 1)/t`, `|t| ≤ 0.0434`.
const EXP_TERMS: u32 = 16;
/// Terms of `Σ S²ʲ/(2j + 3)`, `S² ≤ 0.0296` (error < 10⁻³³ of a term that is ≤ 1% of ln).
const ATANH_TERMS: u32 = 22;
/// Above this, `eˣ` overflows (ln f64::MAX ≈ 709.78).
const EXP_OVERFLOW: f64 = 709.8;
/// Below this, `eˣ` is below half the smallest subnormal (ln 2⁻¹⁰⁷⁵ ≈ −745.13).
const EXP_UNDERFLOW: f64 = -745.2;

/// `(k, r)` with `x = k·ln 2 + r`, `k = round(x/ln 2)`; `r` is exact up to u·|k·c₂| ≈ 10⁻⁴⁷.
fn reduce_ln2(x: Dd) -> (i32, Dd) {
    let k = (x.hi / LN_2_TRIPLE[0]).round();
    let mut e = Expansion::new();
    e.add_dd(x);
    e.add_prod(-k, LN_2_TRIPLE[0]);
    e.add_prod(-k, LN_2_TRIPLE[1]);
    e.add(-k * LN_2_TRIPLE[2]);
    (k as i32, e.to_dd())
}

/// `eʳ − 1` for `|r| ≤ 0.36` with full relative accuracy (including tiny `r`).
fn expm1_reduced(r: Dd) -> Dd {
    let t = r.ldexp(-EXP_HALVINGS);
    let mut p = Dd::from_f64(1.0);
    for k in (2..=EXP_TERMS).rev() {
        p = (t * p).div_f64(k as f64).add_f64(1.0);
    }
    let mut s = t * p;
    for _ in 0..EXP_HALVINGS {
        s = s.sqr() + s.ldexp(1);
    }
    s
}

impl Dd {
    /// `eˣ` (see the module docs); relative error about 2u² (≤ 10⁻³⁰ measured) up to
    /// overflow, `+∞` above `ln(f64::MAX)`, 0 below −745.2, subnormal results with f64
    /// accuracy only.
    pub(crate) fn exp_dd(self) -> Dd {
        if self.is_nan() || self.hi >= EXP_OVERFLOW {
            return Dd::raw(
                if self.is_nan() {
                    self.hi
                } else {
                    f64::INFINITY
                },
                0.0,
            );
        }
        if self.hi <= EXP_UNDERFLOW {
            return Dd::from_f64(0.0);
        }
        let (k, r) = reduce_ln2(self);
        expm1_reduced(r).add_f64(1.0).ldexp(k)
    }

    /// `eˣ − 1` with full relative accuracy near 0: `x = k·ln 2 + r`, `s = eʳ − 1`; `s` if
    /// `k = 0`, else `2ᵏ·s + (2ᵏ − 1)` (the second term exact) for `−60 ≤ k ≤ 106`, else
    /// `eˣ − 1` directly.
    pub(crate) fn exp_m1_dd(self) -> Dd {
        if self.is_nan() || self.hi >= EXP_OVERFLOW {
            return self.exp_dd();
        }
        if self.hi.abs() < pow2(-600) {
            // eˣ − 1 = x·(1 + x/2 + …), and x/2 < 2⁻⁶⁰¹.
            return self;
        }
        if self.hi < -80.0 {
            return self.exp_dd().add_f64(-1.0);
        }
        let (k, r) = reduce_ln2(self);
        let s = expm1_reduced(r);
        match k {
            0 => s,
            1..=106 => s.ldexp(k) + Dd::new(pow2(k), -1.0),
            -60..=-1 => s.ldexp(k) + Dd::new(-1.0, pow2(k)),
            _ => s.add_f64(1.0).ldexp(k).add_f64(-1.0),
        }
    }

    /// `ln x`: NaN for `x < 0` or NaN, `−∞` for ±0, `+∞` for `+∞`; otherwise the
    /// series of the module docs, relative error about u²/2 (≤ 10⁻³⁰ measured).
    pub(crate) fn ln_dd(self) -> Dd {
        match self.ln_special() {
            Some(v) => v,
            None => {
                let (l, c) = self.ln_ext();
                l.add_f64(c)
            }
        }
    }

    /// The value of `ln x` where it is not given by the series (x ≤ 0, NaN, +∞).
    fn ln_special(self) -> Option<Dd> {
        if self.hi == 0.0 {
            return Some(Dd::from_f64(f64::NEG_INFINITY));
        }
        if self.is_nan() || self.hi < 0.0 {
            return Some(Dd::from_f64(f64::NAN));
        }
        if self.hi == f64::INFINITY {
            return Some(self);
        }
        None
    }

    /// `ln x` for finite `x > 0` as `(d, t)` (a double-double and a third word), accurate to
    /// about 2⁻¹¹² relative.
    pub(crate) fn ln_ext(self) -> (Dd, f64) {
        let (e, m) = self.split_sqrt2();
        let d = Dd::new(m.hi - 1.0, m.lo);
        log_parts(e, d)
    }

    /// `(e, m)` with `x = 2ᵉ·m`, `m ∈ [√½, √2)` (by `hi`); finite `x > 0`.
    fn split_sqrt2(self) -> (i32, Dd) {
        if self.hi < pow2(-1000) {
            let (e, m) = self.ldexp(200).split_sqrt2();
            return (e - 200, m);
        }
        let mut e = ((self.hi.to_bits() >> 52) & 0x7ff) as i32 - 1023;
        let mut m = self.ldexp(-e);
        if m.hi > std::f64::consts::SQRT_2 {
            e += 1;
            m = m.ldexp(-1);
        }
        (e, m)
    }

    /// `ln(1 + x)` with full relative accuracy near 0: the series of the module docs on
    /// `x ∈ [−0.29, 0.41]`; elsewhere `1 + x` is formed exactly as a double-double plus a
    /// third word `c` and `ln(1 + x) = ln(d) + c/d`. NaN below −1, `−∞` at −1.
    pub(crate) fn ln_1p_dd(self) -> Dd {
        if self.is_nan() || self.hi < -1.0 || self.hi == f64::INFINITY {
            return self.add_f64(1.0).ln_dd();
        }
        if self.hi.abs() < pow2(-600) {
            // ln(1 + x) = x·(1 − x/2 + …), and |x|/2 < 2⁻⁶⁰¹.
            return self;
        }
        if (-0.29..=0.41).contains(&self.hi) {
            let (l, c) = log_parts(0, self);
            return l.add_f64(c);
        }
        let mut e = Expansion::new();
        e.add_dd(self);
        e.add(1.0);
        let (y, yc) = e.to_dd_ext();
        if let Some(v) = y.ln_special() {
            return v;
        }
        let (l, c) = y.ln_ext();
        l.add_f64(c + yc / y.hi)
    }
}

/// `e·ln 2 + ln(1 + d)` for an exact `d ∈ [−0.2929, 0.4143]`, as a double-double and a third
/// word (see the module docs).
fn log_parts(e: i32, d: Dd) -> (Dd, f64) {
    let (two_a, two_b) = super::two_sum(2.0, d.hi);
    let two_plus = Dd::raw(two_a, two_b).add_f64(d.lo);
    let s = d / two_plus;
    // The remainder d − S·(2 + d), with 2 + d = two_a + two_b + d.lo exactly.
    let mut rem = Expansion::new();
    rem.add_dd(d);
    rem.add_dd_prod(-s, Dd::raw(two_a, two_b));
    rem.add_prod(-s.hi, d.lo);
    rem.add(-s.lo * d.lo);
    let sigma = rem.approx() / two_plus.hi;
    let z = s.sqr();
    let w = (s * z * atanh_tail(z)).ldexp(1);
    let mut sum = Expansion::new();
    let k = e as f64;
    sum.add_prod(k, LN_2_TRIPLE[0]);
    sum.add_prod(k, LN_2_TRIPLE[1]);
    sum.add(k * LN_2_TRIPLE[2]);
    sum.add_dd(s.ldexp(1));
    sum.add_dd(w);
    sum.add(2.0 * sigma / (1.0 - z.hi));
    sum.to_dd_ext()
}

/// `Σ_{j≥0} zʲ/(2j + 3) = 1/3 + z/5 + z²/7 + …` for `0 ≤ z ≤ 0.0296` (Horner).
fn atanh_tail(z: Dd) -> Dd {
    let mut p = Dd::from_f64(0.0);
    for j in (0..ATANH_TERMS).rev() {
        p = (p * z) + Dd::from_f64(1.0).div_f64((2 * j + 3) as f64);
    }
    p
}
