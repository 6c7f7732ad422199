//! Rows of sixteen `f32` in one AVX-512 register: the dot product, `y + α·x` and `r·a + p·v`
//! of the shared-context attention kernels (`efa-nn`), with the bits of their generic row
//! loops at that width.

use std::arch::x86_64::*;

/// The dot product of two rows of sixteen `f32`, with the bits of `efa-nn`'s row `dot` for
/// them (eight accumulators from the two halves, `(0 + pₗ) + pₗ₊₈`, then its reduction tree).
///
/// # Safety
/// AVX-512F must be supported; `a` and `b` valid for 16 reads.
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn dot16(a: *const f32, b: *const f32) -> f32 {
    // SAFETY: the caller's contract (AVX-512F present, 16 elements at `a` and `b`).
    unsafe {
        let p = _mm512_mul_ps(_mm512_loadu_ps(a), _mm512_loadu_ps(b));
        let lo = _mm512_castps512_ps256(p);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(p)));
        // Lane l: (0 + p[l]) + p[l + 8], as two blocks of eight from zero.
        let acc = _mm256_add_ps(_mm256_add_ps(_mm256_setzero_ps(), lo), hi);
        // (a0 + a4, a1 + a5, a2 + a6, a3 + a7), then (b0 + b2, b1 + b3), then their sum.
        let b4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps::<1>(acc));
        let c2 = _mm_add_ps(b4, _mm_movehl_ps(b4, b4));
        let d = _mm_add_ss(c2, _mm_shuffle_ps::<0b01>(c2, c2));
        // `+ tail` with no tail: 0.
        _mm_cvtss_f32(d) + 0.0
    }
}

/// `out = r·a + p·v` on sixteen `f32` (two products, then their sum).
///
/// # Safety
/// AVX-512F must be supported; `a`, `v` valid for 16 reads, `out` for 16 writes.
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn mix16((r, a): (f32, *const f32), (p, v): (f32, *const f32), out: *mut f32) {
    // SAFETY: the caller's contract (AVX-512F present, 16 elements at `a`, `v`, `out`).
    unsafe {
        let ra = _mm512_mul_ps(_mm512_set1_ps(r), _mm512_loadu_ps(a));
        let pv = _mm512_mul_ps(_mm512_set1_ps(p), _mm512_loadu_ps(v));
        _mm512_storeu_ps(out, _mm512_add_ps(ra, pv));
    }
}

/// `y ← y + α·x` on sixteen `f32` (a product, then a sum).
///
/// # Safety
/// AVX-512F must be supported; `x` valid for 16 reads, `y` for 16 reads and writes.
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn axpy16(alpha: f32, x: *const f32, y: *mut f32) {
    // SAFETY: the caller's contract (AVX-512F present, 16 elements at `x` and `y`).
    unsafe {
        let v = _mm512_add_ps(
            _mm512_loadu_ps(y),
            _mm512_mul_ps(_mm512_set1_ps(alpha), _mm512_loadu_ps(x)),
        );
        _mm512_storeu_ps(y, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> ([f32; 16], [f32; 16], [f32; 16]) {
        let f = |k: f32| std::array::from_fn(|i| ((i as f32 + k) * 0.618_034).fract() * 3.0 - 1.5);
        (f(0.3), f(1.7), f(2.9))
    }

    /// Each kernel against its scalar definition written out, bit for bit (where the CPU has
    /// AVX-512F; elsewhere nothing runs them).
    #[test]
    fn the_avx512_rows_give_the_bits_of_the_scalar_order() {
        if !is_x86_feature_detected!("avx512f") {
            return;
        }
        let (a, b, v) = rows();
        let p: [f32; 16] = std::array::from_fn(|i| a[i] * b[i]);
        let acc: [f32; 8] = std::array::from_fn(|l| (0.0 + p[l]) + p[l + 8]);
        let b4: [f32; 4] = std::array::from_fn(|i| acc[i] + acc[i + 4]);
        let c2: [f32; 2] = std::array::from_fn(|i| b4[i] + b4[i + 2]);
        let want = (c2[0] + c2[1]) + 0.0;
        // SAFETY: AVX-512F is present (checked above); every row holds 16.
        let got = unsafe { dot16(a.as_ptr(), b.as_ptr()) };
        assert_eq!(got.to_bits(), want.to_bits());
        let (r, q) = (0.37f32, -1.25f32);
        let mut out = [0f32; 16];
        // SAFETY: as above.
        unsafe { mix16((r, a.as_ptr()), (q, v.as_ptr()), out.as_mut_ptr()) };
        for i in 0..16 {
            assert_eq!(
                out[i].to_bits(),
                (r * a[i] + q * v[i]).to_bits(),
                "mix16 {i}"
            );
        }
        let mut y = b;
        // SAFETY: as above.
        unsafe { axpy16(r, a.as_ptr(), y.as_mut_ptr()) };
        for i in 0..16 {
            assert_eq!(y[i].to_bits(), (b[i] + r * a[i]).to_bits(), "axpy16 {i}");
        }
    }
}
