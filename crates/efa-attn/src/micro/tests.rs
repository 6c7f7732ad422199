//! The fused row kernels against the separate calls they replace: the same bits, for every
//! instruction set, both element types, row counts and awkward widths (vector tails).

use super::{ds_row, ds_rows, softmax_rows};
use efa_num::simd::{self, Isa};
use efa_num::Real;

/// Deterministic values in `[-lo, lo)` (xorshift), a few exact zeros and repeats among them.
fn values<T: Real>(n: usize, seed: u64, lo: f64) -> Vec<T> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            match i % 11 {
                3 => T::ZERO,
                7 => T::from_f64(lo * 0.5),
                _ => T::from_f64((2.0 * u - 1.0) * lo),
            }
        })
        .collect()
}

fn bits<T: Real>(x: &[T]) -> Vec<u64> {
    x.iter().map(|v| v.to_f64().to_bits()).collect()
}

const ROWS: [usize; 4] = [0, 1, 3, 6];

fn softmax_matches<T: Real>() {
    for isa in Isa::ALL {
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
    for isa in Isa::ALL {
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
