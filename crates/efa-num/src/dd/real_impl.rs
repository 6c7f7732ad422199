//! `impl Real for Dd`: every method at double-double precision (see each `*_dd` method for
//! its algorithm and error).

use super::consts;
use super::Dd;
use crate::Real;

/// `2ⁿ` as a constant f64 (normal range).
const fn p2(n: i32) -> f64 {
    f64::from_bits(((n + 1023) as u64) << 52)
}

/// Multiplier of the bijective mix of `lo`'s bits in [`Real::to_bits_u64`] (odd, so the
/// wrapping product is a bijection of u64).
const LO_MIX: u64 = 0x9E37_79B9_7F4A_7C15;

impl Real for Dd {
    const ZERO: Self = Dd::from_f64(0.0);
    const ONE: Self = Dd::from_f64(1.0);
    const TWO: Self = Dd::from_f64(2.0);
    const HALF: Self = Dd::from_f64(0.5);
    const INFINITY: Self = Dd::from_f64(f64::INFINITY);
    const NEG_INFINITY: Self = Dd::from_f64(f64::NEG_INFINITY);
    const NAN: Self = Dd::from_f64(f64::NAN);
    /// 2⁻¹⁰⁴ = 4u² (u = 2⁻⁵³): the proven relative error bound of the double-double product,
    /// and above that of `+`, `−` (3u²) and `÷` (about u²); `1 + ε > 1`.
    const EPSILON: Self = Dd::from_f64(p2(-104));
    /// 2⁻⁹⁶⁹: the smallest magnitude at which full double-double precision holds (below it
    /// `lo`, up to 2⁻⁵³ of `hi`, can fall under f64's smallest normal 2⁻¹⁰²², and the
    /// relative precision degrades toward that of f64 and below).
    const MIN_POSITIVE: Self = Dd::from_f64(p2(-969));
    /// `f64::MAX + (2⁹⁷⁰ − 2⁹¹⁷)`: the largest normalised pair (`hi + lo` still rounds to
    /// `hi`; one more unit of `lo` would round to +∞).
    const MAX: Self = Dd::raw(f64::MAX, p2(970) - p2(917));
    const LN_2: Self = Dd::raw(consts::LN_2.0, consts::LN_2.1);
    const PI: Self = Dd::raw(consts::PI.0, consts::PI.1);
    const NAME: &'static str = "dd";
    const BYTES: usize = 16;

    /// Exact: `x + 0`.
    #[inline]
    fn from_f64(x: f64) -> Self {
        Dd::from_f64(x)
    }
    /// `hi`, which is `hi + lo` rounded to the nearest f64.
    #[inline]
    fn to_f64(self) -> f64 {
        self.hi
    }
    #[inline]
    fn to_f64_pair(self) -> (f64, f64) {
        (self.hi, self.lo)
    }
    #[inline]
    fn from_f64_pair(hi: f64, lo: f64) -> Self {
        Dd::new(hi, lo)
    }
    /// Exact for every usize: `hi = n` rounded, `lo = n − hi` (at most 2¹¹ in magnitude).
    #[inline]
    fn from_usize(n: usize) -> Self {
        let hi = n as f64;
        let lo = (n as i128 - hi as i128) as f64;
        Dd::new(hi, lo)
    }
    fn exp(self) -> Self {
        self.exp_dd()
    }
    fn exp_m1(self) -> Self {
        self.exp_m1_dd()
    }
    fn ln(self) -> Self {
        self.ln_dd()
    }
    fn ln_1p(self) -> Self {
        self.ln_1p_dd()
    }
    fn sqrt(self) -> Self {
        self.sqrt_dd()
    }
    #[inline]
    fn abs(self) -> Self {
        self.abs_dd()
    }
    fn tanh(self) -> Self {
        self.tanh_dd()
    }
    fn erf(self) -> Self {
        self.erf_dd()
    }
    fn lgamma(self) -> Self {
        self.lgamma_dd()
    }
    fn powi(self, n: i32) -> Self {
        self.powi_dd(n)
    }
    fn powf(self, y: Self) -> Self {
        self.powf_dd(y)
    }
    fn floor(self) -> Self {
        self.floor_dd()
    }
    fn round(self) -> Self {
        self.round_dd()
    }
    fn trunc(self) -> Self {
        self.trunc_dd()
    }
    /// `self·a + b` with one rounding to double-double (the exact product and sum rounded
    /// once, see `Dd::mul_add_dd`).
    fn mul_add(self, a: Self, b: Self) -> Self {
        self.mul_add_dd(a, b)
    }
    #[inline]
    fn max(self, other: Self) -> Self {
        self.max_dd(other)
    }
    #[inline]
    fn min(self, other: Self) -> Self {
        self.min_dd(other)
    }
    #[inline]
    fn is_finite(self) -> bool {
        Dd::is_finite(self)
    }
    #[inline]
    fn is_nan(self) -> bool {
        Dd::is_nan(self)
    }
    /// `bits(hi) XOR rotl(bits(lo)·K, 29)` with an odd constant K: both maps are bijections,
    /// so two values that differ in exactly one word always differ here (and a value with
    /// `lo = +0` gives the bits of its `hi`, as an f64 would).
    #[inline]
    fn to_bits_u64(self) -> u64 {
        self.hi.to_bits() ^ self.lo.to_bits().wrapping_mul(LO_MIX).rotate_left(29)
    }
    /// A plain triple loop in double-double through [`crate::gemm::gemm`] (its Dd branch).
    fn gemm(
        alpha: Self,
        a: crate::mat::MatRef<'_, Self>,
        b: crate::mat::MatRef<'_, Self>,
        beta: Self,
        c: crate::mat::MatMut<'_, Self>,
    ) {
        crate::gemm::gemm(alpha, a, b, beta, c)
    }
}
