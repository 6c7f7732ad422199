//! The chunk kernels against the per-row references, bit for bit.

use super::super::dense::{col_sums as col_sums_ref, ln_back_in_place, ln_row};
use super::*;

/// Deterministic values in `[-s, s)` plus an offset (so the mean is not near 0).
fn values<T: Real>(n: usize, seed: u64, s: f64, off: f64) -> Vec<T> {
    efa_check::unit_values(seed)
        .take(n)
        .map(|u| T::from_f64((2.0 * u - 1.0) * s + off))
        .collect()
}

fn bits<T: Real>(x: &[T]) -> Vec<u64> {
    x.iter().map(|v| v.to_f64().to_bits()).collect()
}

fn same_as_per_row<T: Real>() {
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        for rows in [0, 1, 2, 5, 37] {
            for d in (1..=40usize).chain([48, 64, 70]) {
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
                let ln = LnParams { g: &g, b: &b, eps };
                ln_rows(
                    isa,
                    MatRef::row_major(&x, rows, d, ld),
                    ln,
                    MatMut::row_major(&mut h1, rows, d, ld),
                    MatMut::row_major(&mut y1, rows, d, d),
                    &mut r1,
                );
                let what = format!("{isa:?} rows {rows} d {d}");
                assert_eq!(bits(&h1), bits(&h0), "x̂ {what}");
                assert_eq!(bits(&y1), bits(&y0), "y {what}");
                assert_eq!(bits(&r1), bits(&r0), "r {what}");
                // Into unwritten buffers: the same values, zeros on the padding of x̂ and
                // of y (here at the padded stride too).
                let mut h2 = vec![MaybeUninit::<T>::uninit(); rows * ld];
                let mut y2 = vec![MaybeUninit::<T>::uninit(); rows * ld];
                let mut r2 = vec![MaybeUninit::<T>::uninit(); rows];
                let x = MatRef::row_major(&x, rows, d, ld);
                let (h2, r2) = ln_rows_into(isa, x, ln, (&mut h2, ld), (&mut y2, ld), &mut r2);
                assert_eq!(bits(h2), bits(&h0), "x̂ into {what}");
                assert_eq!(bits(r2), bits(&r0), "r into {what}");
                // SAFETY: `ln_rows_into` wrote every element of `y2`.
                let y2: Vec<T> = y2.into_iter().map(|v| unsafe { v.assume_init() }).collect();
                for i in 0..rows {
                    let (got, pad) = y2[i * ld..(i + 1) * ld].split_at(d);
                    assert_eq!(bits(got), bits(&y0[i * d..(i + 1) * d]), "y into {what}");
                    assert!(pad.iter().all(|v| v.to_f64().to_bits() == 0), "pad {what}");
                }
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
                let xhat = MatRef::row_major(&h0, rows, d, ld);
                ln_back_rows(
                    isa,
                    None,
                    MatMut::row_major(&mut dx1, rows, d, ld),
                    (xhat, &r0),
                    &g,
                    (&mut dg1, &mut db1),
                );
                assert_eq!(bits(&dx1), bits(&dx0), "dx {what}");
                assert_eq!(bits(&dg1), bits(&dg0), "dg {what}");
                assert_eq!(bits(&db1), bits(&db0), "db {what}");
                // Out of place: the cotangent read from a copy at another stride.
                let lds = d + 3;
                let mut src = vec![T::ZERO; rows * lds];
                for i in 0..rows {
                    src[i * lds..i * lds + d].copy_from_slice(&dy[i * ld..i * ld + d]);
                }
                let mut dx2 = vec![T::ZERO; rows * ld];
                let (mut dg2, mut db2) = (
                    values::<T>(d, seed + 4, 1.0, 0.0),
                    values::<T>(d, seed + 5, 1.0, 0.0),
                );
                ln_back_rows(
                    isa,
                    Some(MatRef::row_major(&src, rows, d, lds)),
                    MatMut::row_major(&mut dx2, rows, d, ld),
                    (xhat, &r0),
                    &g,
                    (&mut dg2, &mut db2),
                );
                for i in 0..rows {
                    let (got, want) = (&dx2[i * ld..i * ld + d], &dx0[i * ld..i * ld + d]);
                    assert_eq!(bits(got), bits(want), "dx from {what}");
                }
                assert_eq!(bits(&dg2), bits(&dg0), "dg from {what}");
                assert_eq!(bits(&db2), bits(&db0), "db from {what}");
            }
        }
    }
}

fn col_sums_same_as_row_loop<T: Real>() {
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        for rows in [0, 1, 3, 220] {
            for n in (1..=34usize).chain([63, 64, 65, 96]) {
                let ldc = n.div_ceil(16) * 16 + 16;
                let seed = (rows * 1000 + n) as u64;
                let c = values::<T>(rows * ldc, seed, 3.0, 0.25);
                let mut want = values::<T>(n, seed + 1, 1.0, 0.0);
                let mut got = want.clone();
                col_sums_ref(&mut want, &c, ldc, rows);
                col_sums(isa, &mut got, &c, ldc, rows);
                assert_eq!(bits(&got), bits(&want), "{isa:?} rows {rows} n {n}");
            }
        }
    }
}

#[test]
fn column_sums_give_the_bits_of_the_row_loop() {
    col_sums_same_as_row_loop::<f32>();
    col_sums_same_as_row_loop::<f64>();
}

#[test]
fn chunk_layer_norms_give_the_bits_of_the_per_row_ones() {
    same_as_per_row::<f32>();
    same_as_per_row::<f64>();
}

#[test]
#[should_panic(expected = "ln_rows: views must be 3 × 8 with contiguous rows")]
fn ln_rows_checks_its_views() {
    let (x, g) = (vec![0f64; 24], vec![1f64; 8]);
    let (mut h, mut y, mut r) = (vec![0f64; 24], vec![0f64; 24], vec![0f64; 3]);
    ln_rows(
        Isa::Scalar,
        MatRef::row_major(&x, 3, 8, 8),
        LnParams {
            g: &g,
            b: &g,
            eps: 0.1,
        },
        MatMut::row_major(&mut h, 3, 8, 8),
        MatMut::row_major(&mut y, 2, 8, 8),
        &mut r,
    );
}

#[test]
#[should_panic(expected = "ln_rows: sizes")]
fn ln_rows_checks_its_buffers() {
    let (x, g) = (vec![0f64; 24], vec![1f64; 8]);
    let (mut h, mut y, mut r) = (vec![0f64; 24], vec![0f64; 24], vec![0f64; 2]);
    ln_rows(
        Isa::Scalar,
        MatRef::row_major(&x, 3, 8, 8),
        LnParams {
            g: &g,
            b: &g,
            eps: 0.1,
        },
        MatMut::row_major(&mut h, 3, 8, 8),
        MatMut::row_major(&mut y, 3, 8, 8),
        &mut r,
    );
}
