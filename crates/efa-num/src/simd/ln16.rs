//! Layer norm and its backward, sixteen rows at a time (AVX-512, f32, row widths 16, 32 and
//! 48), for the row kernels of the fused block (`efa-nn`'s layer-norm bodies, which call them
//! from their AVX-512 f32 variant): each row's two sums are
//! accumulated as `efa_num`'s `sum_body` / `dot_body` accumulate them (one vector of partial
//! sums per row; their closing additions of empty accumulators are identities here), and the
//! sixteen partial-sum vectors are then reduced together, the rows side by side, with exactly
//! the pairings of `reduce_sum` (lanes `i` and `i + 8`, then `i + 4`, `i + 2`, `i + 1`, lower
//! lane first). Every row gets the bits of the row-at-a-time kernel; what goes is one
//! horizontal reduction per sum (a chain of dependent shuffles and additions) per row,
//! replaced by about two shuffles and one addition per row.

use crate::mat::{MatMut, MatRef};
use std::arch::x86_64::*;

/// Rows of one call.
pub const ROWS: usize = 16;

/// Whether rows of width `d` take this path (one to three whole vectors: the shapes whose
/// accumulation `sum_body` runs in its first accumulator alone).
pub fn fits(d: usize) -> bool {
    matches!(d, 16 | 32 | 48)
}

/// The lane of [`reduce16`]'s result holding input `r`'s sum.
#[inline(always)]
const fn lane(r: usize) -> usize {
    4 * (r % 4) + r / 4
}

/// The lane sums of sixteen vectors (input `r`'s in lane [`lane`]`(r)`), each formed with the
/// additions of `reduce_sum`: `a[i] + a[i + 8]`, then `+ a[i + 4]`, `+ a[i + 2]`,
/// `+ a[i + 1]` (lower lane as the first operand).
#[inline]
#[target_feature(enable = "avx512f")]
fn reduce16(v: &[__m512; ROWS]) -> __m512 {
    // Halves of 256 bits: rows 2k and 2k + 1 side by side, eight partial sums each.
    let s1: [__m512; 8] = std::array::from_fn(|k| {
        let (a, b) = (v[2 * k], v[2 * k + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x44>(a, b),
            _mm512_shuffle_f32x4::<0xee>(a, b),
        )
    });
    // Quarters of 128 bits: four rows per vector, four partial sums each.
    let s2: [__m512; 4] = std::array::from_fn(|k| {
        let (a, b) = (s1[2 * k], s1[2 * k + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x88>(a, b),
            _mm512_shuffle_f32x4::<0xdd>(a, b),
        )
    });
    // Inside each 128-bit quarter: two rows with two partial sums each, then one row per lane.
    let s3: [__m512; 2] = std::array::from_fn(|k| {
        let (a, b) = (s2[2 * k], s2[2 * k + 1]);
        _mm512_add_ps(
            _mm512_shuffle_ps::<0x44>(a, b),
            _mm512_shuffle_ps::<0xee>(a, b),
        )
    });
    _mm512_add_ps(
        _mm512_shuffle_ps::<0x88>(s3[0], s3[1]),
        _mm512_shuffle_ps::<0xdd>(s3[0], s3[1]),
    )
}

/// Each of sixteen rows' partial sums as `sum_body` forms them for `nc ≤ 3` vectors:
/// `((0 + x₀) + x₁) + …`. (`sum_body` then adds its three empty accumulators, `(s + 0) +
/// (0 + 0)`; that changes nothing here: a sum started from +0 is never −0, and `s + 0 = s`
/// for every other value, NaN included.)
///
/// # Safety
/// Rows `r < 16` valid for `16·nc` reads at `x + r·ld`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn row_sums(x: *const f32, ld: usize, nc: usize) -> [__m512; ROWS] {
    std::array::from_fn(|r| {
        let mut s = _mm512_setzero_ps();
        for c in 0..nc {
            // SAFETY: the caller's contract.
            s = _mm512_add_ps(s, unsafe { _mm512_loadu_ps(x.add(r * ld + 16 * c)) });
        }
        s
    })
}

/// The values as an array, indexed by lane.
#[inline(always)]
fn lanes(v: __m512) -> [f32; 16] {
    // SAFETY: `__m512` and `[f32; 16]` have the same size; every bit pattern is valid.
    unsafe { std::mem::transmute(v) }
}

/// Layer norm of the sixteen rows of `x` (`16 × d`, `d` with [`fits`]), gain `g` and shift
/// `b` `[d]`: writes the normalised rows into `xhat`, the outputs into `y` (both `16 × d`)
/// and the reciprocal deviations into `rstd` `[16]`.
///
/// # Safety
/// AVX-512F must be supported; the views have sixteen rows of `d` elements each with unit
/// column stride (rows at any positive stride); `g`, `b` valid for `d` reads, `rstd` for 16
/// writes.
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn ln16(
    x: MatRef<'_, f32>,
    (g, b): (*const f32, *const f32),
    eps: f32,
    mut xhat: MatMut<'_, f32>,
    mut y: MatMut<'_, f32>,
    rstd: *mut f32,
) {
    let d = x.cols();
    debug_assert!(x.rows() == ROWS && (xhat.rows(), xhat.cols()) == (ROWS, d));
    debug_assert!(
        (y.rows(), y.cols()) == (ROWS, d) && x.cs() == 1 && xhat.cs() == 1 && y.cs() == 1
    );
    let (x, ldx) = (x.as_ptr(), x.rs() as usize);
    let (ldh, xhat) = (xhat.rs() as usize, xhat.as_mut_ptr());
    let (ldy, y) = (y.rs() as usize, y.as_mut_ptr());
    debug_assert!(fits(d));
    let nc = d / 16;
    let inv_d = _mm512_set1_ps(1.0 / d as f32);
    // SAFETY: the caller's contract: rows r < 16 have d elements at x + r·ldx, xhat + r·ldh,
    // y + r·ldy; g and b have d; rstd has 16.
    unsafe {
        // μ per row: (0 + x₀) + x₁ + …, reduced as sum_body, then ·(1/d).
        let mu = lanes(_mm512_mul_ps(reduce16(&row_sums(x, ldx, nc)), inv_d));
        // x − μ into x̂, and its squares' sums as dot_body forms them.
        let squares: [__m512; ROWS] = std::array::from_fn(|r| {
            let (row, h) = (x.add(r * ldx), xhat.add(r * ldh));
            let m = _mm512_set1_ps(mu[lane(r)]);
            let mut s = _mm512_setzero_ps();
            for c in 0..nc {
                let v = _mm512_sub_ps(_mm512_loadu_ps(row.add(16 * c)), m);
                _mm512_storeu_ps(h.add(16 * c), v);
                s = _mm512_fmadd_ps(v, v, s);
            }
            s
        });
        let var = _mm512_mul_ps(reduce16(&squares), inv_d);
        let rs = lanes(_mm512_div_ps(
            _mm512_set1_ps(1.0),
            _mm512_sqrt_ps(_mm512_add_ps(var, _mm512_set1_ps(eps))),
        ));
        // x̂ = (x − μ)·r, y = x̂∘g + b.
        for r in 0..ROWS {
            let rv = rs[lane(r)];
            *rstd.add(r) = rv;
            let (h, out) = (xhat.add(r * ldh), y.add(r * ldy));
            for c in 0..nc {
                let hv = _mm512_mul_ps(_mm512_loadu_ps(h.add(16 * c)), _mm512_set1_ps(rv));
                _mm512_storeu_ps(h.add(16 * c), hv);
                let yv = _mm512_add_ps(
                    _mm512_mul_ps(hv, _mm512_loadu_ps(g.add(16 * c))),
                    _mm512_loadu_ps(b.add(16 * c)),
                );
                _mm512_storeu_ps(out.add(16 * c), yv);
            }
        }
    }
}

/// The second step of the layer-norm backward for the sixteen rows of `dx` (`16 × d`, `d`
/// with [`fits`]): `dx = r·(ĝ − mean(ĝ) − x̂·mean(ĝ∘x̂))` in place, `dx` holding `ĝ`, `xhat`
/// the normalised rows (`16 × d`), `rstd` the reciprocal deviations `[16]`.
///
/// # Safety
/// AVX-512F must be supported; the views have sixteen rows of `d` elements each with unit
/// column stride (rows at any positive stride); `rstd` valid for 16 reads.
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn ln_back16(mut dx: MatMut<'_, f32>, xhat: MatRef<'_, f32>, rstd: *const f32) {
    let d = dx.cols();
    debug_assert!(dx.rows() == ROWS && (xhat.rows(), xhat.cols()) == (ROWS, d));
    debug_assert!(dx.cs() == 1 && xhat.cs() == 1);
    let (ldx, dx) = (dx.rs() as usize, dx.as_mut_ptr());
    let (xhat, ldh) = (xhat.as_ptr(), xhat.rs() as usize);
    debug_assert!(fits(d));
    let nc = d / 16;
    let inv_d = _mm512_set1_ps(1.0 / d as f32);
    // SAFETY: the caller's contract: rows r < 16 have d elements at dx + r·ldx and
    // xhat + r·ldh; rstd has 16.
    unsafe {
        let sums = row_sums(dx.cast_const(), ldx, nc);
        let dots: [__m512; ROWS] = std::array::from_fn(|r| {
            let (row, h) = (dx.add(r * ldx), xhat.add(r * ldh));
            let mut s = _mm512_setzero_ps();
            for c in 0..nc {
                s = _mm512_fmadd_ps(
                    _mm512_loadu_ps(row.add(16 * c)),
                    _mm512_loadu_ps(h.add(16 * c)),
                    s,
                );
            }
            s
        });
        let mgh = lanes(_mm512_mul_ps(reduce16(&sums), inv_d));
        let mghx = lanes(_mm512_mul_ps(reduce16(&dots), inv_d));
        for r in 0..ROWS {
            let (row, h) = (dx.add(r * ldx), xhat.add(r * ldh));
            let (a, m, rv) = (
                _mm512_set1_ps(mgh[lane(r)]),
                _mm512_set1_ps(mghx[lane(r)]),
                _mm512_set1_ps(*rstd.add(r)),
            );
            for c in 0..nc {
                let v = _mm512_loadu_ps(row.add(16 * c));
                let hm = _mm512_mul_ps(_mm512_loadu_ps(h.add(16 * c)), m);
                let out = _mm512_mul_ps(rv, _mm512_sub_ps(_mm512_sub_ps(v, a), hm));
                _mm512_storeu_ps(row.add(16 * c), out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each input's lane sum equals `reduce_sum`'s pairing written out, bit for bit, including
    /// sums that cancel and signed zeros.
    #[test]
    fn reduce16_pairs_lanes_as_reduce_sum() {
        if !is_x86_feature_detected!("avx512f") {
            return;
        }
        let mut rows = [[0f32; 16]; ROWS];
        for (r, row) in rows.iter_mut().enumerate() {
            for (i, v) in row.iter_mut().enumerate() {
                let u = ((r * 16 + i) as f32 * 0.618_034).fract();
                *v = match (r + i) % 7 {
                    0 => -0.0,
                    1 => 1e8 * (u - 0.5),
                    _ => (u - 0.5) * (1 + r) as f32,
                };
            }
        }
        let reference = |a: [f32; 16]| {
            let mut a = a;
            let mut w = 16;
            while w > 1 {
                w /= 2;
                for i in 0..w {
                    a[i] += a[i + w];
                }
            }
            a[0]
        };
        // SAFETY: AVX-512F is supported (checked above).
        let got = unsafe {
            let v: [__m512; ROWS] = std::array::from_fn(|r| _mm512_loadu_ps(rows[r].as_ptr()));
            lanes(reduce16(&v))
        };
        for (r, row) in rows.iter().enumerate() {
            assert_eq!(got[lane(r)].to_bits(), reference(*row).to_bits(), "row {r}");
        }
    }
}
