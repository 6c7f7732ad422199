//! The block's layer norms over whole chunks of rows, one dispatched call per chunk: forward
//! ([`ln_rows`]) and backward ([`ln_back_rows`]). Each row runs exactly the arithmetic of the
//! per-row formulas (`dense::ln_row`, `dense::ln_back_in_place`, kept as the tests' reference):
//! the two sums per row on the same `efa_num::simd` bodies as `sum_with` / `dot_with`, the
//! element-wise steps one element at a time in the same order of operations, so the values are
//! the same bits; what goes is the per-row dispatch of those calls.

use efa_num::simd::{bodies, Isa, SimdVec};
use efa_num::{simd_by_kind, simd_variants, Real};

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn ln_body<V: SimdVec>(
    rows: usize,
    d: usize,
    x: *const V::Elem,
    ldx: usize,
    g: *const V::Elem,
    b: *const V::Elem,
    eps: V::Elem,
    xhat: *mut V::Elem,
    ldh: usize,
    y: *mut V::Elem,
    ldy: usize,
    rstd: *mut V::Elem,
) {
    unsafe {
        let one = V::Elem::ONE;
        let inv_d = one / V::Elem::from_usize(d);
        // Two rows at a time, their steps interleaved (each row is one long chain of dependent
        // reductions, a square root and a division; the second row's steps fill the first's
        // waits). Each row's operations are unchanged.
        let mut i = 0;
        while i < rows {
            let two = i + 1 < rows;
            let j = if two { i + 1 } else { i };
            let (xa, ha, ya) = (x.add(i * ldx), xhat.add(i * ldh), y.add(i * ldy));
            let (xb, hb, yb) = (x.add(j * ldx), xhat.add(j * ldh), y.add(j * ldy));
            let mua = bodies::sum_body::<V>(xa, d) * inv_d;
            let mub = bodies::sum_body::<V>(xb, d) * inv_d;
            for k in 0..d {
                *ha.add(k) = *xa.add(k) - mua;
            }
            if two {
                for k in 0..d {
                    *hb.add(k) = *xb.add(k) - mub;
                }
            }
            let vara = bodies::dot_body::<V>(ha, ha, d) * inv_d;
            let varb = bodies::dot_body::<V>(hb, hb, d) * inv_d;
            let ra = one / (vara + eps).sqrt();
            let rb = one / (varb + eps).sqrt();
            for k in 0..d {
                let hk = *ha.add(k) * ra;
                *ha.add(k) = hk;
                *ya.add(k) = hk * *g.add(k) + *b.add(k);
            }
            *rstd.add(i) = ra;
            if two {
                for k in 0..d {
                    let hk = *hb.add(k) * rb;
                    *hb.add(k) = hk;
                    *yb.add(k) = hk * *g.add(k) + *b.add(k);
                }
                *rstd.add(j) = rb;
            }
            i += 2;
        }
    }
}
simd_variants!(ln_body, ln_d, (rows: usize, d: usize, x: *const E, ldx: usize, g: *const E,
    b: *const E, eps: E, xhat: *mut E, ldh: usize, y: *mut E, ldy: usize, rstd: *mut E) -> ());

/// Whether `rows` rows of `d` at stride `ld` fit `len` elements.
fn fits(len: usize, ld: usize, rows: usize, d: usize) -> bool {
    rows == 0 || (d <= ld && (rows - 1) * ld + d <= len)
}

/// Layer norm of `rows` rows of `x` (stride `ldx`, `d = g.len()` entries each): per row
/// `μ = Σx/d`, `σ² = Σ(x − μ)²/d`, `r = 1/√(σ² + ε)`, `x̂ = (x − μ)·r` (into `xhat`, stride
/// `ldh`), `y = x̂∘g + b` (into `y`, stride `ldy`), `r` into `rstd[i]`. The values of
/// `dense::ln_row` row by row.
///
/// # Panics
/// If a buffer is too short for its rows (an internal invariant of the callers).
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub(super) fn ln_rows<T: Real>(
    isa: Isa,
    rows: usize,
    (x, ldx): (&[T], usize),
    g: &[T],
    b: &[T],
    eps: T,
    (xhat, ldh): (&mut [T], usize),
    (y, ldy): (&mut [T], usize),
    rstd: &mut [T],
) {
    let d = g.len();
    assert!(
        b.len() >= d
            && rstd.len() >= rows
            && fits(x.len(), ldx, rows, d)
            && fits(xhat.len(), ldh, rows, d)
            && fits(y.len(), ldy, rows, d),
        "ln_rows: sizes"
    );
    let isa = isa.or_scalar();
    // SAFETY: the assert keeps every row's first `d` entries of `x`, `xhat`, `y` and the first
    // `rows` of `rstd` inside their slices (distinct borrows: no aliasing); `isa` is supported.
    simd_by_kind!(T, E => unsafe {
        ln_d::<E>(isa, rows, d, x.as_ptr().cast(), ldx, g.as_ptr().cast(), b.as_ptr().cast(),
            *(&eps as *const T).cast::<E>(), xhat.as_mut_ptr().cast(), ldh, y.as_mut_ptr().cast(), ldy,
            rstd.as_mut_ptr().cast())
    })
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn ln_back_body<V: SimdVec>(
    rows: usize,
    d: usize,
    dx: *mut V::Elem,
    ldx: usize,
    xhat: *const V::Elem,
    ldh: usize,
    rstd: *const V::Elem,
    g: *const V::Elem,
    dg: *mut V::Elem,
    db: *mut V::Elem,
) {
    unsafe {
        let inv_d = V::Elem::ONE / V::Elem::from_usize(d);
        for i in 0..rows {
            let (row, h, r) = (dx.add(i * ldx), xhat.add(i * ldh), *rstd.add(i));
            for k in 0..d {
                let dy = *row.add(k);
                *dg.add(k) += dy * *h.add(k);
                *db.add(k) += dy;
                *row.add(k) = dy * *g.add(k);
            }
            let mgh = bodies::sum_body::<V>(row, d) * inv_d;
            let mghx = bodies::dot_body::<V>(row, h, d) * inv_d;
            for k in 0..d {
                let v = *row.add(k);
                *row.add(k) = r * (v - mgh - *h.add(k) * mghx);
            }
        }
    }
}
simd_variants!(ln_back_body, ln_back_d, (rows: usize, d: usize, dx: *mut E, ldx: usize,
    xhat: *const E, ldh: usize, rstd: *const E, g: *const E, dg: *mut E, db: *mut E) -> ());

/// Backward of [`ln_rows`] in place for the cotangent rows `dy` (stride `ldx`, `d = g.len()`
/// entries each), rows in order: `dg += dy∘x̂`, `db += dy`, and each row becomes
/// `dx = r·(ĝ − mean(ĝ) − x̂·mean(ĝ∘x̂))` with `ĝ = dy∘g`. The values of
/// `dense::ln_back_in_place` row by row.
///
/// # Panics
/// If a buffer is too short for its rows (an internal invariant of the callers).
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub(super) fn ln_back_rows<T: Real>(
    isa: Isa,
    rows: usize,
    (dy, ldx): (&mut [T], usize),
    (xhat, ldh): (&[T], usize),
    rstd: &[T],
    g: &[T],
    dg: &mut [T],
    db: &mut [T],
) {
    let d = g.len();
    assert!(
        dg.len() >= d
            && db.len() >= d
            && rstd.len() >= rows
            && fits(dy.len(), ldx, rows, d)
            && fits(xhat.len(), ldh, rows, d),
        "ln_back_rows: sizes"
    );
    let isa = isa.or_scalar();
    // SAFETY: the assert keeps every access inside its slice (distinct borrows: no aliasing);
    // `isa` is supported.
    simd_by_kind!(T, E => unsafe {
        ln_back_d::<E>(isa, rows, d, dy.as_mut_ptr().cast(), ldx, xhat.as_ptr().cast(), ldh,
            rstd.as_ptr().cast(), g.as_ptr().cast(), dg.as_mut_ptr().cast(),
            db.as_mut_ptr().cast())
    })
}

#[cfg(test)]
mod tests {
    use super::super::dense::{ln_back_in_place, ln_row};
    use super::*;

    /// Deterministic values in `[-s, s)` plus an offset (so the mean is not near 0).
    fn values<T: Real>(n: usize, seed: u64, s: f64, off: f64) -> Vec<T> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                T::from_f64((2.0 * u - 1.0) * s + off)
            })
            .collect()
    }

    fn bits<T: Real>(x: &[T]) -> Vec<u64> {
        x.iter().map(|v| v.to_f64().to_bits()).collect()
    }

    fn same_as_per_row<T: Real>() {
        for isa in Isa::ALL {
            for rows in [0, 1, 2, 5] {
                for d in (1..=40usize).chain([64, 70]) {
                    let ld = d.div_ceil(16) * 16 + if d % 2 == 0 { 16 } else { 0 };
                    let seed = (rows * 100 + d) as u64;
                    let x = values::<T>(rows * ld, seed, 2.0, 0.5);
                    let (g, b) = (
                        values::<T>(d, seed + 1, 1.0, 1.0),
                        values(d, seed + 2, 1.0, 0.0),
                    );
                    let eps = T::from_f64(1e-3);
                    // Forward: x̂ (stride ld), y (stride d), r.
                    let (mut h0, mut y0, mut r0) = (
                        vec![T::ZERO; rows * ld],
                        vec![T::ZERO; rows * d],
                        vec![T::ZERO; rows],
                    );
                    for i in 0..rows {
                        r0[i] = ln_row(
                            isa,
                            &x[i * ld..],
                            &g,
                            &b,
                            eps,
                            &mut h0[i * ld..],
                            &mut y0[i * d..],
                        );
                    }
                    let (mut h1, mut y1, mut r1) = (
                        vec![T::ZERO; rows * ld],
                        vec![T::ZERO; rows * d],
                        vec![T::ZERO; rows],
                    );
                    ln_rows(
                        isa,
                        rows,
                        (&x, ld),
                        &g,
                        &b,
                        eps,
                        (&mut h1, ld),
                        (&mut y1, d),
                        &mut r1,
                    );
                    let what = format!("{isa:?} rows {rows} d {d}");
                    assert_eq!(bits(&h1), bits(&h0), "x̂ {what}");
                    assert_eq!(bits(&y1), bits(&y0), "y {what}");
                    assert_eq!(bits(&r1), bits(&r0), "r {what}");
                    // Backward in place, with parameter gradients accumulated over the rows.
                    let dy = values::<T>(rows * ld, seed + 3, 1.5, 0.1);
                    let (mut dx0, mut dg0, mut db0) = (
                        dy.clone(),
                        values::<T>(d, seed + 4, 1.0, 0.0),
                        values::<T>(d, seed + 5, 1.0, 0.0),
                    );
                    let (mut dx1, mut dg1, mut db1) = (dy.clone(), dg0.clone(), db0.clone());
                    for i in 0..rows {
                        ln_back_in_place(
                            isa,
                            &mut dx0[i * ld..],
                            &h0[i * ld..],
                            r0[i],
                            &g,
                            &mut dg0,
                            &mut db0,
                        );
                    }
                    ln_back_rows(
                        isa,
                        rows,
                        (&mut dx1, ld),
                        (&h0, ld),
                        &r0,
                        &g,
                        &mut dg1,
                        &mut db1,
                    );
                    assert_eq!(bits(&dx1), bits(&dx0), "dx {what}");
                    assert_eq!(bits(&dg1), bits(&dg0), "dg {what}");
                    assert_eq!(bits(&db1), bits(&db0), "db {what}");
                }
            }
        }
    }

    #[test]
    fn chunk_layer_norms_give_the_bits_of_the_per_row_ones() {
        same_as_per_row::<f32>();
        same_as_per_row::<f64>();
    }

    #[test]
    #[should_panic(expected = "ln_rows: sizes")]
    fn ln_rows_checks_its_buffers() {
        let (x, g) = (vec![0f64; 20], vec![1f64; 8]);
        let (mut h, mut y, mut r) = (vec![0f64; 20], vec![0f64; 24], vec![0f64; 3]);
        ln_rows(
            Isa::Scalar,
            3,
            (&x, 8),
            &g,
            &g,
            0.1,
            (&mut h, 8),
            (&mut y, 8),
            &mut r,
        );
    }
}
