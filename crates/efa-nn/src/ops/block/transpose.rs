//! The transposes of the attention's operands (`Kᵀ` for the scores, `Vᵀ` for `dP`): a head's
//! columns of a row-major matrix into the rows of a padded buffer. Only data moves, so every
//! path gives the same values.

use super::rows::Rows;
use efa_attn::micro::padded;
use efa_num::simd::{elem_kind, ElemKind, Isa};
use efa_num::Real;

/// Transposes rows `[0, rows)`, columns `[c0, c0 + w)` of `src` into `dst` (`w × ldd`), zeroing
/// columns `[rows, ldd)`. With AVX-512, `f32` and `w = 16` (the temperature model's heads),
/// 16 × 16 tiles are transposed in registers; otherwise four source rows at a time.
///
/// # Panics
/// If `src` or `dst` is too short, or `ldd < rows`.
pub(super) fn transpose_block<T: Real>(
    isa: Isa,
    src: Rows<T>,
    c0: usize,
    w: usize,
    rows: usize,
    dst: &mut [T],
    ldd: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512
        && isa.is_supported()
        && elem_kind::<T>() == ElemKind::F32
        && w == 16
        && padded(rows) <= ldd
    {
        assert!(
            dst.len() >= w * ldd && (rows == 0 || (rows - 1) * src.ld + c0 + w <= src.data.len()),
            "transpose_block: sizes"
        );
        // SAFETY: AVX-512F is supported; T is f32 (so the casts keep the layout); the assert
        // keeps every source row read (`c0 + 16` columns of rows below `rows`) inside `src`, and
        // every destination row's `padded(rows) ≤ ldd` entries inside `dst`.
        unsafe {
            tiles16(
                src.data.as_ptr().cast::<f32>().add(c0),
                src.ld,
                rows,
                dst.as_mut_ptr().cast::<f32>(),
                ldd,
            );
        }
        for d in dst[..w * ldd].chunks_exact_mut(ldd) {
            d[padded(rows)..].fill(T::ZERO);
        }
        return;
    }
    let _ = isa;
    transpose_rows(src, c0, w, rows, dst, ldd);
}

/// The 16 columns at `src` (row stride `lds`, `rows` rows) into 16 rows of `dst` (stride `ldd`),
/// 16 source rows per tile; rows from `rows` up to the next multiple of 16 read as zeros.
///
/// # Safety
/// AVX-512F must be supported; `src` valid for 16 columns of `rows` rows, `dst` for 16 rows of
/// `padded(rows)` entries.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tiles16(src: *const f32, lds: usize, rows: usize, dst: *mut f32, ldd: usize) {
    use std::arch::x86_64::*;
    unsafe {
        let mut r0 = 0;
        while r0 < rows {
            let mut r = [_mm512_setzero_ps(); 16];
            for (i, v) in r.iter_mut().enumerate() {
                if r0 + i < rows {
                    *v = _mm512_loadu_ps(src.add((r0 + i) * lds));
                }
            }
            // Pairs of rows interleaved, then 64-bit pairs: u[q + 4g] holds, in 128-bit lane L,
            // column 4L + q of rows 4g .. 4g + 4.
            let mut u = [_mm512_setzero_ps(); 16];
            for g in 0..4 {
                let (a, b, c, d) = (r[4 * g], r[4 * g + 1], r[4 * g + 2], r[4 * g + 3]);
                let (t0, t1) = (_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
                let (t2, t3) = (_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
                u[4 * g] = _mm512_shuffle_ps::<0x44>(t0, t2);
                u[4 * g + 1] = _mm512_shuffle_ps::<0xEE>(t0, t2);
                u[4 * g + 2] = _mm512_shuffle_ps::<0x44>(t1, t3);
                u[4 * g + 3] = _mm512_shuffle_ps::<0xEE>(t1, t3);
            }
            // 128-bit lanes gathered: column q, q + 4, q + 8, q + 12 of all 16 rows.
            for q in 0..4 {
                let a = _mm512_shuffle_f32x4::<0x88>(u[q], u[q + 4]);
                let b = _mm512_shuffle_f32x4::<0xDD>(u[q], u[q + 4]);
                let c = _mm512_shuffle_f32x4::<0x88>(u[q + 8], u[q + 12]);
                let d = _mm512_shuffle_f32x4::<0xDD>(u[q + 8], u[q + 12]);
                let out = |col: usize| dst.add(col * ldd + r0);
                _mm512_storeu_ps(out(q), _mm512_shuffle_f32x4::<0x88>(a, c));
                _mm512_storeu_ps(out(q + 8), _mm512_shuffle_f32x4::<0xDD>(a, c));
                _mm512_storeu_ps(out(q + 4), _mm512_shuffle_f32x4::<0x88>(b, d));
                _mm512_storeu_ps(out(q + 12), _mm512_shuffle_f32x4::<0xDD>(b, d));
            }
            r0 += 16;
        }
    }
}

/// [`transpose_block`] element by element: transposes rows `[0, rows)`, columns `[c0, c0 + w)` of `src` into `dst` (`w × ldd`), zeroing
/// columns `[rows, ldd)`.
fn transpose_rows<T: Real>(
    src: Rows<T>,
    c0: usize,
    w: usize,
    rows: usize,
    dst: &mut [T],
    ldd: usize,
) {
    if w == 0 {
        return;
    }
    // Four source rows at a time: each destination row receives four consecutive entries per
    // pass, and every source row is read contiguously.
    let dst = &mut dst[..w * ldd];
    let mut r = 0;
    while r + 4 <= rows {
        let row = |i: usize| &src.data[(r + i) * src.ld + c0..][..w];
        let (s0, s1, s2, s3) = (row(0), row(1), row(2), row(3));
        for (c, d) in dst.chunks_exact_mut(ldd).enumerate() {
            let d = &mut d[r..r + 4];
            d[0] = s0[c];
            d[1] = s1[c];
            d[2] = s2[c];
            d[3] = s3[c];
        }
        r += 4;
    }
    for r in r..rows {
        let s = &src.data[r * src.ld + c0..][..w];
        for (d, &x) in dst.chunks_exact_mut(ldd).zip(s) {
            d[r] = x;
        }
    }
    for d in dst.chunks_exact_mut(ldd) {
        d[rows..].fill(T::ZERO);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check<T: Real>() {
        for isa in Isa::ALL {
            for rows in (0..=20).chain([31, 32, 33, 44, 47, 48, 50]) {
                for (c0, w) in [(0, 0), (0, 1), (3, 5), (0, 16), (16, 16), (5, 16), (2, 17)] {
                    for extra in [0, 16] {
                        let ld = c0 + w + 3;
                        let src: Vec<T> = (0..rows * ld)
                            .map(|i| T::from_f64(i as f64 * 0.5 - 7.0))
                            .collect();
                        let ldd = padded(rows.max(1)) + extra;
                        let mut got = vec![T::from_f64(f64::NAN); w * ldd];
                        transpose_block(isa, Rows { data: &src, ld }, c0, w, rows, &mut got, ldd);
                        for c in 0..w {
                            for r in 0..ldd {
                                let want = if r < rows {
                                    src[r * ld + c0 + c]
                                } else {
                                    T::ZERO
                                };
                                assert!(
                                    got[c * ldd + r].to_f64().to_bits() == want.to_f64().to_bits(),
                                    "{isa:?} rows {rows} c0 {c0} w {w} ldd {ldd} at {c},{r}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Both paths against the element-by-element definition: every instruction set, f32
    /// (the register tiles for 16 columns) and f64, rows that leave partial tiles, an offset
    /// column range and padding that must be zeroed.
    #[test]
    fn transpose_block_matches_the_definition() {
        check::<f32>();
        check::<f64>();
    }
}
