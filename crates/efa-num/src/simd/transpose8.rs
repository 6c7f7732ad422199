//! A masked 8 × 8 transpose of `f32` (AVX2): the lane-batched attention's packing on cores
//! without AVX-512 (`efa-attn`), eight rows of up to eight elements at a time.

use std::arch::x86_64::*;

/// The lanes `l < n` of a 256-bit mask (all bits set), the others clear.
#[inline]
#[target_feature(enable = "avx2")]
fn first_lanes(n: usize) -> __m256i {
    let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_cmpgt_epi32(_mm256_set1_epi32(n.min(8) as i32), idx)
}

/// Source row `r < rows` at `src[r]` (`cols ≤ 8` contiguous elements; `src[r]` for `r ≥ rows`
/// is not read) becomes element `r` of output row `c < cols`, of which the first `lanes`
/// elements are written at `dst[c]` (elements past `rows` are zero): the AVX2 counterpart of
/// [`super::transpose16::transpose16_at_f32`].
///
/// # Safety
/// AVX2 must be supported; `src[r]` valid for `cols` elements for `r < rows`, `dst[c]` for
/// `lanes ≤ 8` elements for `c < cols`.
#[inline]
#[target_feature(enable = "avx2")]
pub unsafe fn transpose8_at_f32(
    src: &[*const f32; 8],
    rows: usize,
    cols: usize,
    dst: &[*mut f32; 8],
    lanes: usize,
) {
    debug_assert!(rows <= 8 && cols <= 8 && lanes <= 8);
    let (load, keep) = (first_lanes(cols), first_lanes(lanes));
    let mut r = [_mm256_setzero_ps(); 8];
    for (i, x) in r.iter_mut().enumerate().take(rows) {
        // SAFETY: a masked load reads only the first `cols` elements of row `i < rows`
        // (caller's contract); a full load when all eight are there.
        *x = unsafe {
            if cols == 8 {
                _mm256_loadu_ps(src[i])
            } else {
                _mm256_maskload_ps(src[i], load)
            }
        };
    }
    // 4×4 transposes inside each 128-bit half: u[4g + k] half H holds column 4H + k of rows
    // 4g .. 4g + 4.
    let mut u = [_mm256_setzero_ps(); 8];
    for g in 0..2 {
        let (a, b, c, d) = (r[4 * g], r[4 * g + 1], r[4 * g + 2], r[4 * g + 3]);
        let t0 = _mm256_castps_pd(_mm256_unpacklo_ps(a, b));
        let t1 = _mm256_castps_pd(_mm256_unpackhi_ps(a, b));
        let t2 = _mm256_castps_pd(_mm256_unpacklo_ps(c, d));
        let t3 = _mm256_castps_pd(_mm256_unpackhi_ps(c, d));
        u[4 * g] = _mm256_castpd_ps(_mm256_unpacklo_pd(t0, t2));
        u[4 * g + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(t0, t2));
        u[4 * g + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(t1, t3));
        u[4 * g + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(t1, t3));
    }
    // Column k: the low halves of u[k] (rows 0–3) and u[4 + k] (rows 4–7); column 4 + k: their
    // high halves.
    for k in 0..4 {
        let out = [
            (k, _mm256_permute2f128_ps::<0x20>(u[k], u[4 + k])),
            (4 + k, _mm256_permute2f128_ps::<0x31>(u[k], u[4 + k])),
        ];
        for (c, v) in out {
            if c < cols {
                // SAFETY: output row `c < cols` is valid for `lanes` elements (caller's
                // contract); a masked store writes only those.
                unsafe {
                    if lanes == 8 {
                        _mm256_storeu_ps(dst[c], v);
                    } else {
                        _mm256_maskstore_ps(dst[c], keep, v);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every block shape from 1 × 1 to 8 × 8 and every kept width against the element-by-element
    /// transpose (where the CPU has AVX2), with the zero rows past `rows`, nothing written past
    /// `lanes` or to rows past `cols`, and no read past `cols` (the rows end at the buffer's
    /// end when they are the last).
    #[test]
    fn every_block_shape_transposes_as_the_element_loop() {
        if !is_x86_feature_detected!("avx2") {
            return;
        }
        for rows in 1..=8 {
            for cols in 1..=8 {
                for lanes in 1..=8 {
                    // Row r holds its `cols` elements only; the last row ends the buffer.
                    let src: Vec<f32> = (0..rows * cols).map(|i| i as f32 * 0.5 - 7.0).collect();
                    let from: [*const f32; 8] =
                        std::array::from_fn(|r| src.as_ptr().wrapping_add(r.min(rows - 1) * cols));
                    let stride = 12;
                    let mut dst = vec![f32::NAN; 8 * stride];
                    let to: [*mut f32; 8] =
                        std::array::from_fn(|c| dst.as_mut_ptr().wrapping_add(c * stride));
                    // SAFETY: AVX2 is present; rows r < rows hold `cols` elements, output rows
                    // `stride ≥ lanes` elements.
                    unsafe { transpose8_at_f32(&from, rows, cols, &to, lanes) };
                    for c in 0..8 {
                        for l in 0..stride {
                            let got = dst[c * stride + l];
                            if c < cols && l < lanes {
                                let want = if l < rows { src[l * cols + c] } else { 0.0 };
                                assert_eq!(got, want, "{rows}×{cols} lanes {lanes}: ({c}, {l})");
                            } else {
                                assert!(
                                    got.is_nan(),
                                    "{rows}×{cols} lanes {lanes}: wrote ({c}, {l})"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
