//! One-off calls (`Family::eval`) and batched A, ∇A, ∇²A (`log_partition_batch`, `mean_batch`,
//! `hessian_batch`) against the per-row methods: equal bit for bit, in sequential and parallel
//! sizes, on contiguous and strided input, with errors naming the lowest invalid row.

use efa_expfam::{
    hessian_batch, log_partition_batch, mean_batch, ExpfamError, Family, PAR_MIN_ROWS,
};
use ndarray::{Array2, Axis, ShapeBuilder};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Draws component `j` of a valid η.
type Sampler = fn(&mut StdRng, usize) -> f64;

/// Every family with A, and a sampler of valid η rows for it.
fn families() -> Vec<(Family, Sampler)> {
    fn free(r: &mut StdRng, _: usize) -> f64 {
        r.random_range(-3.0..3.0)
    }
    fn negative(r: &mut StdRng, _: usize) -> f64 {
        r.random_range(-5.0..-0.01)
    }
    fn gaussian(r: &mut StdRng, i: usize) -> f64 {
        if i == 0 {
            free(r, 0)
        } else {
            negative(r, 1)
        }
    }
    fn gamma(r: &mut StdRng, i: usize) -> f64 {
        if i == 0 {
            r.random_range(-0.95..40.0)
        } else {
            negative(r, 1)
        }
    }
    fn shape_minus_one(r: &mut StdRng, _: usize) -> f64 {
        r.random_range(-0.95..40.0)
    }
    vec![
        (Family::GaussianKnownVar { s2: 2.0 }, free),
        (Family::Gaussian, gaussian),
        (Family::Bernoulli, free),
        (Family::Binomial { n: 12 }, free),
        (Family::Poisson, free),
        (Family::Categorical { k: 4 }, free),
        (Family::Multinomial { n: 7, k: 3 }, free),
        (Family::Gamma, gamma),
        (Family::Exponential, negative),
        (Family::Beta, shape_minus_one),
        (Family::NegativeBinomial { r: 2.5 }, negative),
    ]
}

fn etas(fam: Family, sample: Sampler, rows: usize, seed: u64) -> Array2<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    Array2::from_shape_fn((rows, fam.eta_dim()), |(_, j)| sample(&mut rng, j))
}

/// The batched results equal the per-row methods bit for bit.
fn assert_batch_matches_rows(fam: Family, eta: ndarray::ArrayView2<f64>) {
    let a = log_partition_batch(&fam, eta).unwrap();
    let m = mean_batch(&fam, eta).unwrap();
    let h = hessian_batch(&fam, eta).unwrap();
    let d = fam.eta_dim();
    assert_eq!(a.shape(), [eta.nrows()]);
    assert_eq!(m.shape(), [eta.nrows(), d]);
    assert_eq!(h.shape(), [eta.nrows(), d, d]);
    let (mut mi, mut hi) = (vec![0.0; d], vec![0.0; d * d]);
    for (i, row) in eta.rows().into_iter().enumerate() {
        let e = row.to_vec();
        let ai = fam.log_partition(&e, i).unwrap();
        fam.mean(&e, &mut mi, i).unwrap();
        fam.hessian(&e, &mut hi, i).unwrap();
        assert_eq!(a[i].to_bits(), ai.to_bits(), "{fam:?} A row {i}");
        for j in 0..d {
            assert_eq!(m[[i, j]].to_bits(), mi[j].to_bits(), "{fam:?} dA row {i}");
            for k in 0..d {
                assert_eq!(
                    h[[i, j, k]].to_bits(),
                    hi[j * d + k].to_bits(),
                    "{fam:?} d2A row {i}"
                );
            }
        }
    }
}

#[test]
fn batches_match_the_scalar_routines_sequential_and_parallel() {
    for (n, (fam, sample)) in families().into_iter().enumerate() {
        for rows in [0usize, 1, 37] {
            let eta = etas(fam, sample, rows, n as u64);
            assert_batch_matches_rows(fam, eta.view());
        }
    }
    // Parallel chunks (≥ PAR_MIN_ROWS rows) for a vector and a two-parameter family.
    for (fam, sample) in [families()[5], families()[7]] {
        let eta = etas(fam, sample, PAR_MIN_ROWS + 1234, 99);
        assert_batch_matches_rows(fam, eta.view());
    }
}

#[test]
fn strided_and_transposed_inputs_are_read_correctly() {
    let (fam, sample) = families()[9]; // Beta
    let wide = etas(fam, sample, 40, 5);
    // Every other row (row stride 4) and a transposed (column-major) copy.
    let strided = wide.slice(ndarray::s![..;2, ..]);
    assert_batch_matches_rows(fam, strided);
    let mut col_major = Array2::zeros((40, 2).f());
    col_major.assign(&wide);
    assert!(col_major.as_slice().is_none());
    assert_batch_matches_rows(fam, col_major.view());
    let a = log_partition_batch(&fam, col_major.view()).unwrap();
    let b = log_partition_batch(&fam, wide.view()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn batch_errors_name_the_lowest_invalid_row_and_the_shape() {
    let (fam, sample) = families()[7]; // Gamma: η₂ < 0
    let mut eta = etas(fam, sample, 3 * PAR_MIN_ROWS, 11);
    eta[[2 * PAR_MIN_ROWS + 5, 1]] = 0.5;
    eta[[PAR_MIN_ROWS + 3, 1]] = 1e-300;
    for err in [
        log_partition_batch(&fam, eta.view()).unwrap_err(),
        mean_batch(&fam, eta.view()).unwrap_err(),
        hessian_batch(&fam, eta.view()).unwrap_err(),
    ] {
        let want_row = Some(PAR_MIN_ROWS + 3);
        assert!(matches!(err, ExpfamError::Domain { row, component: 1, .. } if row == want_row));
        let m = err.to_string();
        assert!(
            m.contains("gamma")
                && m.contains("eta[1] = 1e-300")
                && m.contains(&format!("row {}", PAR_MIN_ROWS + 3)),
            "{m}"
        );
    }
    let three_cols = Array2::<f64>::zeros((4, 3));
    let m = mean_batch(&fam, three_cols.view()).unwrap_err().to_string();
    assert!(
        m.contains("eta columns") && m.contains("length 3, expected 2"),
        "{m}"
    );
    let ord = Family::OrdinalLogit { k: 3 };
    let e = log_partition_batch(&ord, Array2::<f64>::zeros((2, 1)).view()).unwrap_err();
    assert!(matches!(e, ExpfamError::Unsupported { .. }), "{e}");
    let e = hessian_batch(
        &Family::Categorical { k: 0 },
        Array2::<f64>::zeros((2, 0)).view(),
    );
    assert!(e.unwrap_err().to_string().contains("k = 0"));
}

#[test]
fn f32_batches_match_f32_rows() {
    let (fam, sample) = families()[1]; // Gaussian
    let eta = etas(fam, sample, 50, 3).mapv(|v| v as f32);
    let a = log_partition_batch(&fam, eta.view()).unwrap();
    let h = hessian_batch(&fam, eta.view()).unwrap();
    for (i, row) in eta.axis_iter(Axis(0)).enumerate() {
        let e = row.to_vec();
        assert_eq!(a[i], fam.log_partition(&e, i).unwrap());
        let mut hi = [0.0f32; 4];
        fam.hessian(&e, &mut hi, i).unwrap();
        assert_eq!(
            h.index_axis(Axis(0), i).iter().copied().collect::<Vec<_>>(),
            hi
        );
    }
}

#[test]
fn one_off_calls_match_the_row_methods_and_name_no_row() {
    let ys: [(Family, &[f64]); 4] = [
        (Family::Poisson, &[3.0]),
        (Family::Multinomial { n: 7, k: 3 }, &[2.0, 1.0, 4.0]),
        (Family::Gamma, &[0.8]),
        (Family::Beta, &[0.3]),
    ];
    for (fam, y) in ys {
        let (_, sample) = families().into_iter().find(|(f, _)| *f == fam).unwrap();
        let eta = etas(fam, sample, 1, 8).row(0).to_vec();
        let one = fam.eval();
        let d = fam.eta_dim();
        assert_eq!(one.family(), fam);
        assert_eq!(
            one.log_partition(&eta).unwrap(),
            fam.log_partition(&eta, 4).unwrap()
        );
        let mut buf = vec![0.0; d];
        fam.mean(&eta, &mut buf, 0).unwrap();
        assert_eq!(one.mean(&eta).unwrap(), buf);
        let mut hb = vec![0.0; d * d];
        fam.hessian(&eta, &mut hb, 0).unwrap();
        assert_eq!(one.hessian(&eta).unwrap(), hb);
        fam.suff_stat(y, &mut buf, 0).unwrap();
        assert_eq!(one.suff_stat(y).unwrap(), buf);
        assert_eq!(one.log_base(y).unwrap(), fam.log_base(y, 0).unwrap());
        let mut g = vec![0.0; d];
        let nll = fam.nll_grad(y, &eta, &mut g, 0).unwrap();
        assert_eq!(one.nll_grad(y, &eta).unwrap(), (nll, g));
        assert_eq!(one.nll(y, &eta).unwrap(), nll);
        let m = one.mean(&eta).unwrap();
        fam.natural_from_mean(&m, &mut buf, 0).unwrap();
        assert_eq!(one.natural_from_mean(&m).unwrap(), buf);
        let mut out = vec![0.0; fam.obs_dim()];
        fam.sample(&eta, &mut StdRng::seed_from_u64(1), &mut out, 0)
            .unwrap();
        assert_eq!(
            one.sample(&eta, &mut StdRng::seed_from_u64(1)).unwrap(),
            out
        );
    }
    // Errors of one-off calls carry no row; the value prints in scientific notation.
    let e = Family::Gaussian.eval().mean(&[1.0, 1e-300]).unwrap_err();
    assert!(matches!(
        e,
        ExpfamError::Domain {
            row: None,
            component: 1,
            ..
        }
    ));
    let m = e.to_string();
    assert!(
        m.contains("eta[1] = 1e-300 is outside") && !m.contains("row"),
        "{m}"
    );
    let m = Family::Poisson
        .eval()
        .check_obs(&[2.5e-7])
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("y[0] = 2.5e-7 is outside") && !m.contains("row"),
        "{m}"
    );
    let m = Family::Beta.eval().hessian(&[0.5]).unwrap_err().to_string();
    assert!(m.contains("eta has length 1, expected 2"), "{m}");
}
