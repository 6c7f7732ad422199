//! Batched entry points: agreement with the per-row methods, masks, parallel chunks, f32, and
//! the ordinal cut-point gradient (finite differences of the summed nll).

use crate::common;

use efa_expfam::{nll_batch, ordinal, ordinal_nll_batch, Family};
use ndarray::{Array2, ShapeBuilder};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn poisson_batch(rows: usize, seed: u64) -> (Array2<f64>, Array2<f64>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let eta = Array2::from_shape_fn((rows, 1), |_| rng.random_range(-3.0..4.0));
    let y = Array2::from_shape_fn((rows, 1), |_| rng.random_range(0..40) as f64);
    (y, eta)
}

#[test]
fn batch_matches_rows_in_parallel_and_sequential_sizes() {
    let fam = Family::Poisson;
    for rows in [0usize, 1, 7, 20_000] {
        let (y, eta) = poisson_batch(rows, rows as u64);
        let mut nll = vec![0.0; rows];
        let mut g = Array2::zeros((rows, 1));
        nll_batch(&fam, y.view(), eta.view(), None, &mut nll, g.view_mut()).unwrap();
        for i in 0..rows {
            let mut gi = [0.0];
            let ni = fam
                .nll_grad(&[y[[i, 0]]], &[eta[[i, 0]]], &mut gi, i)
                .unwrap();
            assert_eq!(ni.to_bits(), nll[i].to_bits());
            assert_eq!(gi[0].to_bits(), g[[i, 0]].to_bits());
        }
    }
}

#[test]
fn masked_rows_are_zero_even_with_garbage() {
    let fam = Family::Gaussian;
    let y = ndarray::arr2(&[[0.5], [f64::NAN], [1.0]]);
    let eta = ndarray::arr2(&[[0.1, -0.5], [f64::NAN, 3.0], [0.2, -1.0]]);
    let mask = [true, false, true];
    let mut nll = vec![7.0; 3];
    let mut g = Array2::from_elem((3, 2), 7.0);
    nll_batch(
        &fam,
        y.view(),
        eta.view(),
        Some(&mask),
        &mut nll,
        g.view_mut(),
    )
    .unwrap();
    assert_eq!(nll[1], 0.0);
    assert_eq!(g.row(1).to_vec(), vec![0.0, 0.0]);
    assert!(nll[0].is_finite() && nll[2].is_finite());
    // An unmasked invalid row among many is reported by its index, also in parallel.
    let (y, mut eta) = poisson_batch(30_000, 3);
    eta[[25_001, 0]] = f64::NAN;
    let mut nll = vec![0.0; 30_000];
    let mut g = Array2::zeros((30_000, 1));
    let e = nll_batch(
        &Family::Poisson,
        y.view(),
        eta.view(),
        None,
        &mut nll,
        g.view_mut(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("row 25001"), "{e}");
}

#[test]
fn f32_batch_close_to_f64() {
    let fam = Family::Categorical { k: 3 };
    let eta = ndarray::arr2(&[[0.5f64, -1.0, 2.0], [3.0, 3.0, -40.0]]);
    let y = ndarray::arr2(&[[1.0f64], [2.0]]);
    let mut n64 = vec![0.0; 2];
    let mut g64 = Array2::zeros((2, 3));
    nll_batch(&fam, y.view(), eta.view(), None, &mut n64, g64.view_mut()).unwrap();
    let (e32, y32) = (eta.mapv(|v| v as f32), y.mapv(|v| v as f32));
    let mut n32 = vec![0.0f32; 2];
    let mut g32 = Array2::<f32>::zeros((2, 3));
    nll_batch(&fam, y32.view(), e32.view(), None, &mut n32, g32.view_mut()).unwrap();
    for i in 0..2 {
        assert!((n32[i] as f64 - n64[i]).abs() <= 1e-6 * n64[i].abs().max(1.0));
        for j in 0..3 {
            assert!((g32[[i, j]] as f64 - g64[[i, j]]).abs() <= 1e-6);
        }
    }
}

#[test]
fn ordinal_batch_cut_gradient_is_sum_and_matches_finite_differences() {
    let cut = vec![-1.0, 0.25, 1.0];
    let rows = 10_000; // parallel path
    let mut rng = StdRng::seed_from_u64(5);
    let eta = Array2::from_shape_fn((rows, 1), |_| rng.random_range(-2.0..2.0));
    let y = Array2::from_shape_fn((rows, 1), |_| rng.random_range(0..4) as f64);
    let mask: Vec<bool> = (0..rows).map(|i| i % 7 != 0).collect();
    let total = |c: &[f64]| {
        let mut nll = vec![0.0; rows];
        let mut ge = Array2::zeros((rows, 1));
        let mut gc = vec![0.0; c.len()];
        ordinal_nll_batch(
            c,
            y.view(),
            eta.view(),
            Some(&mask),
            &mut nll,
            ge.view_mut(),
            &mut gc,
        )
        .unwrap();
        (nll.iter().sum::<f64>(), gc, ge)
    };
    let (_, gc, ge) = total(&cut);
    let fd = common::central_diff(&|c: &[f64]| total(c).0, &cut);
    for j in 0..cut.len() {
        assert!(
            (fd[j] - gc[j]).abs() <= 1e-5 * gc[j].abs().max(1.0),
            "{} vs {}",
            fd[j],
            gc[j]
        );
    }
    // Per-row η gradient equals the single-row function; masked rows are 0.
    for i in [0usize, 1, 9_999] {
        let (mut a, mut b) = (0.0, vec![0.0; 3]);
        ordinal::nll_grad(&cut, y[[i, 0]] as usize, eta[[i, 0]], &mut a, &mut b);
        let want = if mask[i] { a } else { 0.0 };
        assert_eq!(ge[[i, 0]], want);
    }
}

#[test]
fn strided_inputs_and_outputs_match_contiguous() {
    let fam = Family::Gamma;
    let rows = 50;
    let mut rng = StdRng::seed_from_u64(9);
    let eta = Array2::from_shape_fn((rows, 2), |(_, j)| {
        if j == 0 {
            rng.random_range(-0.5..3.0)
        } else {
            -rng.random_range(0.5..2.0)
        }
    });
    let y = Array2::from_shape_fn((rows, 1), |_| rng.random_range(0.1..5.0));
    let mut n1 = vec![0.0; rows];
    let mut g1 = Array2::zeros((rows, 2));
    nll_batch(&fam, y.view(), eta.view(), None, &mut n1, g1.view_mut()).unwrap();
    // Column-major copies: rows are not contiguous.
    let mut eta_cm = Array2::zeros((rows, 2).f());
    eta_cm.assign(&eta);
    assert!(eta_cm.as_slice().is_none());
    let mut n2 = vec![0.0; rows];
    let mut g2 = Array2::zeros((rows, 2).f());
    nll_batch(&fam, y.view(), eta_cm.view(), None, &mut n2, g2.view_mut()).unwrap();
    assert_eq!(n1, n2);
    assert_eq!(g1, g2);
}
