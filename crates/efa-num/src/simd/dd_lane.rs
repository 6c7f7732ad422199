//! The double-double type's one-lane "vector": every SIMD body instantiated for [`Dd`] runs
//! scalar, each lane operation the [`Dd`] operation of the same name (so a kernel's order of
//! operations is kept and its arithmetic is double-double), and the exponential is
//! `Dd::exp` itself rather than the bodies' polynomial (which is accurate to f64 only). All
//! three instruction-set slots are this lane: a kernel compiled for AVX2 or AVX-512 runs the
//! same scalar code for `Dd`.

use super::{Lane, SimdElem, SimdVec};
use crate::{Dd, Real};

impl SimdElem for Dd {
    type One = Lane<Dd>;
    type Avx2 = Lane<Dd>;
    type Avx512 = Lane<Dd>;
    // The polynomial exponential's constants: unused ([`SimdVec::exp`] is `Dd::exp` here).
    const EXP_LO: Self = Dd::from_f64(-760.0);
    const EXP_HI: Self = Dd::from_f64(710.0);
    const LOG2E: Self = Dd::from_f64(std::f64::consts::LOG2_E);
    const LN2_HI: Self = Dd::from_f64(std::f64::consts::LN_2);
    const LN2_LO: Self = Dd::from_f64(0.0);
    const EXP_COEF: &'static [Self] = &[];
}

// SAFETY: plain scalar code: every method is valid on every CPU, and the pointer methods read
// or write exactly one element, as the trait's contract states for one lane.
unsafe impl SimdVec for Lane<Dd> {
    type Elem = Dd;
    const LANES: usize = 1;
    #[inline(always)]
    unsafe fn splat(x: Dd) -> Self {
        Lane(x)
    }
    #[inline(always)]
    unsafe fn load(p: *const Dd) -> Self {
        // SAFETY: the caller's contract: `p` is valid for one element.
        Lane(unsafe { *p })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut Dd) {
        // SAFETY: as `load`.
        unsafe { *p = self.0 }
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        Lane(self.0 + b.0)
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        Lane(self.0 - b.0)
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        Lane(self.0 * b.0)
    }
    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        Lane(self.0 / b.0)
    }
    #[inline(always)]
    unsafe fn fma(self, b: Self, c: Self) -> Self {
        Lane(self.0.mul_add(b.0, c.0))
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        Lane(if self.0 > b.0 { self.0 } else { b.0 })
    }
    #[inline(always)]
    unsafe fn min(self, b: Self) -> Self {
        Lane(if self.0 < b.0 { self.0 } else { b.0 })
    }
    /// Round to nearest, ties to even (as the vector instructions).
    #[inline(always)]
    unsafe fn round(self) -> Self {
        let x = self.0;
        let f = x.floor();
        let d = x - f;
        let half = Dd::HALF;
        let up = d > half || (d == half && (f * half).floor() * Dd::TWO != f);
        Lane(if up { f + Dd::ONE } else { f })
    }
    #[inline(always)]
    unsafe fn floor(self) -> Self {
        Lane(self.0.floor())
    }
    /// 2ⁿ for an integral `n` (exact).
    #[inline(always)]
    unsafe fn pow2i(self) -> Self {
        Lane(Dd::ONE.ldexp(self.0.hi() as i32))
    }
    #[inline(always)]
    unsafe fn reduce_sum(self) -> Dd {
        self.0
    }
    #[inline(always)]
    unsafe fn reduce_max(self) -> Dd {
        self.0
    }
    /// `Dd::exp`, accurate to double-double (the default's polynomial is f64-accurate).
    #[inline(always)]
    unsafe fn exp(self) -> Self {
        Lane(self.0.exp())
    }
    /// `Dd::exp` of each (no polynomial chains to interleave).
    #[inline(always)]
    unsafe fn exp_each<const K: usize>(v: [Self; K]) -> [Self; K] {
        v.map(|x| Lane(x.0.exp()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(x: f64) -> Lane<Dd> {
        Lane(Dd::from_f64(x))
    }

    #[test]
    fn round_is_to_nearest_ties_to_even() {
        for (x, want) in [
            (0.5, 0.0),
            (1.5, 2.0),
            (2.5, 2.0),
            (-0.5, 0.0),
            (-1.5, -2.0),
            (-2.5, -2.0),
            (2.4, 2.0),
            (2.6, 3.0),
            (-2.6, -3.0),
            (7.0, 7.0),
        ] {
            // SAFETY: scalar lane operations are valid on every CPU.
            let r = unsafe { lane(x).round() }.0;
            assert_eq!(r, Dd::from_f64(want), "round({x})");
        }
        // A tie only in double-double: 2.5 + 2⁻⁸⁰ rounds up.
        let x = Dd::new(2.5, 2f64.powi(-80));
        // SAFETY: as above.
        assert_eq!(unsafe { Lane(x).round() }.0, Dd::from_f64(3.0));
    }

    #[test]
    fn exp_and_pow2i_are_double_double() {
        // SAFETY: scalar lane operations are valid on every CPU.
        unsafe {
            assert_eq!(lane(-3.0).pow2i().0, Dd::from_f64(0.125));
            assert_eq!(lane(1.0).exp().0, Dd::from_f64(1.0).exp());
            // e¹ to double-double differs from f64's e in the low word.
            assert!(lane(1.0).exp().0.lo() != 0.0);
            let s = lane(2.0).fma(lane(3.0), lane(1.0)).0;
            assert_eq!(s, Dd::from_f64(7.0));
        }
    }
}
