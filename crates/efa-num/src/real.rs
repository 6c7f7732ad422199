//! The sealed floating-point trait every efa crate is generic over.
//!
//! Only `f32` (the speed path), `f64` (the audit precision) and [`crate::Dd`] (double-double,
//! the reference more precise than f64; scalar code paths only) implement [`Real`].

use crate::mat::{MatMut, MatRef};
use std::fmt::{Debug, Display, LowerExp};
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Rem, Sub, SubAssign};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for crate::dd::Dd {}
}

/// A real floating-point scalar: `f32`, `f64` or [`crate::Dd`].
///
/// Gives the constants, conversions and elementary functions the efa crates need, plus a
/// dense matrix product ([`Real::gemm`]) backed by [`crate::gemm`].
pub trait Real:
    sealed::Sealed
    + Copy
    + Send
    + Sync
    + 'static
    + Default
    + Debug
    + Display
    + LowerExp
    + PartialEq
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Rem<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + DivAssign
    + Sum
    + ndarray::ScalarOperand
    + ndarray::LinalgScalar
{
    /// 0
    const ZERO: Self;
    /// 1
    const ONE: Self;
    /// 2
    const TWO: Self;
    /// 1/2
    const HALF: Self;
    /// +∞
    const INFINITY: Self;
    /// −∞
    const NEG_INFINITY: Self;
    /// quiet NaN
    const NAN: Self;
    /// Machine epsilon (2⁻²³ for f32, 2⁻⁵² for f64, 2⁻¹⁰⁴ for Dd).
    const EPSILON: Self;
    /// Smallest positive normal number (for Dd: the smallest with full precision, 2⁻⁹⁶⁹).
    const MIN_POSITIVE: Self;
    /// Largest finite number.
    const MAX: Self;
    /// ln 2
    const LN_2: Self;
    /// π
    const PI: Self;
    /// Type name, `"f32"`, `"f64"` or `"dd"`.
    const NAME: &'static str;
    /// Bytes per value.
    const BYTES: usize;

    /// Rounds an f64 to this type (round to nearest; exact for f64 and Dd).
    fn from_f64(x: f64) -> Self;
    /// Converts to f64: exact for f32 and f64, rounded to nearest for Dd.
    fn to_f64(self) -> f64;
    /// Converts a count or index.
    fn from_usize(n: usize) -> Self;
    /// The value as an unevaluated sum `hi + lo` of two f64, exactly (`lo = 0` for f32 and
    /// f64; the double-double type gives both of its parts).
    fn to_f64_pair(self) -> (f64, f64);
    /// `hi + lo` rounded to this type (exact for the double-double type when the pair is
    /// normalised).
    fn from_f64_pair(hi: f64, lo: f64) -> Self;
    /// This value in another `Real` type `U`: exact where `U` is at least as wide, else
    /// rounded once (`f64 → f32`, `dd → f64`).
    #[inline(always)]
    fn cast<U: Real>(self) -> U {
        let (hi, lo) = self.to_f64_pair();
        U::from_f64_pair(hi, lo)
    }

    /// eˣ
    fn exp(self) -> Self;
    /// eˣ − 1, accurate near 0.
    fn exp_m1(self) -> Self;
    /// ln x
    fn ln(self) -> Self;
    /// ln(1 + x), accurate near 0.
    fn ln_1p(self) -> Self;
    /// √x
    fn sqrt(self) -> Self;
    /// |x|
    fn abs(self) -> Self;
    /// tanh x
    fn tanh(self) -> Self;
    /// erf x (libm for f32/f64).
    fn erf(self) -> Self;
    /// ln Γ(x) for x > 0 (libm `lgamma` for f32/f64).
    fn lgamma(self) -> Self;
    /// xⁿ for integer n.
    fn powi(self, n: i32) -> Self;
    /// xʸ
    fn powf(self, y: Self) -> Self;
    /// ⌊x⌋
    fn floor(self) -> Self;
    /// Round half away from zero.
    fn round(self) -> Self;
    /// Truncate toward zero.
    fn trunc(self) -> Self;
    /// x·a + b with one rounding (for Dd: the exact product and sum rounded once).
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// Maximum; NaN-ignoring as `f64::max`.
    fn max(self, other: Self) -> Self;
    /// Minimum; NaN-ignoring as `f64::min`.
    fn min(self, other: Self) -> Self;
    /// Neither infinite nor NaN.
    fn is_finite(self) -> bool;
    /// NaN test.
    fn is_nan(self) -> bool;
    /// Bit pattern widened to u64 (for bitwise determinism checks; for Dd both words are
    /// combined, so values differing in either word differ here).
    fn to_bits_u64(self) -> u64;

    /// General matrix product `C ← α·A·B + β·C` on strided views (any row and column strides,
    /// so transposes need no copy), through efa's own GEMM ([`crate::gemm::gemm`]: AVX-512,
    /// AVX2 or scalar microkernels; `matrixmultiply` on other architectures; a plain
    /// double-double loop for Dd). `A` is m×k, `B` k×n, `C` m×n; β = 0 does not read `C`.
    ///
    /// # Panics
    /// If the shapes do not agree.
    fn gemm(alpha: Self, a: MatRef<'_, Self>, b: MatRef<'_, Self>, beta: Self, c: MatMut<'_, Self>);
}

macro_rules! impl_real {
    ($t:ident, $gemm:path, $lgamma:path, $erf:path, $bytes:expr) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const TWO: Self = 2.0;
            const HALF: Self = 0.5;
            const INFINITY: Self = $t::INFINITY;
            const NEG_INFINITY: Self = $t::NEG_INFINITY;
            const NAN: Self = $t::NAN;
            const EPSILON: Self = $t::EPSILON;
            const MIN_POSITIVE: Self = $t::MIN_POSITIVE;
            const MAX: Self = $t::MAX;
            const LN_2: Self = std::$t::consts::LN_2;
            const PI: Self = std::$t::consts::PI;
            const NAME: &'static str = stringify!($t);
            const BYTES: usize = $bytes;

            #[inline(always)]
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_usize(n: usize) -> Self {
                n as $t
            }
            #[inline(always)]
            fn to_f64_pair(self) -> (f64, f64) {
                (self as f64, 0.0)
            }
            #[inline(always)]
            fn from_f64_pair(hi: f64, lo: f64) -> Self {
                (hi + lo) as $t
            }
            #[inline(always)]
            fn exp(self) -> Self {
                $t::exp(self)
            }
            #[inline(always)]
            fn exp_m1(self) -> Self {
                $t::exp_m1(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                $t::ln(self)
            }
            #[inline(always)]
            fn ln_1p(self) -> Self {
                $t::ln_1p(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                $t::sqrt(self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                $t::abs(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                $t::tanh(self)
            }
            #[inline(always)]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline(always)]
            fn lgamma(self) -> Self {
                $lgamma(self)
            }
            #[inline(always)]
            fn powi(self, n: i32) -> Self {
                $t::powi(self, n)
            }
            #[inline(always)]
            fn powf(self, y: Self) -> Self {
                $t::powf(self, y)
            }
            #[inline(always)]
            fn floor(self) -> Self {
                $t::floor(self)
            }
            #[inline(always)]
            fn round(self) -> Self {
                $t::round(self)
            }
            #[inline(always)]
            fn trunc(self) -> Self {
                $t::trunc(self)
            }
            #[inline(always)]
            fn mul_add(self, a: Self, b: Self) -> Self {
                $t::mul_add(self, a, b)
            }
            #[inline(always)]
            fn max(self, other: Self) -> Self {
                $t::max(self, other)
            }
            #[inline(always)]
            fn min(self, other: Self) -> Self {
                $t::min(self, other)
            }
            #[inline(always)]
            fn is_finite(self) -> bool {
                $t::is_finite(self)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                $t::is_nan(self)
            }
            #[inline(always)]
            fn to_bits_u64(self) -> u64 {
                self.to_bits() as u64
            }
            #[inline]
            fn gemm(
                alpha: Self,
                a: MatRef<'_, Self>,
                b: MatRef<'_, Self>,
                beta: Self,
                c: MatMut<'_, Self>,
            ) {
                $gemm(alpha, a, b, beta, c)
            }
        }
    };
}

impl_real!(f32, crate::gemm::gemm, libm::lgammaf, libm::erff, 4);
impl_real!(f64, crate::gemm::gemm, libm::lgamma, libm::erf, 8);

#[cfg(test)]
mod tests {
    use super::Real;
    use crate::mat::{MatMut, MatRef};

    fn roundtrip<T: Real>() {
        assert_eq!(T::from_f64(1.5).to_f64(), 1.5);
        assert_eq!(T::from_usize(7).to_f64(), 7.0);
        assert!(T::NAN.is_nan());
        assert!(!T::INFINITY.is_finite());
        assert_eq!(
            (T::LN_2.exp()).to_f64(),
            2.0_f64.max((T::LN_2.exp()).to_f64())
        );
    }

    #[test]
    fn conversions_and_constants() {
        roundtrip::<f32>();
        roundtrip::<f64>();
        assert_eq!(f32::NAME, "f32");
        assert_eq!(<f64 as Real>::BYTES, 8);
    }

    #[test]
    fn gemm_small_rectangular_matches_naive() {
        // A 2x3, B 3x2 row-major; C = A B computed by hand.
        let a = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [7.0f64, 8.0, 9.0, 10.0, 11.0, 12.0];
        let mut c = [0.0f64; 4];
        <f64 as Real>::gemm(
            1.0,
            MatRef::row_major(&a, 2, 3, 3),
            MatRef::row_major(&b, 3, 2, 2),
            0.0,
            MatMut::row_major(&mut c, 2, 2, 2),
        );
        assert_eq!(c, [58.0, 64.0, 139.0, 154.0]);
    }

    #[test]
    fn lgamma_known_values() {
        // lnΓ(5) = ln 24; lnΓ(1/2) = ln √π.
        assert!((<f64 as Real>::lgamma(5.0) - 24f64.ln()).abs() < 1e-14);
        assert!((<f64 as Real>::lgamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-14);
    }
}
