//! The four operations of [`Dd`], their assigning forms, `%` and negation, plus the mixed
//! double-word ⊕ f64 helpers the elementary functions use.

use super::expansion::Expansion;
use super::{fast_two_sum, two_prod, two_sum, Dd};
use std::ops::{
    Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Rem, RemAssign, Sub, SubAssign,
};

impl Dd {
    /// `x + y` for an f64 `y` (Joldes–Muller–Popescu Algorithm 4, DWPlusFP):
    /// `(sₕ, sₗ) = TwoSum(xₕ, y)`, `v = xₗ + sₗ`, `z = Fast2Sum(sₕ, v)`; relative error ≤ 2u².
    #[inline]
    pub fn add_f64(self, y: f64) -> Dd {
        let (sh, sl) = two_sum(self.hi, y);
        if !sh.is_finite() {
            return Dd::raw(sh, 0.0);
        }
        let (zh, zl) = fast_two_sum(sh, self.lo + sl);
        Dd::signed_zero(zh, zl, self.hi, y)
    }

    /// `x·y` for an f64 `y` (Joldes–Muller–Popescu Algorithm 9, DWTimesFP3):
    /// `(cₕ, c₁) = TwoProd(xₕ, y)`, `c₃ = fma(xₗ, y, c₁)`, `z = Fast2Sum(cₕ, c₃)`; relative
    /// error ≤ 2u².
    #[inline]
    pub fn mul_f64(self, y: f64) -> Dd {
        let (ch, cl1) = two_prod(self.hi, y);
        if !ch.is_finite() || ch == 0.0 {
            return Dd::raw(ch, 0.0);
        }
        let (zh, zl) = fast_two_sum(ch, self.lo.mul_add(y, cl1));
        Dd::finish(zh, zl)
    }

    /// `x/y` for an f64 `y` (Joldes–Muller–Popescu Algorithm 15, DWDivFP3):
    /// `tₕ = xₕ/y`, `(πₕ, πₗ) = TwoProd(tₕ, y)`, `δ = ((xₕ − πₕ) − πₗ) + xₗ`,
    /// `z = Fast2Sum(tₕ, δ/y)`; relative error ≤ 3u².
    #[inline]
    pub fn div_f64(self, y: f64) -> Dd {
        let th = self.hi / y;
        if !th.is_finite() || !y.is_finite() || th == 0.0 {
            return Dd::raw(th, 0.0);
        }
        let (ph, pl) = two_prod(th, y);
        let d = ((self.hi - ph) - pl) + self.lo;
        let (zh, zl) = fast_two_sum(th, d / y);
        Dd::finish(zh, zl)
    }

    /// `x²` (the product algorithm with both operands equal).
    #[inline]
    pub fn sqr(self) -> Dd {
        self * self
    }

    /// Accurate double-word sum (Joldes–Muller–Popescu Algorithm 6, AccurateDWPlusDW):
    /// `(sₕ, sₗ) = TwoSum(xₕ, yₕ)`, `(tₕ, tₗ) = TwoSum(xₗ, yₗ)`, `(vₕ, vₗ) = Fast2Sum(sₕ, sₗ + tₕ)`,
    /// `z = Fast2Sum(vₕ, tₗ + vₗ)`; relative error ≤ 3u² + 13u³.
    #[inline]
    fn add_dd(self, y: Dd) -> Dd {
        let (sh, sl) = two_sum(self.hi, y.hi);
        if !sh.is_finite() {
            return Dd::raw(sh, 0.0);
        }
        let (th, tl) = two_sum(self.lo, y.lo);
        let (vh, vl) = fast_two_sum(sh, sl + th);
        let (zh, zl) = fast_two_sum(vh, tl + vl);
        Dd::signed_zero(zh, zl, self.hi, y.hi)
    }

    /// `(zₕ, zₗ)` normalised, with the sign of an exact zero as f64 gives it for `a + b`
    /// (−0 only when both are −0).
    #[inline(always)]
    fn signed_zero(zh: f64, zl: f64, a: f64, b: f64) -> Dd {
        if zh == 0.0 {
            return Dd::raw(if a == 0.0 && b == 0.0 { a + b } else { 0.0 }, 0.0);
        }
        Dd::finish(zh, zl)
    }

    /// Double-word product (Joldes–Muller–Popescu Algorithm 12, DWTimesDW3):
    /// `(cₕ, c₁) = TwoProd(xₕ, yₕ)`, `c₂ = fma(xₗ, yₕ, fma(xₕ, yₗ, xₗ·yₗ))`,
    /// `z = Fast2Sum(cₕ, c₁ + c₂)`; relative error ≤ 4u².
    #[inline]
    fn mul_dd(self, y: Dd) -> Dd {
        let (ch, cl1) = two_prod(self.hi, y.hi);
        if !ch.is_finite() || ch == 0.0 {
            return Dd::raw(ch, 0.0);
        }
        let tl1 = self.hi.mul_add(y.lo, self.lo * y.lo);
        let cl2 = self.lo.mul_add(y.hi, tl1);
        let (zh, zl) = fast_two_sum(ch, cl1 + cl2);
        Dd::finish(zh, zl)
    }

    /// Double-word quotient from the exact remainder: `q₁ = xₕ/yₕ`; `r = x − q₁·y` formed from
    /// the exact products `TwoProd(q₁, yₕ)`, `TwoProd(q₁, yₗ)` (`xₕ − fl(q₁yₕ)` is exact by
    /// Sterbenz); `q₂ = rₕ/yₕ`, `r′ = r − q₂·y`, `q₃ = r′ₕ/yₕ`; `z = Fast2Sum(q₁, q₂) + q₃`.
    /// Relative error about u² (the corrections are each accurate to ~u of what they correct).
    fn div_dd(self, y: Dd) -> Dd {
        let q1 = self.hi / y.hi;
        if !q1.is_finite() || !y.hi.is_finite() || q1 == 0.0 {
            return Dd::raw(q1, 0.0);
        }
        let (ph, pl) = two_prod(q1, y.hi);
        if !ph.is_finite() {
            // xₕ within a few ulps of f64::MAX: divide a quarter of x instead.
            return (self.ldexp(-2) / y).ldexp(2);
        }
        let (qh, ql) = two_prod(q1, y.lo);
        let r = Dd::new(self.hi - ph, self.lo) - Dd::new(pl, qh);
        let r = r.add_f64(-ql);
        let q2 = r.hi / y.hi;
        let r2 = r - y.mul_f64(q2);
        let q3 = r2.hi / y.hi;
        let (h, l) = fast_two_sum(q1, q2);
        Dd::raw(h, l).add_f64(q3)
    }

    /// `x % y` as f64 does it: `x − trunc(x/y)·y`, with the sign of `x` and `|r| < |y|`.
    /// Each step `r ← r − trunc(r/y′)·y′` (`y′ = y`, or `y·2ᵐ` when `r/y` exceeds 2²⁰⁰) forms
    /// the product and difference exactly ([`Expansion`]) and gains about 100 bits, so a
    /// quotient below 2¹⁰⁰ takes one step (exact) and larger ones a few; a last correction by
    /// ±|y| fixes a quotient rounded across an integer. NaN if `x` is not finite or `y` is 0 or NaN; `x` if `y` is infinite.
    fn rem_dd(self, y: Dd) -> Dd {
        if !self.is_finite() || y.is_nan() || y.hi == 0.0 {
            return Dd::raw(f64::NAN, 0.0);
        }
        if !y.is_finite() {
            return self;
        }
        let ay = y.abs_dd();
        let mut r = self;
        for _ in 0..30 {
            if r.abs_dd() < ay {
                break;
            }
            // A multiple of y by a power of two at most 2¹⁰⁰ below r (r/y may overflow).
            let gap = (r.hi.abs().log2() - ay.hi.log2()).floor() as i32;
            let ys = if gap > 200 { y.ldexp(gap - 100) } else { y };
            let q = (r / ys).trunc_dd();
            let mut e = Expansion::new();
            e.add_dd(r);
            e.add_dd_prod(-q, ys);
            r = e.to_dd();
        }
        r = r.rem_fix_sign(self.hi, ay);
        if r.hi == 0.0 {
            return Dd::raw(0.0f64.copysign(self.hi), 0.0);
        }
        r
    }

    /// Brings a remainder within one `|y|` of the range into `[0, |y|)` (for `x > 0`) or
    /// `(−|y|, 0]` (for `x < 0`).
    fn rem_fix_sign(self, x: f64, ay: Dd) -> Dd {
        let mut r = self;
        if x > 0.0 && r.hi < 0.0 {
            r += ay;
        } else if x < 0.0 && r.hi > 0.0 {
            r -= ay;
        }
        if r.abs_dd() >= ay {
            r = if r.hi > 0.0 { r - ay } else { r + ay };
        }
        r
    }
}

impl Neg for Dd {
    type Output = Dd;
    /// `−x` (both words negated; exact).
    #[inline]
    fn neg(self) -> Dd {
        Dd::raw(-self.hi, -self.lo)
    }
}

macro_rules! binop {
    ($tr:ident, $m:ident, $atr:ident, $am:ident, $f:ident, $doc:literal) => {
        impl $tr for Dd {
            type Output = Dd;
            #[doc = $doc]
            #[inline]
            fn $m(self, y: Dd) -> Dd {
                self.$f(y)
            }
        }
        impl $atr for Dd {
            #[doc = $doc]
            #[inline]
            fn $am(&mut self, y: Dd) {
                *self = self.$f(y);
            }
        }
    };
}

impl Dd {
    #[inline(always)]
    fn sub_dd(self, y: Dd) -> Dd {
        self.add_dd(-y)
    }
}

binop!(
    Add,
    add,
    AddAssign,
    add_assign,
    add_dd,
    "Accurate double-word sum (relative error ≤ 3u²; see the module docs)."
);
binop!(
    Sub,
    sub,
    SubAssign,
    sub_assign,
    sub_dd,
    "`x + (−y)` with the accurate sum (relative error ≤ 3u²)."
);
binop!(
    Mul,
    mul,
    MulAssign,
    mul_assign,
    mul_dd,
    "Double-word product (relative error ≤ 4u²)."
);
binop!(
    Div,
    div,
    DivAssign,
    div_assign,
    div_dd,
    "Double-word quotient via the exact remainder (relative error about u²)."
);
binop!(
    Rem,
    rem,
    RemAssign,
    rem_assign,
    rem_dd,
    "`x − trunc(x/y)·y` with the sign of x, exact while |x/y| < 2¹⁰⁰ (as f64's `%`)."
);
