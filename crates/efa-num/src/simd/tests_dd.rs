//! The double-double branches of the row kernels against naive Dd loops (the same operations
//! in the same order, so equal bits), on every variant; and the Dd arm of `simd_by_kind!`.

use super::*;
use crate::Dd;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn row(n: usize, seed: u64) -> Vec<Dd> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            Dd::from_f64(rng.random_range(-3.0..3.0)) / Dd::from_f64(rng.random_range(1.0..7.0))
        })
        .collect()
}

fn lengths() -> impl Iterator<Item = usize> {
    (0..=19).chain([64, 257])
}

fn same(a: &[Dd], b: &[Dd]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits_u64() == y.to_bits_u64())
}

#[test]
fn elem_kind_recognises_dd() {
    assert_eq!(elem_kind::<Dd>(), ElemKind::Dd);
    assert_eq!(elem_kind::<f64>(), ElemKind::F64);
}

#[test]
fn reductions_equal_naive_dd_loops() {
    for n in lengths() {
        let (a, b) = (row(n, 1 + n as u64), row(n, 100 + n as u64));
        let m = Dd::from_f64(0.25);
        let dot_want = a.iter().zip(&b).fold(Dd::ZERO, |s, (&x, &y)| s + x * y);
        let sum_want = a.iter().fold(Dd::ZERO, |s, &x| s + x);
        let max_want = a
            .iter()
            .fold(Dd::NEG_INFINITY, |s, &x| if x > s { x } else { s });
        let se_want = a.iter().fold(Dd::ZERO, |s, &x| s + (x - m).exp());
        for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
            assert_eq!(
                dot_with(isa, &a, &b).to_bits_u64(),
                dot_want.to_bits_u64(),
                "dot {n}"
            );
            assert_eq!(
                sum_with(isa, &a).to_bits_u64(),
                sum_want.to_bits_u64(),
                "sum {n}"
            );
            assert_eq!(
                max_with(isa, &a).to_bits_u64(),
                max_want.to_bits_u64(),
                "max {n}"
            );
            assert_eq!(
                sum_exp_with(isa, &a, m).to_bits_u64(),
                se_want.to_bits_u64(),
                "sum_exp {n}"
            );
        }
        assert_eq!(dot(&a, &b), dot_want);
        assert_eq!(sum(&a), sum_want);
        assert_eq!(max(&a), max_want);
        assert_eq!(sum_exp(&a, m), se_want);
    }
    // NaNs are ignored by max; −∞ contributes exactly 0 to sum_exp.
    let x = [Dd::NAN, Dd::ONE, Dd::NAN];
    assert_eq!(max(&x), Dd::ONE);
    assert_eq!(max::<Dd>(&[]), Dd::NEG_INFINITY);
    assert_eq!(sum_exp(&[Dd::NEG_INFINITY, Dd::ZERO], Dd::ZERO), Dd::ONE);
}

#[test]
fn elementwise_kernels_equal_naive_dd_loops() {
    for n in lengths() {
        let (x, y0) = (row(n, 7 + n as u64), row(n, 70 + n as u64));
        let alpha = Dd::ONE / Dd::from_f64(3.0);
        let m = Dd::from_f64(-0.5);
        for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
            let mut y = y0.clone();
            axpy_with(isa, alpha, &x, &mut y);
            let want: Vec<Dd> = x.iter().zip(&y0).map(|(&a, &b)| alpha * a + b).collect();
            assert!(same(&y, &want), "axpy {n}");

            let mut s = x.clone();
            scale_with(isa, alpha, &mut s);
            let want: Vec<Dd> = x.iter().map(|&a| alpha * a).collect();
            assert!(same(&s, &want), "scale {n}");

            let mut e = x.clone();
            exp_slice_with(isa, &mut e);
            let want: Vec<Dd> = x.iter().map(|&a| a.exp()).collect();
            assert!(same(&e, &want), "exp_slice {n}");

            let mut e = x.clone();
            let total = exp_sub_sum_with(isa, &mut e, m);
            let want: Vec<Dd> = x.iter().map(|&a| (a - m).exp()).collect();
            assert!(same(&e, &want), "exp_sub_sum {n}");
            let want_total = want.iter().fold(Dd::ZERO, |s, &v| s + v);
            assert_eq!(total.to_bits_u64(), want_total.to_bits_u64());
        }
        let mut y = y0.clone();
        axpy(alpha, &x, &mut y);
        let mut z = x.clone();
        scale(alpha, &mut z);
        let mut e = x.clone();
        exp_slice(&mut e);
        let mut f = x.clone();
        exp_sub_sum(&mut f, m);
        assert_eq!((y.len(), z.len(), e.len(), f.len()), (n, n, n, n));
    }
}

#[test]
fn dd_kernels_are_double_double_accurate() {
    // Σ 1/k for k = 1..200, whose f64 sum is off in the 15th digit.
    let x: Vec<Dd> = (1..=200).map(|k| Dd::ONE / Dd::from_usize(k)).collect();
    let exact_order: Dd = x.iter().rev().copied().sum();
    assert!(((sum(&x) - exact_order) / exact_order).abs() < Dd::from_f64(1e-31));
    assert!(
        ((dot(&x, &x) - x.iter().rev().map(|&v| v * v).sum::<Dd>()).abs()) < Dd::from_f64(1e-31)
    );
}

#[test]
fn simd_by_kind_runs_the_bodies_on_the_double_double_lane() {
    // A dispatched body (the dot product's four accumulators) in Dd arithmetic: its AVX-512
    // slot is the one-lane Dd vector, within Dd round-off of the plain sum.
    let mut rng = StdRng::seed_from_u64(11);
    let x: Vec<Dd> = (0..37)
        .map(|_| Dd::new(rng.random_range(-1.0..1.0), rng.random_range(-1e-20..1e-20)))
        .collect();
    let plain: Dd = x.iter().map(|&v| v * v).sum();
    // SAFETY: the one lane is scalar code; both pointers are valid for x.len() elements.
    let got: Dd = crate::simd_by_kind!(Dd, E => unsafe {
        bodies::dot_body::<<E as SimdElem>::Avx512>(x.as_ptr().cast(), x.as_ptr().cast(), x.len())
    });
    assert!(((got - plain) / plain).abs() < Dd::from_f64(1e-31));
    assert_eq!(
        got,
        // SAFETY: as above.
        unsafe { bodies::dot_body::<Lane<Dd>>(x.as_ptr(), x.as_ptr(), x.len()) }
    );
    fn by_kind_one<T: Real>() -> T {
        crate::simd_by_kind!(T, E => <E as Real>::ONE)
    }
    assert_eq!(by_kind_one::<f32>(), 1.0f32);
    assert_eq!(by_kind_one::<Dd>(), Dd::ONE);
}
