//! The compensated f64 products against the exact sum (double-double, rounded once) on sums
//! that cancel to ~1e-12 of their terms, where the plain fused sums lose most of their digits:
//! every variant, path and entry point within the `Dot2` bound, and the plain sums of the same
//! data outside it (so the bound is not one any sum meets).

use super::*;
use crate::Dd;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// `A` (m × 2h) and `B` (2h × n), row-major, whose products cancel in pairs: the second half
/// of `A`'s columns repeats the first, scaled by 1 + 2⁻³⁰ (exact), and the second half of
/// `B`'s rows is the first negated plus ~1e-12 of it; magnitudes spread over 2¹⁰ either way
/// and the halves interleaved by a fixed permutation, so the cancelling terms are far apart.
fn cancelling(m: usize, h: usize, n: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let k = 2 * h;
    let wide = |rng: &mut StdRng| {
        let e = rng.random_range(-10..=10);
        rng.random_range(-1.0..1.0) * 2f64.powi(e)
    };
    let mut order: Vec<usize> = (0..k).collect();
    for p in (1..k).rev() {
        order.swap(p, rng.random_range(0..=p));
    }
    let mut a = vec![0.0; m * k];
    for i in 0..m {
        for p in 0..h {
            let x = wide(&mut rng);
            a[i * k + order[p]] = x;
            a[i * k + order[h + p]] = x * (1.0 + 2f64.powi(-30));
        }
    }
    let mut b = vec![0.0; k * n];
    for p in 0..h {
        for j in 0..n {
            let y = wide(&mut rng);
            b[order[p] * n + j] = y;
            b[order[h + p] * n + j] = -y * (1.0 + rng.random_range(-1e-12..1e-12));
        }
    }
    (a, b)
}

#[test]
fn f64_products_are_the_exact_sums_rounded_within_the_dot2_bound() {
    let (m, h, n) = (13, 150, 21);
    let k = 2 * h;
    let (a, b) = cancelling(m, h, n, 7);
    let u = f64::EPSILON / 2.0;
    let gamma = k as f64 * u / (1.0 - k as f64 * u);
    // Exact sums, their magnitudes and the plain f64 sum (index order, fused).
    let mut exact = vec![0.0; m * n];
    let mut tol = vec![0.0; m * n];
    let mut plain_misses = 0;
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut mag, mut plain) = (Dd::ZERO, 0.0, 0.0f64);
            for p in 0..k {
                let (x, y) = (a[i * k + p], b[p * n + j]);
                s += Dd::from_f64(x) * Dd::from_f64(y);
                mag += (x * y).abs();
                plain = x.mul_add(y, plain);
            }
            let e = s.to_f64();
            exact[i * n + j] = e;
            // |Dot2 − Σ| ≤ u·|Σ| + γ_k²·Σ|a·b| (Ogita, Rump, Oishi 2005), plus the exact
            // sum's own rounding to f64 (u·|Σ|).
            tol[i * n + j] = 2.0 * u * e.abs() + gamma * gamma * mag;
            assert!(mag > 1e9 * e.abs(), "C[{i},{j}]: the sum does not cancel");
            if (plain - e).abs() > tol[i * n + j] {
                plain_misses += 1;
            }
        }
    }
    assert!(
        plain_misses > m * n * 9 / 10,
        "the plain sums meet the bound on {} of {} elements: the data do not test it",
        m * n - plain_misses,
        m * n
    );
    let (av, bv) = (
        MatRef::new(&a, m, k, k as isize, 1),
        MatRef::new(&b, k, n, n as isize, 1),
    );
    let mut runs: Vec<(String, Vec<f64>)> = Vec::new();
    type Entry = fn(Isa, Path, f64, MatRef<'_, f64>, MatRef<'_, f64>, f64, MatMut<'_, f64>);
    let entries: [(&str, Entry); 2] = [
        ("gemm_with", gemm_with::<f64>),
        ("gemm_par_with", gemm_par_with::<f64>),
    ];
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        for path in [Path::Packed, Path::Direct, Path::Auto] {
            for (name, entry) in entries {
                let mut c = vec![f64::NAN; m * n];
                entry(
                    isa,
                    path,
                    1.0,
                    av,
                    bv,
                    0.0,
                    MatMut::new(&mut c, m, n, n as isize, 1),
                );
                runs.push((format!("{name} {isa:?} {path:?}"), c));
            }
        }
    }
    // A transposed A (columns contiguous) through the default entry.
    let at: Vec<f64> = (0..k * m).map(|x| a[(x % m) * k + x / m]).collect();
    let mut c = vec![f64::NAN; m * n];
    let atv = MatRef::new(&at, m, k, 1, m as isize);
    gemm(1.0, atv, bv, 0.0, MatMut::new(&mut c, m, n, n as isize, 1));
    runs.push(("gemm, Aᵀ stored".into(), c));
    for (what, c) in &runs {
        for (idx, (&got, &want)) in c.iter().zip(&exact).enumerate() {
            assert!(
                (got - want).abs() <= tol[idx],
                "{what}: C[{},{}] = {got:e}, exact {want:e} (tol {:e})",
                idx / n,
                idx % n,
                tol[idx]
            );
        }
    }
}

/// With `β ≠ 0` and `α ≠ 1` the compensated sum is rounded once and then folded into `C`
/// as the plain products fold theirs: `fma(α, s, β·C)`.
#[test]
fn f64_products_fold_alpha_and_beta_after_the_compensated_sum() {
    let (m, h, n) = (9, 40, 18);
    let k = 2 * h;
    let (a, b) = cancelling(m, h, n, 3);
    let c0: Vec<f64> = (0..m * n).map(|x| (x as f64 * 0.37).sin()).collect();
    let (alpha, beta) = (-2.0, 0.3);
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        let mut c = c0.clone();
        let (av, bv) = (
            MatRef::new(&a, m, k, k as isize, 1),
            MatRef::new(&b, k, n, n as isize, 1),
        );
        gemm_with(
            isa,
            Path::Auto,
            alpha,
            av,
            bv,
            beta,
            MatMut::new(&mut c, m, n, n as isize, 1),
        );
        for i in 0..m {
            for j in 0..n {
                let mut s = Dd::ZERO;
                for p in 0..k {
                    s += Dd::from_f64(a[i * k + p]) * Dd::from_f64(b[p * n + j]);
                }
                let s = s.to_f64();
                let want = alpha.mul_add(s, beta * c0[i * n + j]);
                let got = c[i * n + j];
                let tol = 4.0 * f64::EPSILON * (alpha * s).abs().max(beta * c0[i * n + j]).abs();
                assert!(
                    (got - want).abs() <= tol + 1e-300,
                    "{isa:?} C[{i},{j}] = {got:e}, want {want:e}"
                );
            }
        }
    }
}
