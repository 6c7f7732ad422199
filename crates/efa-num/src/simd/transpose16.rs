//! A masked 16 × 16 transpose of `f32` (AVX-512): the packing of attention tiles and
//! transposed operands (`efa-attn`), rows of up to sixteen elements at a time.

use std::arch::x86_64::*;

/// Transposes a block of `rows ≤ 16` rows (row `r` at `src + r·rs`, `cols ≤ 16` contiguous
/// elements) into `cols` rows of 16 at `dst + c·stride` (entries past `rows` are zero).
///
/// # Safety
/// AVX-512F must be supported; `src` valid for the stated rows and columns, `dst` for `cols`
/// rows of 16 elements at stride `stride`.
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn transpose16_f32(
    src: *const f32,
    rs: isize,
    rows: usize,
    cols: usize,
    dst: *mut f32,
    stride: usize,
) {
    let from = std::array::from_fn(|i| src.wrapping_offset(i as isize * rs));
    let to = std::array::from_fn(|c| dst.wrapping_add(c * stride));
    // SAFETY: the caller's contract, row by row; all 16 lanes of each output row are written.
    unsafe { transpose16_at_f32(&from, rows, cols, &to, 16) }
}

/// [`transpose16_f32`] with each row at its own address: source row `r < rows` at `src[r]`
/// (`cols ≤ 16` contiguous elements; `src[r]` for `r ≥ rows` is not read) becomes element `r`
/// of output row `c < cols`, of which the first `lanes` elements are written at `dst[c]`
/// (elements past `rows` are zero).
///
/// # Safety
/// AVX-512F must be supported; `src[r]` valid for `cols` elements for `r < rows`, `dst[c]`
/// for `lanes ≤ 16` elements for `c < cols`.
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn transpose16_at_f32(
    src: &[*const f32; 16],
    rows: usize,
    cols: usize,
    dst: &[*mut f32; 16],
    lanes: usize,
) {
    debug_assert!(rows <= 16 && cols <= 16 && lanes <= 16);
    // SAFETY: masked loads touch only the first `cols` elements of the first `rows` rows;
    // masked stores write the first `lanes` elements of the first `cols` output rows (caller's
    // contract).
    unsafe {
        let mask = (((1u32 << cols) - 1) & 0xffff) as __mmask16;
        let keep = (((1u32 << lanes) - 1) & 0xffff) as __mmask16;
        let r: [__m512; 16] = std::array::from_fn(|i| {
            if i < rows {
                _mm512_maskz_loadu_ps(mask, src[i])
            } else {
                _mm512_setzero_ps()
            }
        });
        // 4×4 transposes inside each 128-bit lane: u[4g + k] lane L holds column 4L + k of
        // rows 4g .. 4g + 4.
        let mut u = [_mm512_setzero_ps(); 16];
        for g in 0..4 {
            let (a, b, c, d) = (r[4 * g], r[4 * g + 1], r[4 * g + 2], r[4 * g + 3]);
            let t0 = _mm512_castps_pd(_mm512_unpacklo_ps(a, b));
            let t1 = _mm512_castps_pd(_mm512_unpackhi_ps(a, b));
            let t2 = _mm512_castps_pd(_mm512_unpacklo_ps(c, d));
            let t3 = _mm512_castps_pd(_mm512_unpackhi_ps(c, d));
            u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
            u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
            u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
            u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
        }
        // Gather lane L of u[k], u[4 + k], u[8 + k], u[12 + k]: column 4L + k.
        for k in 0..4 {
            let ve = _mm512_shuffle_f32x4::<0x88>(u[k], u[4 + k]);
            let vo = _mm512_shuffle_f32x4::<0xdd>(u[k], u[4 + k]);
            let we = _mm512_shuffle_f32x4::<0x88>(u[8 + k], u[12 + k]);
            let wo = _mm512_shuffle_f32x4::<0xdd>(u[8 + k], u[12 + k]);
            let out = [
                (k, _mm512_shuffle_f32x4::<0x88>(ve, we)),
                (4 + k, _mm512_shuffle_f32x4::<0x88>(vo, wo)),
                (8 + k, _mm512_shuffle_f32x4::<0xdd>(ve, we)),
                (12 + k, _mm512_shuffle_f32x4::<0xdd>(vo, wo)),
            ];
            for (c, v) in out {
                if c < cols {
                    if lanes >= 16 {
                        _mm512_storeu_ps(dst[c], v);
                    } else {
                        _mm512_mask_storeu_ps(dst[c], keep, v);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every block shape from 1 × 1 to 16 × 16 against the element-by-element transpose
    /// (where the CPU has AVX-512F), with the zero rows past `rows` and the lanes kept.
    #[test]
    fn every_block_shape_transposes_as_the_element_loop() {
        if !is_x86_feature_detected!("avx512f") {
            return;
        }
        let src: Vec<f32> = (0..16 * 20).map(|i| i as f32 * 0.5 - 7.0).collect();
        for rows in 1..=16 {
            for cols in 1..=16 {
                let stride = 32;
                let mut dst = vec![f32::NAN; 16 * stride];
                // SAFETY: AVX-512F is present; `src` holds 16 rows of 20 (row stride 20),
                // `dst` 16 rows of `stride` ≥ 16.
                unsafe { transpose16_f32(src.as_ptr(), 20, rows, cols, dst.as_mut_ptr(), stride) };
                for c in 0..cols {
                    for r in 0..16 {
                        let want = if r < rows { src[r * 20 + c] } else { 0.0 };
                        assert_eq!(
                            dst[c * stride + r].to_bits(),
                            want.to_bits(),
                            "{rows}x{cols}"
                        );
                    }
                    assert!(dst[c * stride + 16].is_nan(), "wrote past 16 lanes");
                }
                assert!(
                    dst[cols * stride..].iter().all(|x| x.is_nan()),
                    "{rows}x{cols}: wrote past row {cols}"
                );
            }
        }
    }
}
