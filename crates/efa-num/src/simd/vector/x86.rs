//! The AVX2 (`__m256`, `__m256d`) and AVX-512 (`__m512`, `__m512d`) implementations of
//! [`SimdVec`].

use super::SimdVec;
use std::arch::x86_64::*;

const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
const DOWN: i32 = _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC;

/// Eight f32 lanes in an AVX2 register (needs AVX2 + FMA).
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub struct Avx2F32(pub __m256);
/// Four f64 lanes in an AVX2 register (needs AVX2 + FMA).
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub struct Avx2F64(pub __m256d);
/// Sixteen f32 lanes in an AVX-512 register (needs AVX-512F).
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub struct Avx512F32(pub __m512);
/// Eight f64 lanes in an AVX-512 register (needs AVX-512F).
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub struct Avx512F64(pub __m512d);

macro_rules! common {
    ($w:ident, $t:ident, $n:expr, $set1:ident, $add:ident,
     $sub:ident, $mul:ident, $div:ident, $fma:ident, $max:ident, $min:ident) => {
        type Elem = $t;
        const LANES: usize = $n;
        #[inline(always)]
        unsafe fn splat(x: $t) -> Self {
            // SAFETY: a broadcast of the type's instruction set, on a CPU the caller
            // guarantees supports it (the trait's contract); no memory access.
            unsafe { $w($set1(x)) }
        }
        #[inline(always)]
        unsafe fn load(p: *const $t) -> Self {
            // SAFETY: the caller guarantees `p` is valid for reading `LANES = $n` elements,
            // the bytes of one `Self` (a transparent wrapper of the register type, any bit
            // pattern valid), read with no alignment requirement (the `# Safety` contract of
            // `load`). A plain unaligned read rather than the `loadu` intrinsic: with debug
            // assertions on, the intrinsic's body carries checks that can keep the optimiser
            // from inlining it, leaving a call per load; this read is inlined here, in the
            // caller's instruction set, as the same unaligned vector load.
            unsafe { p.cast::<Self>().read_unaligned() }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut $t) {
            // SAFETY: the caller guarantees `p` is valid for writing `LANES = $n` elements,
            // the bytes of one `Self`, written with no alignment requirement (the `# Safety`
            // contract of `store`; a plain unaligned write, as `load` reads).
            unsafe { p.cast::<Self>().write_unaligned(self) }
        }
        #[inline(always)]
        unsafe fn add(self, b: Self) -> Self {
            // SAFETY: register arithmetic of the type's instruction set, on a CPU the
            // caller guarantees supports it (the trait's contract); no memory access.
            unsafe { $w($add(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn sub(self, b: Self) -> Self {
            // SAFETY: register arithmetic of the type's instruction set, on a CPU the
            // caller guarantees supports it (the trait's contract); no memory access.
            unsafe { $w($sub(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn mul(self, b: Self) -> Self {
            // SAFETY: register arithmetic of the type's instruction set, on a CPU the
            // caller guarantees supports it (the trait's contract); no memory access.
            unsafe { $w($mul(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn div(self, b: Self) -> Self {
            // SAFETY: register arithmetic of the type's instruction set, on a CPU the
            // caller guarantees supports it (the trait's contract); no memory access.
            unsafe { $w($div(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn fma(self, b: Self, c: Self) -> Self {
            // SAFETY: register arithmetic of the type's instruction set, on a CPU the
            // caller guarantees supports it (the trait's contract); no memory access.
            unsafe { $w($fma(self.0, b.0, c.0)) }
        }
        #[inline(always)]
        unsafe fn max(self, b: Self) -> Self {
            // SAFETY: register arithmetic of the type's instruction set, on a CPU the
            // caller guarantees supports it (the trait's contract); no memory access.
            unsafe { $w($max(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn min(self, b: Self) -> Self {
            // SAFETY: register arithmetic of the type's instruction set, on a CPU the
            // caller guarantees supports it (the trait's contract); no memory access.
            unsafe { $w($min(self.0, b.0)) }
        }
    };
}

/// Reduces an array of lanes pairwise (halving), a fixed order for every call.
macro_rules! reduce {
    ($v:expr, $t:ident, $n:expr, $op:expr) => {{
        // SAFETY: every use passes a register of exactly `$n` lanes of `$t` (`__m256` as
        // 8 × f32, `__m256d` as 4 × f64, `__m512` as 16 × f32, `__m512d` as 8 × f64), so
        // the sizes match, and every bit pattern is a valid `$t`.
        let mut a: [$t; $n] = unsafe { std::mem::transmute($v) };
        let mut w = $n;
        while w > 1 {
            w /= 2;
            for i in 0..w {
                a[i] = $op(a[i], a[i + w]);
            }
        }
        a[0]
    }};
}

fn fmax32(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}
fn fmax64(a: f64, b: f64) -> f64 {
    if a > b {
        a
    } else {
        b
    }
}

/// The mask of the first `n < 8` 32-bit lanes (all bits set in each), for AVX2's masked loads
/// and stores.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn first_lanes32(n: usize) -> __m256i {
    // SAFETY: AVX/AVX2 register instructions on a CPU the caller guarantees supports AVX2;
    // `n < 8` fits in an `i32`.
    unsafe {
        _mm256_cmpgt_epi32(
            _mm256_set1_epi32(n as i32),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        )
    }
}

/// The mask of the first `n < 4` 64-bit lanes, as [`first_lanes32`].
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn first_lanes64(n: usize) -> __m256i {
    // SAFETY: AVX/AVX2 register instructions on a CPU the caller guarantees supports AVX2;
    // `n < 4` fits in an `i64`.
    unsafe { _mm256_cmpgt_epi64(_mm256_set1_epi64x(n as i64), _mm256_setr_epi64x(0, 1, 2, 3)) }
}

// SAFETY: only AVX, AVX2 and FMA instructions (the "AVX2 + FMA" set the type needs);
// `LANES = 8 <= MAX_LANES`; `load`/`store` access exactly the 8 f32 at the pointer, the masked
// `_first` forms only the first `n`.
unsafe impl SimdVec for Avx2F32 {
    common!(
        Avx2F32,
        f32,
        8,
        _mm256_set1_ps,
        _mm256_add_ps,
        _mm256_sub_ps,
        _mm256_mul_ps,
        _mm256_div_ps,
        _mm256_fmadd_ps,
        _mm256_max_ps,
        _mm256_min_ps
    );
    #[inline(always)]
    unsafe fn round(self) -> Self {
        // SAFETY: an AVX rounding instruction (part of the AVX2 + FMA set the caller
        // guarantees the CPU supports); no memory access.
        unsafe { Avx2F32(_mm256_round_ps::<NEAREST>(self.0)) }
    }
    #[inline(always)]
    unsafe fn floor(self) -> Self {
        // SAFETY: an AVX rounding instruction (part of the AVX2 + FMA set the caller
        // guarantees the CPU supports); no memory access.
        unsafe { Avx2F32(_mm256_round_ps::<DOWN>(self.0)) }
    }
    #[inline(always)]
    unsafe fn pow2i(self) -> Self {
        // SAFETY: AVX and AVX2 integer/conversion instructions, on a CPU the caller
        // guarantees supports AVX2 + FMA; register arithmetic only.
        unsafe {
            let n = _mm256_add_epi32(_mm256_cvtps_epi32(self.0), _mm256_set1_epi32(127));
            Avx2F32(_mm256_castsi256_ps(_mm256_slli_epi32::<23>(n)))
        }
    }
    #[inline(always)]
    unsafe fn ldexp(self, n: Self) -> Self {
        // The default's two steps with the exponent split in integers: ⌊n/2⌋ is an arithmetic
        // shift of the converted `n` (exact: `n` is integral and far inside `i32`), where the
        // default forms it as a float product, a rounding and a second conversion.
        // SAFETY: AVX and AVX2 integer/conversion instructions, on a CPU the caller
        // guarantees supports AVX2 + FMA; register arithmetic only.
        unsafe {
            let ni = _mm256_cvtps_epi32(n.0);
            let n1 = _mm256_srai_epi32::<1>(ni);
            let n2 = _mm256_sub_epi32(ni, n1);
            let bias = _mm256_set1_epi32(127);
            let s1 = _mm256_slli_epi32::<23>(_mm256_add_epi32(n1, bias));
            let s2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(n2, bias));
            let x = _mm256_mul_ps(self.0, _mm256_castsi256_ps(s1));
            Avx2F32(_mm256_mul_ps(x, _mm256_castsi256_ps(s2)))
        }
    }
    #[inline(always)]
    unsafe fn load_first(p: *const f32, n: usize, fill: f32) -> Self {
        // SAFETY: AVX/AVX2 instructions on a CPU the caller guarantees supports them; the
        // masked load reads only lanes `0..n` (masked-off lanes are neither read nor can they
        // fault), which the caller guarantees are valid at `p`.
        unsafe {
            let k = first_lanes32(n);
            let x = _mm256_maskload_ps(p, k);
            Avx2F32(_mm256_blendv_ps(
                _mm256_set1_ps(fill),
                x,
                _mm256_castsi256_ps(k),
            ))
        }
    }
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, n: usize) {
        // SAFETY: as `load_first`: the masked store writes only lanes `0..n`, which the
        // caller guarantees are valid at `p`.
        unsafe {
            let k = first_lanes32(n);
            _mm256_maskstore_ps(p, k, self.0)
        }
    }
    #[inline(always)]
    unsafe fn reduce_sum(self) -> f32 {
        reduce!(self.0, f32, 8, |a: f32, b: f32| a + b)
    }
    #[inline(always)]
    unsafe fn reduce_max(self) -> f32 {
        reduce!(self.0, f32, 8, fmax32)
    }
}

// SAFETY: only AVX, AVX2 and FMA instructions (the "AVX2 + FMA" set the type needs);
// `LANES = 4 <= MAX_LANES`; `load`/`store` access exactly the 4 f64 at the pointer, the masked
// `_first` forms only the first `n`.
unsafe impl SimdVec for Avx2F64 {
    common!(
        Avx2F64,
        f64,
        4,
        _mm256_set1_pd,
        _mm256_add_pd,
        _mm256_sub_pd,
        _mm256_mul_pd,
        _mm256_div_pd,
        _mm256_fmadd_pd,
        _mm256_max_pd,
        _mm256_min_pd
    );
    #[inline(always)]
    unsafe fn round(self) -> Self {
        // SAFETY: an AVX rounding instruction (part of the AVX2 + FMA set the caller
        // guarantees the CPU supports); no memory access.
        unsafe { Avx2F64(_mm256_round_pd::<NEAREST>(self.0)) }
    }
    #[inline(always)]
    unsafe fn floor(self) -> Self {
        // SAFETY: an AVX rounding instruction (part of the AVX2 + FMA set the caller
        // guarantees the CPU supports); no memory access.
        unsafe { Avx2F64(_mm256_round_pd::<DOWN>(self.0)) }
    }
    #[inline(always)]
    unsafe fn pow2i(self) -> Self {
        // SAFETY: AVX and AVX2 integer/conversion instructions, on a CPU the caller
        // guarantees supports AVX2 + FMA; register arithmetic only.
        unsafe {
            let n = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(self.0));
            let n = _mm256_add_epi64(n, _mm256_set1_epi64x(1023));
            Avx2F64(_mm256_castsi256_pd(_mm256_slli_epi64::<52>(n)))
        }
    }
    #[inline(always)]
    unsafe fn ldexp(self, n: Self) -> Self {
        // As `Avx2F32::ldexp`: the exponent split in (32-bit) integers.
        // SAFETY: AVX and AVX2 integer/conversion instructions, on a CPU the caller
        // guarantees supports AVX2 + FMA; register arithmetic only.
        unsafe {
            let ni = _mm256_cvtpd_epi32(n.0);
            let n1 = _mm_srai_epi32::<1>(ni);
            let n2 = _mm_sub_epi32(ni, n1);
            let bias = _mm256_set1_epi64x(1023);
            let s1 = _mm256_slli_epi64::<52>(_mm256_add_epi64(_mm256_cvtepi32_epi64(n1), bias));
            let s2 = _mm256_slli_epi64::<52>(_mm256_add_epi64(_mm256_cvtepi32_epi64(n2), bias));
            let x = _mm256_mul_pd(self.0, _mm256_castsi256_pd(s1));
            Avx2F64(_mm256_mul_pd(x, _mm256_castsi256_pd(s2)))
        }
    }
    #[inline(always)]
    unsafe fn load_first(p: *const f64, n: usize, fill: f64) -> Self {
        // SAFETY: AVX/AVX2 instructions on a CPU the caller guarantees supports them; the
        // masked load reads only lanes `0..n` (masked-off lanes are neither read nor can they
        // fault), which the caller guarantees are valid at `p`.
        unsafe {
            let k = first_lanes64(n);
            let x = _mm256_maskload_pd(p, k);
            Avx2F64(_mm256_blendv_pd(
                _mm256_set1_pd(fill),
                x,
                _mm256_castsi256_pd(k),
            ))
        }
    }
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f64, n: usize) {
        // SAFETY: as `load_first`: the masked store writes only lanes `0..n`, which the
        // caller guarantees are valid at `p`.
        unsafe {
            let k = first_lanes64(n);
            _mm256_maskstore_pd(p, k, self.0)
        }
    }
    #[inline(always)]
    unsafe fn reduce_sum(self) -> f64 {
        reduce!(self.0, f64, 4, |a: f64, b: f64| a + b)
    }
    #[inline(always)]
    unsafe fn reduce_max(self) -> f64 {
        reduce!(self.0, f64, 4, fmax64)
    }
}

// SAFETY: only AVX-512F instructions; `LANES = 16 <= MAX_LANES`; `load`/`store` access
// exactly the 16 f32 at the pointer, the masked `_first` forms only the first `n`.
unsafe impl SimdVec for Avx512F32 {
    common!(
        Avx512F32,
        f32,
        16,
        _mm512_set1_ps,
        _mm512_add_ps,
        _mm512_sub_ps,
        _mm512_mul_ps,
        _mm512_div_ps,
        _mm512_fmadd_ps,
        _mm512_max_ps,
        _mm512_min_ps
    );
    #[inline(always)]
    unsafe fn round(self) -> Self {
        // SAFETY: an AVX-512F instruction, on a CPU the caller guarantees supports
        // AVX-512F; no memory access.
        unsafe { Avx512F32(_mm512_roundscale_ps::<NEAREST>(self.0)) }
    }
    #[inline(always)]
    unsafe fn floor(self) -> Self {
        // SAFETY: an AVX-512F instruction, on a CPU the caller guarantees supports
        // AVX-512F; no memory access.
        unsafe { Avx512F32(_mm512_roundscale_ps::<DOWN>(self.0)) }
    }
    #[inline(always)]
    unsafe fn pow2i(self) -> Self {
        // SAFETY: AVX-512F integer/conversion instructions, on a CPU the caller guarantees
        // supports AVX-512F; register arithmetic only.
        unsafe {
            let n = _mm512_add_epi32(_mm512_cvtps_epi32(self.0), _mm512_set1_epi32(127));
            Avx512F32(_mm512_castsi512_ps(_mm512_slli_epi32::<23>(n)))
        }
    }
    #[inline(always)]
    unsafe fn ldexp(self, n: Self) -> Self {
        // SAFETY: an AVX-512F instruction, on a CPU the caller guarantees supports
        // AVX-512F; no memory access.
        unsafe { Avx512F32(_mm512_scalef_ps(self.0, n.0)) }
    }
    #[inline(always)]
    unsafe fn load_first(p: *const f32, n: usize, fill: f32) -> Self {
        // Masked-off lanes are not read (no fault past the end).
        let k = ((1u32 << n) - 1) as __mmask16;
        // SAFETY: the mask selects lanes `0..n`, and the caller guarantees `p` is valid for
        // reading those `n` elements and the CPU supports AVX-512F (the contract of
        // `load_first`); `n < 16`, so the shift above does not overflow.
        unsafe { Avx512F32(_mm512_mask_loadu_ps(_mm512_set1_ps(fill), k, p)) }
    }
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, n: usize) {
        let k = ((1u32 << n) - 1) as __mmask16;
        // SAFETY: the mask selects lanes `0..n`, and the caller guarantees `p` is valid for
        // writing those `n` elements and the CPU supports AVX-512F (the contract of
        // `store_first`); masked-off lanes are not written.
        unsafe { _mm512_mask_storeu_ps(p, k, self.0) }
    }
    #[inline(always)]
    unsafe fn reduce_sum(self) -> f32 {
        reduce!(self.0, f32, 16, |a: f32, b: f32| a + b)
    }
    #[inline(always)]
    unsafe fn reduce_max(self) -> f32 {
        reduce!(self.0, f32, 16, fmax32)
    }
}

// SAFETY: only AVX-512F instructions; `LANES = 8 <= MAX_LANES`; `load`/`store` access
// exactly the 8 f64 at the pointer, the masked `_first` forms only the first `n`.
unsafe impl SimdVec for Avx512F64 {
    common!(
        Avx512F64,
        f64,
        8,
        _mm512_set1_pd,
        _mm512_add_pd,
        _mm512_sub_pd,
        _mm512_mul_pd,
        _mm512_div_pd,
        _mm512_fmadd_pd,
        _mm512_max_pd,
        _mm512_min_pd
    );
    #[inline(always)]
    unsafe fn round(self) -> Self {
        // SAFETY: an AVX-512F instruction, on a CPU the caller guarantees supports
        // AVX-512F; no memory access.
        unsafe { Avx512F64(_mm512_roundscale_pd::<NEAREST>(self.0)) }
    }
    #[inline(always)]
    unsafe fn floor(self) -> Self {
        // SAFETY: an AVX-512F instruction, on a CPU the caller guarantees supports
        // AVX-512F; no memory access.
        unsafe { Avx512F64(_mm512_roundscale_pd::<DOWN>(self.0)) }
    }
    #[inline(always)]
    unsafe fn pow2i(self) -> Self {
        // SAFETY: AVX-512F integer/conversion instructions, on a CPU the caller guarantees
        // supports AVX-512F; register arithmetic only.
        unsafe {
            let n = _mm512_cvtepi32_epi64(_mm512_cvtpd_epi32(self.0));
            let n = _mm512_add_epi64(n, _mm512_set1_epi64(1023));
            Avx512F64(_mm512_castsi512_pd(_mm512_slli_epi64::<52>(n)))
        }
    }
    #[inline(always)]
    unsafe fn ldexp(self, n: Self) -> Self {
        // SAFETY: an AVX-512F instruction, on a CPU the caller guarantees supports
        // AVX-512F; no memory access.
        unsafe { Avx512F64(_mm512_scalef_pd(self.0, n.0)) }
    }
    #[inline(always)]
    unsafe fn load_first(p: *const f64, n: usize, fill: f64) -> Self {
        // Masked-off lanes are not read (no fault past the end).
        let k = ((1u32 << n) - 1) as __mmask8;
        // SAFETY: the mask selects lanes `0..n`, and the caller guarantees `p` is valid for
        // reading those `n` elements and the CPU supports AVX-512F (the contract of
        // `load_first`); `n < 8`, so the mask fits in `__mmask8`.
        unsafe { Avx512F64(_mm512_mask_loadu_pd(_mm512_set1_pd(fill), k, p)) }
    }
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f64, n: usize) {
        let k = ((1u32 << n) - 1) as __mmask8;
        // SAFETY: the mask selects lanes `0..n`, and the caller guarantees `p` is valid for
        // writing those `n` elements and the CPU supports AVX-512F (the contract of
        // `store_first`); masked-off lanes are not written.
        unsafe { _mm512_mask_storeu_pd(p, k, self.0) }
    }
    #[inline(always)]
    unsafe fn reduce_sum(self) -> f64 {
        reduce!(self.0, f64, 8, |a: f64, b: f64| a + b)
    }
    #[inline(always)]
    unsafe fn reduce_max(self) -> f64 {
        reduce!(self.0, f64, 8, fmax64)
    }
}
