//! The double-double GEMM against a naive Dd triple loop (same operations in the same order,
//! so equal bits), through every entry point, with strided and transposed operands.

use super::*;
use crate::Dd;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn data(len: usize, seed: u64) -> Vec<Dd> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len)
        .map(|_| {
            Dd::from_f64(rng.random_range(-2.0..2.0)) / Dd::from_f64(rng.random_range(1.0..5.0))
        })
        .collect()
}

/// `C ← α·A·B + β·C` by the plain loop, for the row-major `A` (m×k, or k×m stored if `ta`),
/// `B` (k×n) and `C` (m×n).
fn naive(
    (m, k, n): (usize, usize, usize),
    alpha: Dd,
    (a, ta): (&[Dd], bool),
    b: &[Dd],
    beta: Dd,
    c: &mut [Dd],
) {
    for i in 0..m {
        for j in 0..n {
            let mut s = Dd::ZERO;
            for p in 0..k {
                let aip = if ta { a[p * m + i] } else { a[i * k + p] };
                s += aip * b[p * n + j];
            }
            let ab = alpha * s;
            c[i * n + j] = if beta == Dd::ZERO {
                ab
            } else {
                ab + beta * c[i * n + j]
            };
        }
    }
}

type Entry = fn(Dd, MatRef<'_, Dd>, MatRef<'_, Dd>, Dd, MatMut<'_, Dd>);

fn entries() -> Vec<(&'static str, Entry)> {
    vec![
        ("gemm", gemm::<Dd>),
        ("gemm_par", gemm_par::<Dd>),
        ("reference_gemm", reference_gemm::<Dd>),
        ("Real::gemm", <Dd as Real>::gemm),
    ]
}

/// The entry points with an explicit variant and path, each on every variant and path.
fn with_entries() -> Vec<(&'static str, Isa, Path)> {
    let paths = [Path::Auto, Path::Packed, Path::Direct];
    let mut v = Vec::new();
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        for path in paths {
            v.push(("gemm_with", isa, path));
            v.push(("gemm_par_with", isa, path));
        }
    }
    v
}

#[test]
fn every_entry_point_equals_the_naive_loop() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("pool");
    for &(m, k, n) in &[(1, 1, 1), (3, 5, 2), (7, 1, 9), (17, 13, 6), (4, 0, 3)] {
        for ta in [false, true] {
            let (a, b, c0) = (data(m * k, 1), data(k * n, 2), data(m * n, 3));
            let (rsa, csa) = if ta { (1, m as isize) } else { (k as isize, 1) };
            for (alpha, beta) in [
                (Dd::ONE, Dd::ZERO),
                (Dd::from_f64(-0.75), Dd::ONE / Dd::from_f64(3.0)),
            ] {
                let mut want = c0.clone();
                naive((m, k, n), alpha, (&a, ta), &b, beta, &mut want);
                for (name, f) in entries() {
                    let mut c = if beta == Dd::ZERO {
                        vec![Dd::NAN; m * n]
                    } else {
                        c0.clone()
                    };
                    let (av, bv) = (
                        MatRef::new(&a, m, k, rsa, csa),
                        MatRef::row_major(&b, k, n, n),
                    );
                    pool.install(|| f(alpha, av, bv, beta, MatMut::row_major(&mut c, m, n, n)));
                    let same = c
                        .iter()
                        .zip(&want)
                        .all(|(x, y)| x.to_bits_u64() == y.to_bits_u64());
                    assert!(same, "{name} {m}x{k}x{n} ta={ta} beta={beta}");
                }
                for (name, isa, path) in with_entries() {
                    let mut c = if beta == Dd::ZERO {
                        vec![Dd::NAN; m * n]
                    } else {
                        c0.clone()
                    };
                    let f = if name == "gemm_with" {
                        gemm_with::<Dd>
                    } else {
                        gemm_par_with::<Dd>
                    };
                    let (av, bv) = (
                        MatRef::new(&a, m, k, rsa, csa),
                        MatRef::row_major(&b, k, n, n),
                    );
                    pool.install(|| {
                        f(
                            isa,
                            path,
                            alpha,
                            av,
                            bv,
                            beta,
                            MatMut::row_major(&mut c, m, n, n),
                        )
                    });
                    let same = c
                        .iter()
                        .zip(&want)
                        .all(|(x, y)| x.to_bits_u64() == y.to_bits_u64());
                    assert!(same, "{name} {isa:?} {path:?} {m}x{k}x{n} ta={ta}");
                }
            }
        }
    }
}

#[test]
fn alpha_zero_reads_neither_a_nor_b_and_strided_c_works() {
    let (m, k, n) = (3, 4, 2);
    let nan = vec![Dd::NAN; m * k.max(n) * 2];
    let c0 = data(2 * m * n, 9);
    let mut c = c0.clone();
    let beta = Dd::from_f64(0.5);
    // C column-major with a gap: element (i, j) at 2·(i + m·j).
    gemm(
        Dd::ZERO,
        MatRef::row_major(&nan, m, k, k),
        MatRef::row_major(&nan, k, n, n),
        beta,
        MatMut::new(&mut c, m, n, 2, 2 * m as isize),
    );
    for (idx, (&got, &was)) in c.iter().zip(&c0).enumerate() {
        let want = if idx % 2 == 0 { beta * was } else { was };
        assert_eq!(got, want, "{idx}");
    }
    assert_eq!(tile_shape::<Dd>(Isa::Avx512), (1, 1));
}

#[test]
fn dd_product_is_double_double_accurate() {
    // A = [1/3, 1/7], B = [3, 7]ᵀ: A·B = 2 to ~u², where f64 would be off by 2⁻⁵².
    let a = [Dd::ONE / Dd::from_f64(3.0), Dd::ONE / Dd::from_f64(7.0)];
    let b = [Dd::from_f64(3.0), Dd::from_f64(7.0)];
    let mut c = [Dd::NAN];
    gemm(
        Dd::ONE,
        MatRef::row_major(&a, 1, 2, 2),
        MatRef::row_major(&b, 2, 1, 1),
        Dd::ZERO,
        MatMut::row_major(&mut c, 1, 1, 1),
    );
    assert!((c[0] - Dd::TWO).abs() < Dd::from_f64(1e-31));
}
