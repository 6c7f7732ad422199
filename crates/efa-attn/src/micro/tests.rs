//! The fused row kernels against the separate calls they replace: the same bits, for every
//! instruction set, both element types, row counts and awkward widths (vector tails).

use super::{ds_row, ds_rows, probabilities, scale_rows, softmax_rows};
use efa_num::simd::{self, Isa};
use efa_num::Real;
use std::mem::MaybeUninit;

/// Deterministic values in `[-lo, lo)` (xorshift), a few exact zeros and repeats among them.
fn values<T: Real>(n: usize, seed: u64, lo: f64) -> Vec<T> {
    efa_check::unit_values(seed)
        .take(n)
        .enumerate()
        .map(|(i, u)| match i % 11 {
            3 => T::ZERO,
            7 => T::from_f64(lo * 0.5),
            _ => T::from_f64((2.0 * u - 1.0) * lo),
        })
        .collect()
}

fn bits<T: Real>(x: &[T]) -> Vec<u64> {
    x.iter().map(|v| v.to_f64().to_bits()).collect()
}

const ROWS: [usize; 4] = [0, 1, 3, 6];

fn softmax_matches<T: Real>() {
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        for rows in ROWS {
            for n in 0..=70usize {
                let ld = n.div_ceil(16).max(1) * 16 + if n % 3 == 0 { 16 } else { 0 };
                let x = values::<T>(rows * ld, (rows * 1000 + n) as u64, 30.0);
                let mut want = x.clone();
                for r in 0..rows {
                    let row = &mut want[r * ld..r * ld + n];
                    let m = simd::max_with(isa, row);
                    let z = simd::exp_sub_sum_with(isa, row, m);
                    simd::scale_with(isa, T::ONE / z, row);
                }
                let mut got = x.clone();
                softmax_rows(isa, &mut got, ld, rows, n);
                assert_eq!(bits(&got), bits(&want), "{isa:?} rows {rows} n {n}");
            }
        }
    }
}

fn ds_matches<T: Real>() {
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        for rows in ROWS {
            for n in 0..=70usize {
                let ld = n.div_ceil(16).max(1) * 16;
                let p = values::<T>(rows * ld, (rows * 77 + n) as u64, 1.0);
                let dp = values::<T>(rows * ld, (rows * 91 + n + 5) as u64, 3.0);
                let mut want = dp.clone();
                for r in 0..rows {
                    let (pr, dr) = (&p[r * ld..r * ld + n], &mut want[r * ld..r * ld + n]);
                    let d = simd::dot_with(isa, pr, dr);
                    ds_row(isa, pr, dr, d);
                }
                let mut got = dp.clone();
                ds_rows(isa, &p, &mut got, ld, rows, n);
                assert_eq!(bits(&got), bits(&want), "{isa:?} rows {rows} n {n}");
            }
        }
    }
}

fn scale_matches<T: Real>() {
    let alpha = T::from_f64(-0.37);
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        for rows in [1, 2, 3, 7] {
            for n in 1..=70usize {
                // Padded rows (w > n) and contiguous ones (w == n, one run of rows·n elements
                // that crosses the four-vector steps, single vectors and single elements).
                for w in [n, n.div_ceil(16) * 16 + 16] {
                    let src = values::<T>(rows * w, (rows * 131 + n + w) as u64, 5.0);
                    let sentinel = T::from_f64(1234.5);
                    let mut out = vec![MaybeUninit::new(sentinel); rows * n + 3];
                    scale_rows(isa, rows, n, &src, w, alpha, &mut out);
                    // SAFETY: every element was initialised (the sentinel, then the kernel).
                    let got: Vec<T> = out.iter().map(|x| unsafe { x.assume_init() }).collect();
                    let mut want = vec![sentinel; rows * n + 3];
                    for r in 0..rows {
                        for c in 0..n {
                            want[r * n + c] = alpha * src[r * w + c];
                        }
                    }
                    assert_eq!(bits(&got), bits(&want), "{isa:?} rows {rows} n {n} w {w}");
                }
            }
        }
    }
}

/// The scaled copy of accumulator rows: one multiplication per element, every element of the
/// output's first `rows·n` written and nothing past them, on every variant.
#[test]
fn scale_rows_gives_the_definition_bits() {
    scale_matches::<f32>();
    scale_matches::<f64>();
}

fn probabilities_match<T: Real>() {
    let nan_bits = |x: &[T]| -> Vec<u64> {
        x.iter()
            .map(|v| if v.is_nan() { 1 } else { v.to_f64().to_bits() })
            .collect()
    };
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        for bkp in [16, 64, 128] {
            // Visible counts around every vector width, none and all; `lse` finite, −∞, NaN.
            let cnt: Vec<usize> = (0..=bkp).step_by(if bkp > 64 { 7 } else { 1 }).collect();
            let mq = cnt.len();
            let s = values::<T>(mq * bkp, bkp as u64, 20.0);
            let lse: Vec<T> = (0..mq)
                .map(|r| match r % 9 {
                    4 => T::NEG_INFINITY,
                    6 => T::NAN,
                    _ => T::from_f64(3.0 + r as f64 * 0.1),
                })
                .collect();
            let mut got = s.clone();
            // SAFETY: `got` holds mq rows of bkp, `cnt` and `lse` mq entries, counts ≤ bkp,
            // bkp a multiple of 16, and `isa` is supported.
            let k_eff = unsafe { probabilities(isa, mq, &mut got, bkp, &cnt, &lse) };
            let mut want = vec![T::ZERO; mq * bkp];
            let mut k_want = 0;
            for r in 0..mq {
                let (c, l) = (cnt[r], lse[r]);
                if c == 0 || l == T::NEG_INFINITY {
                    continue;
                }
                k_want = k_want.max(c);
                let row = &mut want[r * bkp..(r + 1) * bkp];
                for j in 0..c {
                    row[j] = s[r * bkp + j] - l;
                }
                simd::exp_slice_with(Isa::Scalar, &mut row[..c]);
                // Hidden entries up to the padded count: exp(−∞ − lse), NaN only for NaN lse.
                let pad = c.div_ceil(16) * 16;
                for x in &mut row[c..pad.min(bkp)] {
                    *x = if l.is_nan() { T::NAN } else { T::ZERO };
                }
            }
            assert_eq!(nan_bits(&got), nan_bits(&want), "{isa:?} bkp {bkp}");
            assert_eq!(k_eff, k_want, "{isa:?} bkp {bkp}");
        }
    }
}

/// The backward's recomputed probabilities against the one-lane exponential of each visible
/// entry (and 0 past it), on every variant: the grouping of a row's vectors side by side and
/// the masked last vector change no bit.
#[test]
fn probabilities_give_the_one_lane_bits() {
    probabilities_match::<f32>();
    probabilities_match::<f64>();
}

#[test]
fn softmax_rows_gives_the_bits_of_the_separate_calls() {
    softmax_matches::<f32>();
    softmax_matches::<f64>();
}

#[test]
fn ds_rows_gives_the_bits_of_the_separate_calls() {
    ds_matches::<f32>();
    ds_matches::<f64>();
}

#[test]
#[should_panic(expected = "softmax_rows")]
fn softmax_rows_checks_the_slice() {
    let mut p = vec![0f32; 40];
    softmax_rows(Isa::Scalar, &mut p, 16, 3, 10);
}

/// `C (+)= alpha·A·B` by definition: each element one fused multiply-add chain over `p` in
/// index order, from 0 (or from `C` when accumulating), then scaled when not accumulating. In
/// f64 the chain is compensated (`Dot2`, written out here in scalar operations): each product
/// split exactly by `mul_add`, added by TwoSum, the errors summed apart and added at the end.
fn gemm_reference<T: Real>(
    (m, n, k): (usize, usize, usize),
    (a, (rsa, csa)): (&[T], (usize, usize)),
    (b, ldb): (&[T], usize),
    (c, ldc): (&mut [T], usize),
    accumulate: bool,
    alpha: T,
) {
    for i in 0..m {
        for j in 0..n {
            let mut s = if accumulate { c[i * ldc + j] } else { T::ZERO };
            let mut e = T::ZERO;
            for p in 0..k {
                let (x, y) = (a[i * rsa + p * csa], b[p * ldb + j]);
                if T::NAME == "f64" {
                    let pr = x * y;
                    let pe = x.mul_add(y, -pr);
                    let t = s + pr;
                    let z = t - s;
                    e += (s - (t - z)) + (pr - z) + pe;
                    s = t;
                } else {
                    s = x.mul_add(y, s);
                }
            }
            if T::NAME == "f64" {
                s += e;
            }
            if !accumulate && alpha != T::ONE {
                s *= alpha;
            }
            c[i * ldc + j] = s;
        }
    }
}

/// The micro kernel against the definition, bit for bit, on every instruction set: the
/// block's shapes (44 × 44 × 16, 44 × 16 × 44, 220 × 64 × 32, …), one-vector rows (the
/// 12-row strips), exactly three vectors (the 8 × 3 block), vector tails, row counts that
/// leave every remainder strip, depths around the four-step passes, A read by rows, transposed
/// and through two strides, scaled and accumulating.
fn gemm_matches<T: Real>() {
    let shapes = [
        (44, 44, 16),
        (44, 16, 44),
        (44, 32, 64),
        (220, 64, 32),
        (64, 32, 220),
        (37, 16, 5),
        (25, 12, 9),
        (13, 40, 7),
        (12, 48, 3),
        (9, 33, 1),
        (50, 20, 2),
        (7, 70, 11),
        (1, 1, 1),
        (3, 5, 0),
    ];
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        for (s, &(m, n, k)) in shapes.iter().enumerate() {
            let np = super::padded(n);
            // A by rows (csa = 1), transposed (rsa = 1) and strided both ways: the three
            // address forms of the kernel's steps.
            for (form, (rsa, csa)) in [(k + 2, 1), (1, m + 3), (2 * k + 3, 2)]
                .into_iter()
                .enumerate()
            {
                let a = values::<T>((m + 3) * (2 * k + 3) + 1, s as u64 * 31 + 1, 1.0);
                let b = values::<T>(k.max(1) * (np + 16), s as u64 * 31 + 2, 1.0);
                let ldb = np + 16;
                for (accumulate, alpha) in
                    [(false, T::ONE), (false, T::from_f64(0.25)), (true, T::ONE)]
                {
                    let c0 = values::<T>(m * np, s as u64 * 31 + 3, 2.0);
                    let mut want = c0.clone();
                    gemm_reference(
                        (m, n, k),
                        (&a, (rsa, csa)),
                        (&b, ldb),
                        (&mut want, np),
                        accumulate,
                        alpha,
                    );
                    let mut got = c0.clone();
                    super::gemm_checked(
                        isa,
                        (m, n, k),
                        (&a, (rsa, csa)),
                        (&b, ldb),
                        (&mut got, np),
                        accumulate,
                        alpha,
                    );
                    for i in 0..m {
                        let (g, w) = (&got[i * np..i * np + n], &want[i * np..i * np + n]);
                        assert_eq!(
                            bits(g),
                            bits(w),
                            "{isa:?} {m}×{n}×{k} A form {form} acc {accumulate} row {i}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn gemm_gives_the_bits_of_the_definition() {
    gemm_matches::<f32>();
    gemm_matches::<f64>();
}

/// The products that add other rows ([`super::gemm_checked_from`]: a bias and then residual
/// rows) or a bias row ([`super::gemm_checked_bias_into`]) against the definition written as
/// separate passes (the product from zero, then the bias, then the rows), bit for bit, on every
/// instruction set.
fn gemm_from_matches<T: Real>() {
    // The block's shapes, the 8 × 3 block (17 × 44), 12-row strips (25 × 12, 26 × 8), tails.
    let shapes = [
        (44, 32, 32),
        (220, 64, 32),
        (17, 44, 5),
        (25, 12, 3),
        (26, 8, 4),
        (13, 40, 7),
        (9, 33, 1),
        (7, 70, 11),
        (3, 5, 0),
    ];
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        for (s, &(m, n, k)) in shapes.iter().enumerate() {
            let np = super::padded(n);
            let (rsa, csa) = (k + 2, 1);
            let a = values::<T>((m + 3) * (k + 2) + 1, s as u64 * 37 + 1, 1.0);
            let ldb = np + 16;
            let b = values::<T>(k.max(1) * ldb, s as u64 * 37 + 2, 1.0);
            let lds = np + 16;
            let start = values::<T>(m * lds, s as u64 * 37 + 3, 2.0);
            let bias = values::<T>(np, s as u64 * 37 + 4, 1.0);
            let what = format!("{isa:?} {m}×{n}×{k}");
            // The product, then the bias, then the start rows.
            let mut want = vec![T::ZERO; m * np];
            gemm_reference(
                (m, n, k),
                (&a, (rsa, csa)),
                (&b, ldb),
                (&mut want, np),
                false,
                T::ONE,
            );
            for i in 0..m {
                for j in 0..np {
                    let y = &mut want[i * np + j];
                    *y = (*y + bias[j]) + start[i * lds + j];
                }
            }
            let mut got = values::<T>(m * np, 9, 5.0);
            super::gemm_checked_from(
                isa,
                (m, n, k),
                (&a, (rsa, csa)),
                (&b, ldb),
                ((&start, lds), &bias),
                (&mut got, np),
            );
            for i in 0..m {
                let (g, w) = (&got[i * np..i * np + n], &want[i * np..i * np + n]);
                assert_eq!(bits(g), bits(w), "from {what} row {i}");
            }
            // The product, then the bias row alone, into unwritten rows.
            let mut want = vec![T::ZERO; m * np];
            gemm_reference(
                (m, n, k),
                (&a, (rsa, csa)),
                (&b, ldb),
                (&mut want, np),
                false,
                T::ONE,
            );
            for i in 0..m {
                for j in 0..np {
                    want[i * np + j] += bias[j];
                }
            }
            let mut got = vec![std::mem::MaybeUninit::<T>::uninit(); m * np];
            super::gemm_checked_bias_into(
                isa,
                (m, n, k),
                (&a, (rsa, csa)),
                (&b, ldb),
                &bias,
                (&mut got, np),
            );
            for i in 0..m {
                // SAFETY: the product wrote columns [0, n) of every row.
                let g: Vec<T> = got[i * np..i * np + n]
                    .iter()
                    .map(|v| unsafe { v.assume_init() })
                    .collect();
                assert_eq!(
                    bits(&g),
                    bits(&want[i * np..i * np + n]),
                    "bias {what} row {i}"
                );
            }
        }
    }
}

#[test]
fn products_from_start_rows_give_the_bits_of_the_definition() {
    gemm_from_matches::<f32>();
    gemm_from_matches::<f64>();
}

/// `softmax_cols_keep` and `softmax_cols_again` (from what the first kept, NaN-filled
/// beforehand: every entry read must be written) on the scores `t` give the bits of
/// `softmax_cols` on them, element by element.
fn keep_and_again_match<T: Real>(
    isa: Isa,
    t: &[T],
    (ld, n, cols): (usize, usize, usize),
    what: &str,
) {
    use super::{softmax_cols, softmax_cols_again, softmax_cols_keep};
    let (mut want, mut kept, mut again) = (t.to_vec(), t.to_vec(), t.to_vec());
    let mut stats = vec![T::from_f64(f64::NAN); 2 * ld];
    softmax_cols(isa, &mut want, ld, n, cols);
    softmax_cols_keep(isa, &mut kept, ld, n, cols, &mut stats);
    softmax_cols_again(isa, &mut again, ld, n, cols, &stats);
    // Bit for bit, except that a NaN matches any NaN: Rust leaves the sign and payload of a
    // NaN an operation produces unspecified (the optimiser may swap a product's operands, and
    // x86 returns the first NaN operand), so two builds may differ there and only there.
    let same =
        |a: T, b: T| a.to_f64().to_bits() == b.to_f64().to_bits() || a.is_nan() && b.is_nan();
    for (at, ((&x, &y), &z)) in want.iter().zip(&kept).zip(&again).enumerate() {
        let ctx = format!("{what} {isa:?} {} cols {cols} n {n} at {at}", T::NAME);
        assert!(same(x, y), "kept {ctx}: {x} vs {y}");
        assert!(same(x, z), "again {ctx}: {x} vs {z}");
    }
}

/// The column kernels on a transposed block against the row kernels on the block itself: the
/// same bits per element, for every instruction set, both element types, row (key) counts
/// around the vector widths and column (query) counts that leave partial vector blocks, with
/// −∞ scores (masked keys), large magnitudes and ties among the inputs; the padding columns end
/// as zeros.
fn cols_match<T: Real>() {
    use super::{ds_cols, padded, softmax_cols};
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        for cols in [1, 3, 8, 13, 16, 17, 44, 50] {
            for n in [
                1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 44, 48, 63, 64, 65, 97, 132,
            ] {
                let ld = padded(cols);
                let seed = (cols * 1000 + n) as u64;
                // Row-major scores (cols rows of n) and their transpose (n rows of ld).
                let mut s = values::<T>(cols * n, seed, 30.0);
                for (i, x) in s.iter_mut().enumerate() {
                    if i % 13 == 5 {
                        *x = T::NEG_INFINITY;
                    }
                }
                let mut t = vec![T::ZERO; n * ld];
                for i in 0..cols {
                    for j in 0..n {
                        t[j * ld + i] = s[i * n + j];
                    }
                }
                // The same scores through `softmax_cols_keep`, and formed again from what it
                // kept; also with a column of −∞ only, a NaN and a +∞ among the real columns.
                keep_and_again_match(isa, &t, (ld, n, cols), "finite");
                let mut odd = t.clone();
                for j in 0..n {
                    odd[j * ld] = T::NEG_INFINITY;
                }
                odd[(n / 2) * ld + cols / 2] = T::from_f64(f64::NAN);
                odd[(n - 1) * ld + cols - 1] = T::INFINITY;
                keep_and_again_match(isa, &odd, (ld, n, cols), "non-finite");
                softmax_rows(isa, &mut s, n, cols, n);
                softmax_cols(isa, &mut t, ld, n, cols);
                let dp = values::<T>(cols * n, seed + 7, 3.0);
                let mut dpt = vec![T::ZERO; n * ld];
                for i in 0..cols {
                    for j in 0..n {
                        assert_eq!(
                            t[j * ld + i].to_f64().to_bits(),
                            s[i * n + j].to_f64().to_bits(),
                            "softmax {isa:?} {} cols {cols} n {n} at {i},{j}",
                            T::NAME
                        );
                        dpt[j * ld + i] = dp[i * n + j];
                    }
                    for j in 0..n {
                        for c in cols..ld {
                            assert_eq!(t[j * ld + c], T::ZERO, "padding {isa:?} {cols} {n}");
                        }
                    }
                }
                let mut ds = dp.clone();
                ds_rows(isa, &s, &mut ds, n, cols, n);
                ds_cols(isa, &t, &mut dpt, ld, n, cols);
                for i in 0..cols {
                    for j in 0..n {
                        assert_eq!(
                            dpt[j * ld + i].to_f64().to_bits(),
                            ds[i * n + j].to_f64().to_bits(),
                            "ds {isa:?} {} cols {cols} n {n} at {i},{j}",
                            T::NAME
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn column_kernels_have_the_bits_of_the_row_kernels() {
    cols_match::<f32>();
    cols_match::<f64>();
}
