//! sqrt, powi, powf and the fused mul_add of [`Dd`].
//!
//! `xⁿ` and `xʸ` have condition number `|n|` (resp. `|y·ln x|`, up to ~745) in `x`, so their
//! intermediate steps carry more than double-double precision: powi multiplies with the exact
//! product ([`Expansion`]) and keeps the relative error of each rounding in a separate f64
//! (a compensated power, error ≈ u²/2 + |n|·u³); powf forms `y·ln x` from the logarithm to
//! ~2⁻¹¹² ([`Dd::ln_ext`]) exactly, as a double-double `Y` plus a third word `c`, and returns
//! `e^Y·(1 + c)`.

use super::expansion::Expansion;
use super::{fast_two_sum, pow2, two_prod, two_sum, Dd};

/// Below this `|hi|` the trailing word of a result can be subnormal (2⁻⁹⁶⁸).
const PRECISE_FROM: f64 = f64::from_bits(((1023 - 968) as u64) << 52);

impl Dd {
    /// `√x` by one Newton (Karp) step from `s = √xₕ` in f64: `r = x − s²` formed exactly
    /// (`xₕ − fl(s²)` is exact by Sterbenz, the TwoProd error is added), `t = r/(2s)` in
    /// double-double, and `√x = s + t − t²/(2s)` (the second-order term of
    /// `√(s² + r) = s·(1 + r/(2s²) − r²/(8s⁴) + …)`, |t/s| ≈ u). Relative error about u²/2.
    /// `√(±0) = ±0`, NaN below 0, `√∞ = ∞`; tiny x are scaled by 2²⁰⁰ first.
    pub(crate) fn sqrt_dd(self) -> Dd {
        if self.hi == 0.0 || self.hi == f64::INFINITY {
            return self;
        }
        if self.is_nan() || self.hi < 0.0 {
            return Dd::from_f64(f64::NAN);
        }
        if self.hi < pow2(-900) {
            return self.ldexp(200).sqrt_dd().ldexp(-100);
        }
        let s = self.hi.sqrt();
        let (p, e) = two_prod(s, s);
        let (rh, rl) = two_sum(self.hi - p, -e);
        let r = Dd::raw(rh, rl).add_f64(self.lo);
        let t = r.div_f64(2.0 * s);
        let (h, l) = fast_two_sum(s, t.hi);
        Dd::raw(h, l).add_f64(t.lo - t.hi * t.hi / (2.0 * s))
    }

    /// `xⁿ` by binary powering with exact products and the relative rounding errors tracked
    /// separately (see the module docs); relative error ≤ 10⁻³⁰ for every n while the result
    /// (and, for n < 0, `x^|n|`) is in the precise range, else `e^(n·ln|x|)` with the sign of
    /// `xⁿ`. `x⁰ = 1` (NaN included); zeros and infinities as f64.
    pub(crate) fn powi_dd(self, n: i32) -> Dd {
        if n == 0 {
            return Dd::from_f64(1.0);
        }
        if !self.is_finite() || self.hi == 0.0 {
            return Dd::from_f64(self.hi.powi(n));
        }
        let (d, rel) = pow_comp(self, n.unsigned_abs());
        let precise = d.is_finite() && d.hi.abs() >= PRECISE_FROM;
        if n > 0 && (!d.is_finite() || d.hi == 0.0) {
            return d;
        }
        if n > 0 {
            return d.add_f64(d.hi * rel);
        }
        if n < 0 && precise {
            let inv = Dd::from_f64(1.0) / d;
            return inv.add_f64(-inv.hi * rel);
        }
        let y = Dd::from_f64(n as f64);
        let mag = self.abs_dd().pow_general(y);
        if n % 2 != 0 && self.hi < 0.0 {
            -mag
        } else {
            mag
        }
    }

    /// `xʸ` with the special cases of f64's `powf` (`x⁰ = 1`, `1ʸ = 1`, NaN otherwise
    /// propagated, infinite y, zero or infinite x by the parity of y, negative x only for
    /// integral y); integral `|y| < 2³¹` uses [`Dd::powi_dd`]; otherwise `e^(y·ln x)` as in the
    /// module docs, relative error ≤ 10⁻³⁰ up to overflow.
    pub(crate) fn powf_dd(self, y: Dd) -> Dd {
        if y.hi == 0.0 || self == Dd::from_f64(1.0) {
            return Dd::from_f64(1.0);
        }
        if self.is_nan() || y.is_nan() {
            return Dd::from_f64(f64::NAN);
        }
        if !y.is_finite() {
            let ax = self.abs_dd();
            if ax == Dd::from_f64(1.0) {
                return ax;
            }
            let big = (ax.hi > 1.0 || (ax.hi == 1.0 && ax.lo > 0.0)) == (y.hi > 0.0);
            return Dd::from_f64(if big { f64::INFINITY } else { 0.0 });
        }
        let integral = y.floor_dd() == y;
        let odd = integral && ((y.hi % 2.0).abs() + (y.lo % 2.0).abs()) == 1.0;
        if self.hi == 0.0 || !self.is_finite() {
            let class: f64 = if odd { 1.0 } else { 2.0 };
            return Dd::from_f64(self.hi.powf(class.copysign(y.hi)));
        }
        if integral && y.hi.abs() < 2147483648.0 {
            return self.powi_dd(y.hi as i32);
        }
        if self.hi < 0.0 {
            if !integral {
                return Dd::from_f64(f64::NAN);
            }
            let mag = (-self).pow_general(y);
            return if odd { -mag } else { mag };
        }
        self.pow_general(y)
    }

    /// `e^(y·ln x)` for finite `x > 0` and finite `y`, with `y·ln x` carried to ~2⁻¹¹².
    fn pow_general(self, y: Dd) -> Dd {
        let (l, lc) = self.ln_ext();
        let p = y.hi * l.hi;
        if p.abs() > 1e6 || !p.is_finite() {
            return Dd::from_f64(if p > 0.0 { f64::INFINITY } else { 0.0 });
        }
        let mut e = Expansion::new();
        e.add_dd_prod(y, l);
        e.add(y.hi * lc);
        let (yd, yc) = e.to_dd_ext();
        let r = yd.exp_dd();
        r.add_f64(r.hi * yc)
    }

    /// `x·a + b` with one rounding to double-double: the product `x·a` (exact but for
    /// `fl(xₗaₗ)`) and `b` are summed exactly in an [`Expansion`] and rounded once. Falls back
    /// to `x·a + b` when a term is not finite or the product could overflow.
    pub(crate) fn mul_add_dd(self, a: Dd, b: Dd) -> Dd {
        let p = self.hi * a.hi;
        if !p.is_finite() || p.abs() > 1e300 || !b.is_finite() {
            return self * a + b;
        }
        let mut e = Expansion::new();
        e.add_dd_prod(self, a);
        e.add_dd(b);
        e.to_dd()
    }
}

/// `(d, ρ)` with `xᵐ = d·(1 + ρ)` up to ≈ m·u³ (binary powering, [`mul_comp`] per step);
/// `d` is non-finite or 0 when an intermediate product overflows or underflows.
fn pow_comp(x: Dd, m: u32) -> (Dd, f64) {
    let mut acc: Option<(Dd, f64)> = None;
    let mut base = (x, 0.0);
    let mut m = m;
    loop {
        if m & 1 == 1 {
            acc = Some(match acc {
                None => base,
                Some(a) => mul_comp(a, base),
            });
        }
        m >>= 1;
        if m == 0 {
            break;
        }
        base = mul_comp(base, base);
    }
    acc.unwrap_or((Dd::from_f64(1.0), 0.0))
}

/// `(a·(1 + ρₐ))·(b·(1 + ρ_b)) = d·(1 + ρₐ + ρ_b + t/d)` with `a·b = d + t` from the exact
/// product (ρₐρ_b, of order (m·u²)², is dropped).
fn mul_comp((a, ra): (Dd, f64), (b, rb): (Dd, f64)) -> (Dd, f64) {
    let p = a.hi * b.hi;
    if !p.is_finite() || p.abs() < PRECISE_FROM {
        return (a * b, ra + rb);
    }
    let mut e = Expansion::new();
    e.add_dd_prod(a, b);
    let (d, t) = e.to_dd_ext();
    (d, ra + rb + t / d.hi)
}
