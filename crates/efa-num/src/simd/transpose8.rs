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
    let t = transpose_regs(r);
    for (c, &v) in t.iter().enumerate().take(cols) {
        // SAFETY: output row `c < cols` is valid for `lanes` elements (caller's contract); a
        // masked store writes only those.
        unsafe {
            if lanes == 8 {
                _mm256_storeu_ps(dst[c], v);
            } else {
                _mm256_maskstore_ps(dst[c], keep, v);
            }
        }
    }
}

/// The 8 × 8 transpose of eight registers: element `c` of row `r` becomes element `r` of row
/// `c`. Inlined into its callers, each of which enables AVX2.
#[inline(always)]
fn transpose_regs(r: [__m256; 8]) -> [__m256; 8] {
    // SAFETY: register shuffles only; every caller runs with AVX2 enabled.
    unsafe {
        // 4×4 transposes inside each 128-bit half: u[4g + k] half H holds column 4H + k of
        // rows 4g .. 4g + 4.
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
        // Column k: the low halves of u[k] (rows 0–3) and u[4 + k] (rows 4–7); column 4 + k:
        // their high halves.
        let mut t = [_mm256_setzero_ps(); 8];
        for k in 0..4 {
            t[k] = _mm256_permute2f128_ps::<0x20>(u[k], u[4 + k]);
            t[4 + k] = _mm256_permute2f128_ps::<0x31>(u[k], u[4 + k]);
        }
        t
    }
}

/// A strided transpose: `dst[c·ds + r] = src[r·rs + c]` for `c < cols` and `r` below `rows`
/// rounded up to a multiple of 8, zero for `r ≥ rows` (each source row contiguous). Whole
/// 8 × 8 blocks go through registers in one loop; the blocks at the edges through
/// [`transpose8_at_f32`].
///
/// # Safety
/// AVX2 must be supported; `src` valid for reads of `cols` elements at `r·rs` for `r < rows`;
/// `dst` valid for writes of `rows.next_multiple_of(8)` elements at `c·ds` for `c < cols`, not
/// overlapping the source.
#[target_feature(enable = "avx2")]
pub unsafe fn transpose_f32(
    src: *const f32,
    rs: isize,
    (rows, cols): (usize, usize),
    dst: *mut f32,
    ds: usize,
) {
    for rb in (0..rows).step_by(8) {
        let n = (rows - rb).min(8);
        let row = src.wrapping_offset(rb as isize * rs);
        // The rows two blocks on, first and last element (a prefetch never faults).
        for r in 16..24 {
            let ahead = row.wrapping_offset(r * rs);
            _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(cols.max(1) - 1).cast());
        }
        for cb in (0..cols).step_by(8) {
            let w = (cols - cb).min(8);
            if n == 8 && w == 8 {
                let mut x = [_mm256_setzero_ps(); 8];
                for (r, v) in x.iter_mut().enumerate() {
                    // SAFETY: columns cb .. cb + 8 ≤ cols of row rb + r < rows.
                    *v = unsafe { _mm256_loadu_ps(row.offset(r as isize * rs).add(cb)) };
                }
                for (c, &v) in transpose_regs(x).iter().enumerate() {
                    // SAFETY: elements rb .. rb + 8 of output row cb + c < cols.
                    unsafe { _mm256_storeu_ps(dst.add((cb + c) * ds + rb), v) };
                }
            } else {
                let mut from = [std::ptr::null(); 8];
                let mut into = [std::ptr::null_mut(); 8];
                for k in 0..8 {
                    // Rows past `n` and columns past `w` are not touched (any address will do).
                    from[k] = row
                        .wrapping_offset(k.min(n - 1) as isize * rs)
                        .wrapping_add(cb);
                    into[k] = dst.wrapping_add((cb + k.min(w - 1)) * ds + rb);
                }
                // SAFETY: rows rb .. rb + n have w elements from column cb; output rows
                // cb .. cb + w get 8 elements from rb ≤ rows.next_multiple_of(8) − 8.
                unsafe { transpose8_at_f32(&from, n, w, &into, 8) };
            }
        }
    }
}

/// Heads side by side: `dst[(r·cols + c)·16 + g] = src[g][r·rs + c]` for the sixteen sources
/// `g`, rows `r < rows` and columns `c < cols` (each source row contiguous), with the rows
/// `ahead` rows on prefetched. Whole 8 × 8 blocks go through registers in one loop; a last
/// block of fewer than eight columns through [`transpose8_at_f32`]. Only data moves.
///
/// # Safety
/// AVX2 must be supported; `src[g]` valid for reads of `cols` elements at `r·rs` for every
/// `r < rows`; `dst` valid for `rows·cols·16` writes, not overlapping any source.
#[target_feature(enable = "avx2")]
pub unsafe fn pack16_f32(
    src: &[*const f32; 16],
    rs: isize,
    (rows, cols): (usize, usize),
    ahead: usize,
    dst: *mut f32,
) {
    let whole = cols / 8 * 8;
    for r in 0..rows {
        let at = r as isize * rs;
        for &s in src {
            // A prefetch never faults, whatever the address.
            _mm_prefetch::<_MM_HINT_T0>(s.wrapping_offset(at + ahead as isize * rs).cast());
        }
        for cb in (0..whole).step_by(8) {
            for hb in [0, 8] {
                let mut x = [_mm256_setzero_ps(); 8];
                for (g, v) in x.iter_mut().enumerate() {
                    // SAFETY: columns cb .. cb + 8 ≤ cols of source row r (caller's contract).
                    *v = unsafe { _mm256_loadu_ps(src[hb + g].offset(at + cb as isize)) };
                }
                for (k, &v) in transpose_regs(x).iter().enumerate() {
                    // SAFETY: (r·cols + cb + k)·16 + hb + 8 ≤ rows·cols·16 (caller's contract).
                    unsafe { _mm256_storeu_ps(dst.add((r * cols + cb + k) * 16 + hb), v) };
                }
            }
        }
        if whole < cols {
            for hb in [0, 8] {
                let mut from = [std::ptr::null(); 8];
                let mut into = [std::ptr::null_mut(); 8];
                for g in 0..8 {
                    from[g] = src[hb + g].wrapping_offset(at + whole as isize);
                    into[g] = dst.wrapping_add((r * cols + whole + g) * 16 + hb);
                }
                // SAFETY: the cols − whole < 8 last columns of eight source rows; output rows
                // r·cols + whole + k < (r + 1)·cols, 8 lanes from hb (caller's contract).
                unsafe { transpose8_at_f32(&from, 8, cols - whole, &into, 8) };
            }
        }
    }
}

/// The inverse of [`pack16_f32`]: `dst[g][r·cols + c] = src[(r·cols + c)·16 + g]` for the
/// sixteen outputs `g` (each one's rows contiguous), `r < rows`, `c < cols`.
///
/// # Safety
/// AVX2 must be supported; `src` valid for `rows·cols·16` reads; each `dst[g]` for
/// `rows·cols` writes, the sixteen not overlapping each other or `src`.
#[target_feature(enable = "avx2")]
pub unsafe fn unpack16_f32(src: *const f32, (rows, cols): (usize, usize), dst: &[*mut f32; 16]) {
    let whole = cols / 8 * 8;
    for r in 0..rows {
        for cb in (0..whole).step_by(8) {
            for hb in [0, 8] {
                let mut x = [_mm256_setzero_ps(); 8];
                for (k, v) in x.iter_mut().enumerate() {
                    // SAFETY: (r·cols + cb + k)·16 + hb + 8 ≤ rows·cols·16 (caller's contract).
                    *v = unsafe { _mm256_loadu_ps(src.add((r * cols + cb + k) * 16 + hb)) };
                }
                for (g, &v) in transpose_regs(x).iter().enumerate() {
                    // SAFETY: elements r·cols + cb .. + 8 ≤ rows·cols of output hb + g.
                    unsafe { _mm256_storeu_ps(dst[hb + g].add(r * cols + cb), v) };
                }
            }
        }
        if whole < cols {
            let w = cols - whole;
            for hb in [0, 8] {
                let mut from = [std::ptr::null(); 8];
                let mut into = [std::ptr::null_mut(); 8];
                for k in 0..8 {
                    from[k] = src.wrapping_add((r * cols + whole + k) * 16 + hb);
                    into[k] = dst[hb + k].wrapping_add(r * cols + whole);
                }
                // SAFETY: the w source rows of 8 lanes from hb lie in src; outputs hb + g get
                // their w last elements of row r (caller's contract).
                unsafe { transpose8_at_f32(&from, w, 8, &into, w) };
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

    /// `transpose_f32` against the element loop over shapes with whole and partial blocks in
    /// both directions: zeros up to the next multiple of 8, nothing written past it or to
    /// rows past `cols`.
    #[test]
    fn strided_transpose_as_the_element_loop() {
        if !is_x86_feature_detected!("avx2") {
            return;
        }
        for rows in [1usize, 5, 8, 9, 16, 50] {
            for cols in [1, 7, 8, 12, 16, 17] {
                let (rs, ds) = (cols + 2, rows.next_multiple_of(8) + 8);
                let src: Vec<f32> = (0..rows * rs).map(|i| i as f32 * 0.5 - 3.0).collect();
                let mut dst = vec![f32::NAN; (cols + 1) * ds];
                // SAFETY: AVX2 is present; `rows` rows of `cols` at stride `rs`; `cols + 1`
                // output rows of `ds ≥ rows.next_multiple_of(8)`.
                unsafe {
                    transpose_f32(
                        src.as_ptr(),
                        rs as isize,
                        (rows, cols),
                        dst.as_mut_ptr(),
                        ds,
                    )
                };
                for c in 0..cols + 1 {
                    for r in 0..ds {
                        let got = dst[c * ds + r];
                        if c < cols && r < rows.next_multiple_of(8) {
                            let want = if r < rows { src[r * rs + c] } else { 0.0 };
                            assert_eq!(got, want, "{rows}×{cols}: ({c}, {r})");
                        } else {
                            assert!(got.is_nan(), "{rows}×{cols}: wrote ({c}, {r})");
                        }
                    }
                }
            }
        }
    }
}
