//! Every variant and path against a naive f64 product at awkward shapes, strides, α and β;
//! the parallel entry's bitwise determinism over thread counts; `Real::gemm` against
//! matrixmultiply.

use super::*;

/// Deterministic values in [-1, 1) (xorshift; tests never draw from the OS).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            2.0 * ((s >> 11) as f64 / (1u64 << 53) as f64) - 1.0
        })
        .collect()
}

/// An `r × c` matrix stored row-major with leading dimension `c + pad`, or transposed
/// (stored `c × r` with leading dimension `r + pad`): storage and (row, column) strides of
/// the logical `r × c` matrix.
fn matrix<T: Real>(r: usize, c: usize, trans: bool, seed: u64) -> (Vec<T>, isize, isize) {
    let pad = 3;
    let (rows, ld) = if trans { (c, r + pad) } else { (r, c + pad) };
    let data = values(rows.max(1) * ld, seed)
        .into_iter()
        .map(T::from_f64)
        .collect();
    if trans {
        (data, 1, ld as isize)
    } else {
        (data, ld as isize, 1)
    }
}

/// Layouts of C: row-major with a padded row, column-major with a padded column.
#[derive(Clone, Copy, Debug)]
enum CLayout {
    Rows,
    Cols,
}

#[derive(Clone, Copy, Debug)]
enum Entry {
    Single(Isa, Path),
    Par(Isa, Path),
}

/// One product of the tests: shape `(m, k, n)`, whether `A` and `B` are stored transposed,
/// α, β and the layout of `C`.
#[derive(Clone, Copy, Debug)]
struct Case {
    mkn: (usize, usize, usize),
    ta: bool,
    tb: bool,
    alpha: f64,
    beta: f64,
    cl: CLayout,
}

/// Runs one product through `entry` and checks every element against the f64 reference with
/// a tolerance of 3·(k + 2)·ε·(|α|·Σ_p |A||B| + |β|·|C|), and the padding of C untouched.
fn check<T: Real>(entry: Entry, case: Case, seed: u64) -> Vec<T> {
    let Case {
        mkn: (m, k, n),
        ta,
        tb,
        alpha,
        beta,
        cl,
    } = case;
    let (a, rsa, csa) = matrix::<T>(m, k, ta, seed);
    let (b, rsb, csb) = matrix::<T>(k, n, tb, seed + 1);
    let (rsc, csc, len) = match cl {
        CLayout::Rows => ((n + 2) as isize, 1, m * (n + 2)),
        CLayout::Cols => (1, (m + 1) as isize, n * (m + 1)),
    };
    let sentinel = T::from_f64(7.25);
    let c0: Vec<T> = values(len, seed + 2).into_iter().map(T::from_f64).collect();
    let mut c: Vec<T> = if beta == 0.0 {
        vec![T::NAN; len]
    } else {
        c0.clone()
    };
    let inside = |idx: usize| -> Option<(usize, usize)> {
        let (i, j) = match cl {
            CLayout::Rows => (idx / (n + 2), idx % (n + 2)),
            CLayout::Cols => (idx % (m + 1), idx / (m + 1)),
        };
        (i < m && j < n).then_some((i, j))
    };
    for (idx, x) in c.iter_mut().enumerate() {
        if inside(idx).is_none() {
            *x = sentinel;
        }
    }
    let (al, be) = (T::from_f64(alpha), T::from_f64(beta));
    let (av, bv) = (
        MatRef::new(&a, m, k, rsa, csa),
        MatRef::new(&b, k, n, rsb, csb),
    );
    let cv = MatMut::new(&mut c, m, n, rsc, csc);
    match entry {
        Entry::Single(isa, path) => gemm_with(isa, path, al, av, bv, be, cv),
        Entry::Par(isa, path) => gemm_par_with(isa, path, al, av, bv, be, cv),
    }
    let at = |v: &[T], i: usize, j: usize, rs: isize, cs: isize| {
        v[(i as isize * rs + j as isize * cs) as usize].to_f64()
    };
    let eps = T::EPSILON.to_f64();
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut mag) = (0.0, 0.0);
            for p in 0..k {
                let x = at(&a, i, p, rsa, csa) * at(&b, p, j, rsb, csb);
                s += x;
                mag += x.abs();
            }
            let cij = at(&c0, i, j, rsc, csc);
            let want = alpha * s + if beta == 0.0 { 0.0 } else { beta * cij };
            let tol =
                3.0 * (k as f64 + 2.0) * eps * (alpha.abs() * mag + beta.abs() * cij.abs()) + 1e-30;
            let got = at(&c, i, j, rsc, csc);
            assert!(
                (got - want).abs() <= tol,
                "{} {entry:?} {m}×{k}×{n} ta={ta} tb={tb} α={alpha} β={beta} {cl:?}: C[{i},{j}] = {got}, want {want} (tol {tol:e})",
                T::NAME
            );
        }
    }
    for (idx, x) in c.iter().enumerate() {
        if inside(idx).is_none() {
            assert_eq!(
                x.to_f64(),
                sentinel.to_f64(),
                "{} {entry:?} {m}×{k}×{n}: padding {idx} written",
                T::NAME
            );
        }
    }
    c
}

fn isas() -> Vec<Isa> {
    Isa::ALL
        .into_iter()
        .filter(|isa| {
            let ok = isa.is_supported();
            if !ok {
                eprintln!(
                    "note: this CPU lacks {}; its GEMM variant is not tested",
                    isa.name()
                );
            }
            ok
        })
        .collect()
}

/// Awkward shapes for variant `isa`: empty, one, MR ± 1, NR ± 1, KC ± 1, MC + 1, NC + 1,
/// primes and the models' own.
fn shapes<T: Real>(isa: Isa) -> Vec<(usize, usize, usize)> {
    let (mr, nr) = tile_shape::<T>(isa);
    let kc = KC_BYTES / T::BYTES;
    vec![
        (0, 0, 0),
        (0, 4, 3),
        (3, 0, 4),
        (4, 3, 0),
        (1, 1, 1),
        (mr - 1, 5, nr - 1),
        (mr, 7, nr),
        (mr + 1, 9, nr + 1),
        (2 * mr + 1, 3, 2 * nr - 1),
        (13, kc - 1, 33),
        (11, kc, 17),
        (13, kc + 1, 33),
        (5, 2 * kc + 3, 3),
        (7, 11, 13),
        (37, 41, 43),
        (44, 32, 32),
        (128, 32, 64),
        (300, 17, 129),
        (MC + 1, 3, 5),
        (3, 2, NC + 1),
        (23, 3000, 37),
    ]
}

const ALPHAS: [f64; 3] = [1.0, 0.5, -2.0];
const BETAS: [f64; 3] = [0.0, 1.0, 0.3];

fn every_variant_matches_the_reference<T: Real>() {
    let mut case = 0u64;
    for isa in isas() {
        for path in [Path::Packed, Path::Direct, Path::Auto] {
            for &shape in &shapes::<T>(isa) {
                for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                    case += 1;
                    let alpha = ALPHAS[(case % 3) as usize];
                    let beta = BETAS[((case / 3) % 3) as usize];
                    let cl = if case.is_multiple_of(5) {
                        CLayout::Cols
                    } else {
                        CLayout::Rows
                    };
                    check::<T>(
                        Entry::Single(isa, path),
                        Case {
                            mkn: shape,
                            ta,
                            tb,
                            alpha,
                            beta,
                            cl,
                        },
                        case,
                    );
                }
            }
        }
    }
}

#[test]
fn every_variant_matches_the_reference_f32() {
    every_variant_matches_the_reference::<f32>();
}

#[test]
fn every_variant_matches_the_reference_f64() {
    every_variant_matches_the_reference::<f64>();
}

/// Every (α, β) pair on one awkward shape per variant, both element types; β = 0 with a NaN C.
#[test]
fn every_alpha_beta_pair() {
    for isa in isas() {
        for alpha in ALPHAS {
            for beta in BETAS {
                for cl in [CLayout::Rows, CLayout::Cols] {
                    check::<f32>(
                        Entry::Single(isa, Path::Auto),
                        Case {
                            mkn: (29, 31, 37),
                            ta: false,
                            tb: true,
                            alpha,
                            beta,
                            cl,
                        },
                        5,
                    );
                    check::<f64>(
                        Entry::Single(isa, Path::Packed),
                        Case {
                            mkn: (29, 31, 37),
                            ta: true,
                            tb: false,
                            alpha,
                            beta,
                            cl,
                        },
                        6,
                    );
                }
            }
        }
    }
}

/// α = 0 and k = 0 give C ← β·C and read neither A nor B (here full of NaN).
#[test]
fn alpha_zero_and_empty_k_scale_c() {
    for isa in isas() {
        for (alpha, k) in [(0.0, 4), (1.0, 0)] {
            for beta in [0.0, 0.5] {
                let a = [f64::NAN; 12];
                let b = [f64::NAN; 12];
                let mut c = vec![f64::NAN; 9];
                if beta != 0.0 {
                    c = (0..9).map(|x| x as f64).collect();
                }
                gemm_with(
                    isa,
                    Path::Auto,
                    alpha,
                    MatRef::row_major(&a, 3, k, k),
                    MatRef::row_major(&b, k, 3, 3),
                    beta,
                    MatMut::row_major(&mut c, 3, 3, 3),
                );
                for (i, x) in c.iter().enumerate() {
                    assert_eq!(*x, beta * i as f64, "{isa:?} α={alpha} k={k} β={beta}");
                }
            }
        }
    }
}

/// The parallel entry at 1, 2 and 3 threads gives the same bits, equal to the single entry,
/// for every variant and path, row and column splits, several KC blocks.
#[test]
fn parallel_entry_is_bitwise_deterministic() {
    fn run<T: Real>(isa: Isa, path: Path, shape: (usize, usize, usize), ta: bool) {
        let single = check::<T>(
            Entry::Single(isa, path),
            Case {
                mkn: shape,
                ta,
                tb: false,
                alpha: 0.5,
                beta: 0.3,
                cl: CLayout::Rows,
            },
            9,
        );
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("pool");
            let par = pool.install(|| {
                check::<T>(
                    Entry::Par(isa, path),
                    Case {
                        mkn: shape,
                        ta,
                        tb: false,
                        alpha: 0.5,
                        beta: 0.3,
                        cl: CLayout::Rows,
                    },
                    9,
                )
            });
            let same = single
                .iter()
                .zip(&par)
                .all(|(x, y)| x.to_bits_u64() == y.to_bits_u64());
            assert!(
                same,
                "{} {isa:?} {path:?} {shape:?} at {threads} threads differs from one",
                T::NAME
            );
        }
    }
    for isa in isas() {
        for path in [Path::Auto, Path::Packed, Path::Direct] {
            for (shape, ta) in [
                ((157, 900, 45), false),
                ((19, 450, 301), true),
                ((61, 30, 70), false),
            ] {
                run::<f32>(isa, path, shape, ta);
                run::<f64>(isa, path, shape, ta);
            }
        }
    }
}

/// The direct and packed paths sum in the same blocks with the same tile: equal bits.
#[test]
fn direct_and_packed_paths_agree_bitwise() {
    for isa in isas() {
        for shape in [(50, 1000, 70), (44, 32, 32), (25, 100, 33)] {
            let p = check::<f32>(
                Entry::Single(isa, Path::Packed),
                Case {
                    mkn: shape,
                    ta: false,
                    tb: true,
                    alpha: -2.0,
                    beta: 1.0,
                    cl: CLayout::Rows,
                },
                3,
            );
            let d = check::<f32>(
                Entry::Single(isa, Path::Direct),
                Case {
                    mkn: shape,
                    ta: false,
                    tb: true,
                    alpha: -2.0,
                    beta: 1.0,
                    cl: CLayout::Rows,
                },
                3,
            );
            assert!(
                p.iter()
                    .zip(&d)
                    .all(|(x, y)| x.to_bits_u64() == y.to_bits_u64()),
                "{isa:?} {shape:?}"
            );
        }
    }
}

/// `Real::gemm` (efa's GEMM) agrees with matrixmultiply to round-off.
#[test]
fn real_gemm_agrees_with_matrixmultiply() {
    fn run<T: Real>(tol: f64) {
        for &(m, k, n) in &[(44, 32, 32), (128, 32, 64), (300, 17, 129), (70, 500, 90)] {
            let (a, rsa, csa) = matrix::<T>(m, k, true, 1);
            let (b, rsb, csb) = matrix::<T>(k, n, false, 2);
            let c0: Vec<T> = values(m * n, 3).into_iter().map(T::from_f64).collect();
            let (mut c, mut r) = (c0.clone(), c0);
            let (av, bv) = (
                MatRef::new(&a, m, k, rsa, csa),
                MatRef::new(&b, k, n, rsb, csb),
            );
            T::gemm(T::HALF, av, bv, T::ONE, MatMut::row_major(&mut c, m, n, n));
            reference_gemm(T::HALF, av, bv, T::ONE, MatMut::row_major(&mut r, m, n, n));
            for (x, y) in c.iter().zip(&r) {
                let (x, y) = (x.to_f64(), y.to_f64());
                assert!(
                    (x - y).abs() <= tol * (k as f64) * (1.0 + y.abs()),
                    "{} {m}×{k}×{n}: {x} vs {y}",
                    T::NAME
                );
            }
        }
    }
    run::<f32>(4.0 * f32::EPSILON as f64);
    run::<f64>(4.0 * f64::EPSILON);
}

#[test]
fn tile_shapes_are_the_documented_ones() {
    assert_eq!(tile_shape::<f32>(Isa::Scalar), (4, 4));
    if Isa::Avx2.is_supported() {
        assert_eq!(tile_shape::<f32>(Isa::Avx2), (6, 16));
        assert_eq!(tile_shape::<f64>(Isa::Avx2), (2, 8));
    }
    if Isa::Avx512.is_supported() {
        assert_eq!(tile_shape::<f32>(Isa::Avx512), (12, 32));
        assert_eq!(tile_shape::<f64>(Isa::Avx512), (4, 16));
    }
}

/// Negative strides (rows of A read bottom-up, columns of B right-to-left, C written
/// bottom-up) give the product of the reversed matrices, on every variant and path.
#[test]
fn negative_strides_are_followed() {
    let (m, k, n) = (23, 19, 37);
    let a = values(m * k, 11);
    let b = values(k * n, 12);
    for isa in isas() {
        for path in [Path::Packed, Path::Direct, Path::Auto] {
            let mut c = vec![f64::NAN; m * n];
            // SAFETY: A's rows run from the last (offset (m−1)·k) with stride −k, B's columns
            // from the last (offset n−1) with stride −1, C's rows from the last with stride −n:
            // every address stays inside its buffer, and `c` is borrowed uniquely.
            let (av, bv, cv) = unsafe {
                (
                    MatRef::from_raw_parts(a.as_ptr().add((m - 1) * k), m, k, -(k as isize), 1),
                    MatRef::from_raw_parts(b.as_ptr().add(n - 1), k, n, n as isize, -1),
                    MatMut::from_raw_parts(c.as_mut_ptr().add((m - 1) * n), m, n, -(n as isize), 1),
                )
            };
            gemm_with(isa, path, 1.0, av, bv, 0.0, cv);
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|p| a[(m - 1 - i) * k + p] * b[p * n + n - 1 - j])
                        .sum();
                    let got = c[(m - 1 - i) * n + j];
                    assert!(
                        (got - want).abs() <= 1e-13,
                        "{isa:?} {path:?} C[{i},{j}] = {got}, want {want}"
                    );
                }
            }
        }
    }
}
