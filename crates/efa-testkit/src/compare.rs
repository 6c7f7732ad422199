//! Tolerant comparison against an f64 reference, relative errors, and central differences.

use efa_num::Real;
use ndarray::{ArrayD, Dimension};

/// `max |a − b| / max |b|` over the entries (`max |a − b|` where `b` is all zeros): the
/// error of `a` relative to the largest entry of the reference `b`, in any two real types.
pub fn rel_err<A: Real, B: Real, D: Dimension>(
    a: &ndarray::Array<A, D>,
    b: &ndarray::Array<B, D>,
) -> f64 {
    let m = b.iter().fold(0.0f64, |m, x| m.max(x.to_f64().abs()));
    let e = a
        .iter()
        .zip(b)
        .fold(0.0f64, |e, (x, y)| e.max((x.to_f64() - y.to_f64()).abs()));
    if m > 0.0 {
        e / m
    } else {
        e
    }
}

/// max |a − b| / (atol + rtol·|b|) ≤ 1 elementwise, with equal infinities allowed; `what`
/// names the tensor in the failure message, with the index.
#[track_caller]
pub fn assert_close<D: Dimension, A: Real>(
    a: &ndarray::Array<A, D>,
    b: &ndarray::Array<f64, D>,
    atol: f64,
    rtol: f64,
    what: &str,
) {
    assert_eq!(a.shape(), b.shape(), "{what}: shapes");
    for ((idx, x), y) in a.indexed_iter().zip(b.iter()) {
        let x = x.to_f64();
        if x == *y {
            continue;
        }
        let err = (x - y).abs();
        assert!(
            err <= atol + rtol * y.abs(),
            "{what}: at {idx:?}: got {x}, want {y} (err {err:e})"
        );
    }
}

/// Central differences of `f` at `x` (f64), step `1e-6·max(1, |xᵢ|)`, through the project's
/// one implementation (`efa_check::central_gradient`).
pub fn central_diff(x: &ArrayD<f64>, f: impl Fn(&ArrayD<f64>) -> f64) -> ArrayD<f64> {
    let flat: Vec<f64> = x.iter().copied().collect();
    let mut eval = |v: &[f64]| {
        let a = ArrayD::from_shape_vec(x.raw_dim(), v.to_vec()).expect("same size");
        f(&a)
    };
    let g = efa_check::central_gradient(&mut eval, &flat, &efa_check::FdOptions::default());
    ArrayD::from_shape_vec(x.raw_dim(), g).expect("same size")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn central_diff_of_a_square_sum_is_twice_the_point() {
        let x = ndarray::arr1(&[0.5, -2.0, 3.0]).into_dyn();
        let g = central_diff(&x, |a| a.iter().map(|v| v * v).sum());
        assert_close(&g, &x.mapv(|v| 2.0 * v), 1e-8, 1e-8, "gradient");
    }

    #[test]
    #[should_panic(expected = "x: at 1: got 2.5")]
    fn a_far_element_fails_naming_its_index() {
        let a = ndarray::arr1(&[1.0f32, 2.5]);
        assert_close(&a, &ndarray::arr1(&[1.0, 2.0]), 1e-6, 1e-6, "x");
    }
}
