//! Vector abstraction for the SIMD bodies: one trait, [`SimdVec`], implemented by a one-lane
//! scalar type ([`Lane`]) and by the AVX2 (`__m256`, `__m256d`) and AVX-512 (`__m512`,
//! `__m512d`) registers.
//!
//! Kernels are written once as `#[inline(always)]` functions generic over `V: SimdVec` and
//! instantiated inside `#[target_feature]` wrappers, so the intrinsics inline into code compiled
//! for the right instruction set.

use crate::Real;

/// Element types with SIMD kernels: `f32` and `f64`, with the constants of the vectorised
/// exponential ([`SimdVec::exp`]).
pub trait SimdElem: Real {
    /// The one-lane scalar vector.
    type One: SimdVec<Elem = Self>;
    /// The AVX2 register type (only usable where AVX2 + FMA are present).
    type Avx2: SimdVec<Elem = Self>;
    /// The AVX-512 register type (only usable where AVX-512F is present).
    type Avx512: SimdVec<Elem = Self>;
    /// Inputs below this give `exp(x) = 0` (the true value is below half the smallest
    /// subnormal). Chosen so that at `EXP_LO` itself (and so for −∞) both factors of the
    /// final scaling `2^⌊n/2⌋·2^(n−⌊n/2⌋)` are exact zeros (`n/2` is one below the smallest
    /// normal exponent, whose bit pattern is +0): the zero is a product with 0, not a product
    /// that underflows, which costs a microcode assist of about a hundred cycles on AMD
    /// cores (a masked score's −∞ made every vector holding one take it). Arguments between
    /// the smallest zero result and `EXP_LO` still underflow to the same +0.
    const EXP_LO: Self;
    /// Inputs above this give `exp(x) = +∞` (the true value overflows).
    const EXP_HI: Self;
    /// log₂ e
    const LOG2E: Self;
    /// High part of ln 2 (few significant bits, so `n·LN2_HI` is exact).
    const LN2_HI: Self;
    /// Low part: ln 2 − LN2_HI.
    const LN2_LO: Self;
    /// Taylor coefficients 1/k! of eʳ, highest degree first (degree 7 for f32, 13 for f64).
    const EXP_COEF: &'static [Self];
}

impl SimdElem for f32 {
    type One = Lane<f32>;
    #[cfg(target_arch = "x86_64")]
    type Avx2 = Avx2F32;
    #[cfg(target_arch = "x86_64")]
    type Avx512 = Avx512F32;
    #[cfg(not(target_arch = "x86_64"))]
    type Avx2 = Lane<f32>;
    #[cfg(not(target_arch = "x86_64"))]
    type Avx512 = Lane<f32>;
    const EXP_LO: Self = -176.0;
    const EXP_HI: Self = 89.0;
    const LOG2E: Self = std::f32::consts::LOG2_E;
    const LN2_HI: Self = 0.693_359_4;
    const LN2_LO: Self = -2.121_944_4e-4;
    const EXP_COEF: &'static [Self] = &[
        1.0 / 5040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ];
}

impl SimdElem for f64 {
    type One = Lane<f64>;
    #[cfg(target_arch = "x86_64")]
    type Avx2 = Avx2F64;
    #[cfg(target_arch = "x86_64")]
    type Avx512 = Avx512F64;
    #[cfg(not(target_arch = "x86_64"))]
    type Avx2 = Lane<f64>;
    #[cfg(not(target_arch = "x86_64"))]
    type Avx512 = Lane<f64>;
    const EXP_LO: Self = -1418.0;
    const EXP_HI: Self = 710.0;
    const LOG2E: Self = std::f64::consts::LOG2_E;
    const LN2_HI: Self = 6.931_471_803_691_238e-1;
    const LN2_LO: Self = 1.908_214_929_270_587_7e-10;
    const EXP_COEF: &'static [Self] = &[
        1.0 / 6_227_020_800.0,
        1.0 / 479_001_600.0,
        1.0 / 39_916_800.0,
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ];
}

/// The most lanes of any register type (16 f32 lanes of AVX-512).
pub const MAX_LANES: usize = 16;

/// A SIMD register of `LANES` elements of type `Elem`.
///
/// # Safety
/// (Callers: this section covers every method; each is `unsafe` for the same two reasons.)
/// Implementations use CPU-specific instructions: every method may only be called on a CPU
/// that supports the type's instruction set (see [`super::Isa`]), and pointer arguments must be
/// valid for `LANES` elements (`n` for the `_first` methods) and aligned for `Elem`
/// ("unaligned" below means: not necessarily aligned to the width of the register).
///
/// Implementors must keep `LANES <= MAX_LANES` (the default `load_first` and `store_first` go
/// through a `MAX_LANES` buffer), make `load` and `store` access exactly the `LANES` elements
/// at the pointer, and use only instructions of the type's instruction set.
pub unsafe trait SimdVec: Copy {
    /// The element type.
    type Elem: SimdElem;
    /// Number of lanes.
    const LANES: usize;
    /// All lanes equal to `x`.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    unsafe fn splat(x: Self::Elem) -> Self;
    /// Unaligned load of `LANES` elements.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set; `p` must be valid for reading `LANES`
    /// elements and aligned for `Elem`.
    unsafe fn load(p: *const Self::Elem) -> Self;
    /// Unaligned store of `LANES` elements.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set; `p` must be valid for writing `LANES`
    /// elements and aligned for `Elem`.
    unsafe fn store(self, p: *mut Self::Elem);
    /// Lane-wise `a + b`.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    unsafe fn add(self, b: Self) -> Self;
    /// Lane-wise `a − b`.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    unsafe fn sub(self, b: Self) -> Self;
    /// Lane-wise `a · b`.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    unsafe fn mul(self, b: Self) -> Self;
    /// Lane-wise `a / b` (correctly rounded, as the scalar division).
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    unsafe fn div(self, b: Self) -> Self;
    /// Lane-wise `a · b + c` with one rounding.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    unsafe fn fma(self, b: Self, c: Self) -> Self;
    /// Lane-wise maximum; returns `b` when either is NaN (x86 `max` semantics).
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    unsafe fn max(self, b: Self) -> Self;
    /// Lane-wise minimum; returns `b` when either is NaN.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    unsafe fn min(self, b: Self) -> Self;
    /// Round to nearest integer, ties to even.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    unsafe fn round(self) -> Self;
    /// Round toward −∞.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    unsafe fn floor(self) -> Self;
    /// 2ⁿ for integral lanes `n` within the normal exponent range.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    unsafe fn pow2i(self) -> Self;
    /// `self·2ⁿ` for integral lanes `n` with |n| up to about twice the exponent range:
    /// scaled in two steps `2^⌊n/2⌋·2^(n−⌊n/2⌋)` so results underflow gradually to 0 and
    /// overflow to +∞. AVX-512 uses its `scalef` instruction, which does it in one step and
    /// rounds once: the same bits wherever the first step is exact (every scaling the
    /// exponential does); a subnormal `self` or first step may differ in the last place.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    #[inline(always)]
    unsafe fn ldexp(self, n: Self) -> Self {
        // SAFETY: register arithmetic only (no memory access); the caller guarantees the CPU
        // supports the type's instruction set, which is all these methods need.
        unsafe {
            let n1 = n.mul(Self::splat(Self::Elem::HALF)).floor();
            let n2 = n.sub(n1);
            self.mul(n1.pow2i()).mul(n2.pow2i())
        }
    }
    /// The first `n` elements at `p` (`n < LANES`; only those are read) in the first lanes,
    /// `fill` in the others. The default goes through a stack buffer; AVX-512 uses a masked
    /// load.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set; `n < LANES`; `p` must be valid for
    /// reading `n` elements and aligned for `Elem`.
    #[inline(always)]
    unsafe fn load_first(p: *const Self::Elem, n: usize, fill: Self::Elem) -> Self {
        // SAFETY: the caller guarantees `p` is valid for reading `n` elements and `n < LANES`,
        // and implementors keep `LANES <= MAX_LANES` (the trait's contract), so the copy writes
        // inside the local `buf`, which cannot overlap `p`'s storage; `load` then reads `LANES`
        // elements of `buf`, all in bounds and aligned, on a CPU the caller guarantees supports
        // the instruction set.
        unsafe {
            let mut buf = [fill; MAX_LANES];
            debug_assert!(n < Self::LANES && Self::LANES <= MAX_LANES);
            std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n);
            Self::load(buf.as_ptr())
        }
    }
    /// Stores the first `n` lanes at `p` (`n < LANES`; only those are written).
    ///
    /// # Safety
    /// The CPU must support the type's instruction set; `n < LANES`; `p` must be valid for
    /// writing `n` elements and aligned for `Elem`.
    #[inline(always)]
    unsafe fn store_first(self, p: *mut Self::Elem, n: usize) {
        // SAFETY: `store` writes `LANES <= MAX_LANES` elements (the implementors' contract)
        // into the local `buf`, on a CPU the caller guarantees supports the instruction set;
        // the copy then reads `n < LANES` of them and writes `n` elements at `p`, which the
        // caller guarantees is valid for that, and a local buffer cannot overlap `p`'s storage.
        unsafe {
            let mut buf = [Self::Elem::ZERO; MAX_LANES];
            debug_assert!(n < Self::LANES && Self::LANES <= MAX_LANES);
            self.store(buf.as_mut_ptr());
            std::ptr::copy_nonoverlapping(buf.as_ptr(), p, n);
        }
    }
    /// Sum of the lanes (fixed pairwise order).
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    unsafe fn reduce_sum(self) -> Self::Elem;
    /// Maximum of the lanes.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    unsafe fn reduce_max(self) -> Self::Elem;

    /// One term of a compensated dot product (Ogita, Rump and Oishi's `Dot2`): the product
    /// `self·b` split exactly into `p + π` (`π = fma(self, b, −p)`), `p` added to the running
    /// sum `s` with its rounding error `σ` recovered exactly (Knuth's TwoSum), and `σ + π`
    /// gathered in `e`. After the last term `s + e`, rounded once, is the sum as if formed in
    /// twice the precision: error ≤ `u·|Σ| + γₙ²·Σ|a·b|`. Ten operations per term (a plain
    /// fused multiply-add chain has one); exact only where `fma` is fused (every SIMD type, and
    /// `mul_add` on the scalar lane). docs/design.md §3c.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    #[inline(always)]
    unsafe fn dot2_step(self, b: Self, s: &mut Self, e: &mut Self) {
        // SAFETY: register arithmetic only; the caller guarantees the instruction set.
        unsafe {
            let p = self.mul(b);
            let pe = self.fma(b, Self::splat(Self::Elem::ZERO).sub(p));
            let t = s.add(p);
            let z = t.sub(*s);
            let se = s.sub(t.sub(z)).add(p.sub(z));
            *s = t;
            *e = e.add(se.add(pe));
        }
    }

    /// Lane-wise eˣ: `n = round(x·log₂e)`, `r = x − n·ln2_hi − n·ln2_lo` (|r| ≤ ln2/2),
    /// eʳ by a Taylor polynomial (degree 7 for f32, 13 for f64), then `eʳ·2ⁿ` by [`SimdVec::ldexp`]
    /// so that results underflow gradually and overflow to +∞. Inputs are clamped to
    /// `[EXP_LO, EXP_HI]` first, so −∞ gives exactly 0, +∞ gives +∞; NaN stays NaN.
    /// Measured maximum relative error against `std` exp over normal results: below 2 ulp
    /// (see the tests in `simd::tests`). [`SimdVec::exp_each`] with one vector.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    #[inline(always)]
    unsafe fn exp(self) -> Self {
        // SAFETY: register arithmetic only; the caller guarantees the instruction set.
        unsafe { Self::exp_each([self])[0] }
    }

    /// [`SimdVec::exp`] of `K` vectors, formed step by step side by side: each lane goes through
    /// exactly the operations of `exp` (so the same bits), but the `K` polynomials' chains of
    /// dependent multiply-adds are interleaved in the instruction stream. One exponential at a
    /// time, the out-of-order window holds too few whole chains (about 50 cycles of latency
    /// each) to keep the multiply-add units busy; a softmax over a column or row of scores has
    /// many independent ones. Types whose `exp` is not this polynomial override both.
    ///
    /// # Safety
    /// The CPU must support the type's instruction set.
    #[inline(always)]
    unsafe fn exp_each<const K: usize>(v: [Self; K]) -> [Self; K] {
        // SAFETY: register arithmetic only (no memory access); the caller guarantees the CPU
        // supports the type's instruction set, which is all these methods need.
        unsafe {
            let e = Self::Elem::EXP_COEF;
            let (mut n, mut r) = (v, v);
            for t in 0..K {
                // max(lo, x) keeps a NaN x (second operand); min(hi, ·) likewise.
                let x =
                    Self::splat(Self::Elem::EXP_HI).min(Self::splat(Self::Elem::EXP_LO).max(v[t]));
                n[t] = x.mul(Self::splat(Self::Elem::LOG2E)).round();
                let rh = n[t].fma(Self::splat(-Self::Elem::LN2_HI), x);
                r[t] = n[t].fma(Self::splat(-Self::Elem::LN2_LO), rh);
            }
            let mut p = [Self::splat(e[0]); K];
            for &c in &e[1..] {
                for t in 0..K {
                    p[t] = p[t].fma(r[t], Self::splat(c));
                }
            }
            for t in 0..K {
                p[t] = p[t].ldexp(n[t]);
            }
            p
        }
    }
}

/// The one-lane "vector": the scalar path, always compiled, using the same algorithms.
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub struct Lane<T>(pub T);

macro_rules! impl_lane {
    ($t:ident, $bits:ident, $mbits:expr, $bias:expr) => {
        // SAFETY: plain scalar code, valid on every CPU (no instruction-set requirement);
        // `LANES = 1 <= MAX_LANES`, and `load`/`store` access exactly the one element at `p`.
        unsafe impl SimdVec for Lane<$t> {
            type Elem = $t;
            const LANES: usize = 1;
            #[inline(always)]
            unsafe fn splat(x: $t) -> Self {
                Lane(x)
            }
            #[inline(always)]
            unsafe fn load(p: *const $t) -> Self {
                // SAFETY: the caller guarantees `p` is valid for reading `LANES = 1` element
                // and aligned for `$t` (the `# Safety` contract of `load`).
                Lane(unsafe { *p })
            }
            #[inline(always)]
            unsafe fn store(self, p: *mut $t) {
                // SAFETY: the caller guarantees `p` is valid for writing `LANES = 1` element
                // and aligned for `$t` (the `# Safety` contract of `store`).
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
            #[inline(always)]
            unsafe fn round(self) -> Self {
                Lane(self.0.round_ties_even())
            }
            #[inline(always)]
            unsafe fn floor(self) -> Self {
                Lane(self.0.floor())
            }
            #[inline(always)]
            unsafe fn pow2i(self) -> Self {
                let n = self.0 as i64 + $bias;
                Lane($t::from_bits((n as $bits) << $mbits))
            }
            #[inline(always)]
            unsafe fn reduce_sum(self) -> $t {
                self.0
            }
            #[inline(always)]
            unsafe fn reduce_max(self) -> $t {
                self.0
            }
        }
    };
}

impl_lane!(f32, u32, 23, 127);
impl_lane!(f64, u64, 52, 1023);

#[cfg(target_arch = "x86_64")]
pub use x86::{Avx2F32, Avx2F64, Avx512F32, Avx512F64};

// AVX-512 intrinsics are stable since Rust 1.89 (the workspace's declared MSRV is older).
#[cfg(target_arch = "x86_64")]
#[allow(clippy::incompatible_msrv)]
mod x86;
