//! Row kernels on small blocks, one dispatch per block instead of one per row: scaled copies
//! of accumulator rows into an output, and the row dot products of two strided matrices.

use efa_num::simd::{Isa, SimdVec};
use efa_num::{simd_by_kind, simd_variants, Real};
use std::mem::MaybeUninit;

#[inline(always)]
unsafe fn scale_rows_body<V: SimdVec>(
    rows: usize,
    n: usize,
    src: *const V::Elem,
    w: usize,
    alpha: V::Elem,
    dst: *mut V::Elem,
) {
    // SAFETY: the dispatcher's caller (`scale_rows`) guarantees `V`'s instruction set and that
    // `src` holds rows of `n ≤ w` elements at stride `w` and `dst` `rows·n` elements; row `r`
    // reads `src[r·w + j]` and writes `dst[r·n + j]` for `j < n` only (vectors while
    // `j + lanes ≤ n`, then single elements while `j < n`).
    unsafe {
        let lanes = V::LANES;
        let va = V::splat(alpha);
        if w == n {
            // Contiguous rows: one run of `rows·n` elements, four vectors a step.
            let len = rows * n;
            let mut j = 0;
            while j + 4 * lanes <= len {
                for t in 0..4 {
                    let at = j + t * lanes;
                    va.mul(V::load(src.add(at))).store(dst.add(at));
                }
                j += 4 * lanes;
            }
            while j + lanes <= len {
                va.mul(V::load(src.add(j))).store(dst.add(j));
                j += lanes;
            }
            while j < len {
                *dst.add(j) = alpha * *src.add(j);
                j += 1;
            }
            return;
        }
        for r in 0..rows {
            let (s, d) = (src.add(r * w), dst.add(r * n));
            let mut j = 0;
            while j + lanes <= n {
                va.mul(V::load(s.add(j))).store(d.add(j));
                j += lanes;
            }
            while j < n {
                *d.add(j) = alpha * *s.add(j);
                j += 1;
            }
        }
    }
}
simd_variants!(scale_rows_body, scale_rows_d, (rows: usize, n: usize, src: *const E, w: usize, alpha: E, dst: *mut E) -> ());

/// `dst[r·n + c] = alpha·src[r·w + c]` for `r < rows`, `c < n` (every element of `dst`'s first
/// `rows·n` written; one multiplication each, so any variant gives the same bits).
///
/// # Panics
/// If `src` or `dst` is too short, or `w < n`.
pub fn scale_rows<T: Real>(
    isa: Isa,
    rows: usize,
    n: usize,
    src: &[T],
    w: usize,
    alpha: T,
    dst: &mut [MaybeUninit<T>],
) {
    if rows == 0 || n == 0 {
        return;
    }
    assert!(w >= n && src.len() >= (rows - 1) * w + n && dst.len() >= rows * n);
    // A variant the CPU lacks runs as the scalar path.
    let isa = isa.or_scalar();
    // SAFETY: the assert keeps every read inside `src` and every write inside `dst`; writing
    // initialised values into `MaybeUninit` storage is sound; `isa` is supported (`or_scalar`
    // above).
    simd_by_kind!(T, E => unsafe {
        scale_rows_d::<E>(isa, rows, n, src.as_ptr().cast(), w, *(&alpha as *const T).cast::<E>(),
            dst.as_mut_ptr().cast())
    })
}

#[inline(always)]
unsafe fn dot_rows_body<V: SimdVec>(
    (rows, n): (usize, usize),
    (a, rsa): (*const V::Elem, isize),
    (b, rsb): (*const V::Elem, isize),
    out: *mut V::Elem,
) {
    // SAFETY: the dispatcher's caller (`dot_rows`) guarantees `V`'s instruction set, that row
    // `r < rows` of `a` and `b` (at `r·rsa`, `r·rsb`) is valid for `n` elements — what
    // `dot_body` needs — and that `out` holds `rows` elements.
    unsafe {
        for r in 0..rows {
            let (x, y) = (a.offset(r as isize * rsa), b.offset(r as isize * rsb));
            // dot_with's own body: the same bits.
            *out.add(r) = efa_num::simd::bodies::dot_body::<V>(x, y, n);
        }
    }
}
simd_variants!(dot_rows_body, dot_rows_d, (shape: (usize, usize), a: (*const E, isize),
    b: (*const E, isize), out: *mut E) -> ());

/// `out[r] = Σ_c a[r·rsa + c]·b[r·rsb + c]` for `r < out.len()`, `c < n` (rows of `n`
/// contiguous elements), bit for bit what `efa_num::simd::dot_with(isa, ·, ·)` gives on each
/// row pair.
///
/// # Safety
/// For every `r < out.len()`, `a + r·rsa` and `b + r·rsb` are valid for `n` elements; `isa`
/// is supported.
pub unsafe fn dot_rows<T: Real>(
    isa: Isa,
    n: usize,
    (a, rsa): (*const T, isize),
    (b, rsb): (*const T, isize),
    out: &mut [T],
) {
    // SAFETY: the caller guarantees `isa` is supported and the rows of `a`, `b` for every
    // `r < out.len()` (this function's contract); `out` is a slice of `out.len()` elements;
    // `E` is `T` itself, so the casts keep type and alignment.
    simd_by_kind!(T, E => unsafe {
        dot_rows_d::<E>(isa, (out.len(), n), (a.cast(), rsa), (b.cast(), rsb), out.as_mut_ptr().cast())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data<T: Real>(n: usize, seed: u64) -> Vec<T> {
        efa_check::unit_values(seed)
            .take(n)
            .map(|u| T::from_f64(u * 2.0 - 1.0))
            .collect()
    }

    /// Every variant of the row dot products gives the bits of `dot_with` on each row pair,
    /// for widths around the lane counts and strided rows.
    fn dot_rows_case<T: Real>() {
        for isa in Isa::ALL {
            if !isa.is_supported() {
                continue;
            }
            for n in [0, 1, 3, 4, 8, 15, 16, 17, 31, 64, 70] {
                let rows = 7;
                let (rsa, rsb) = (n + 3, 2 * n + 1);
                let a = data::<T>(rows * rsa + n, 1 + n as u64);
                let b = data::<T>(rows * rsb + n, 2 + n as u64);
                let mut out = vec![T::NAN; rows];
                // SAFETY: rows·rs + n elements cover every row read.
                unsafe {
                    dot_rows(
                        isa,
                        n,
                        (a.as_ptr(), rsa as isize),
                        (b.as_ptr(), rsb as isize),
                        &mut out,
                    )
                };
                for (r, &x) in out.iter().enumerate() {
                    let want = efa_num::simd::dot_with(
                        isa,
                        &a[r * rsa..r * rsa + n],
                        &b[r * rsb..r * rsb + n],
                    );
                    assert_eq!(
                        x.to_f64().to_bits(),
                        want.to_f64().to_bits(),
                        "{isa:?} {} n{n} row {r}",
                        T::NAME
                    );
                }
            }
        }
    }

    #[test]
    fn dot_rows_has_the_bits_of_dot_with() {
        dot_rows_case::<f32>();
        dot_rows_case::<f64>();
    }

    fn scale_rows_case<T: Real>() {
        for isa in Isa::ALL {
            if !isa.is_supported() {
                continue;
            }
            for (rows, n, w) in [(0, 4, 16), (3, 0, 16), (5, 16, 16), (4, 5, 16), (6, 33, 48)] {
                let src = data::<T>(rows * w, 9 + n as u64);
                let alpha = T::from_f64(0.37);
                let mut dst = vec![MaybeUninit::new(T::NAN); rows * n + 3];
                scale_rows(isa, rows, n, &src, w, alpha, &mut dst);
                for r in 0..rows {
                    for c in 0..n {
                        // SAFETY: every element was initialised (NaN, then the kernel's value).
                        let got = unsafe { dst[r * n + c].assume_init() };
                        let want = alpha * src[r * w + c];
                        assert_eq!(got.to_f64().to_bits(), want.to_f64().to_bits(), "{isa:?}");
                    }
                }
                for x in &dst[rows * n..] {
                    // SAFETY: as above; the elements past rows·n keep their NaN.
                    assert!(unsafe { x.assume_init() }.is_nan(), "wrote past rows·n");
                }
            }
        }
    }

    #[test]
    fn scale_rows_every_variant() {
        scale_rows_case::<f32>();
        scale_rows_case::<f64>();
    }
}
