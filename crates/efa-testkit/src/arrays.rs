//! Seeded arrays and NaN-pattern assertions.

use ndarray::{ArrayD, IxDyn};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// An array of `shape` with entries uniform in `[lo, hi]` drawn from `seed`.
pub fn rand_array(shape: &[usize], seed: u64, lo: f64, hi: f64) -> ArrayD<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    ArrayD::from_shape_simple_fn(IxDyn(shape), || rng.random_range(lo..=hi))
}

/// Asserts that exactly the flat positions `nan` (in standard layout) of `a` are NaN and all
/// others finite; `what` names the tensor in the failure message.
#[track_caller]
pub fn assert_nan_pattern(a: &ArrayD<f64>, nan: &[usize], what: &str) {
    let a = a.as_standard_layout();
    for (i, v) in a.iter().enumerate() {
        if nan.contains(&i) {
            assert!(v.is_nan(), "{what}: [{i}] = {v}, want NaN\n{a}");
        } else {
            assert!(v.is_finite(), "{what}: [{i}] = {v}, want finite\n{a}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rand_array_is_seeded_and_in_range() {
        let a = rand_array(&[3, 4], 7, -0.5, 2.0);
        assert_eq!(a.shape(), &[3, 4]);
        assert_eq!(a, rand_array(&[3, 4], 7, -0.5, 2.0));
        assert_ne!(a, rand_array(&[3, 4], 8, -0.5, 2.0));
        assert!(a.iter().all(|&x| (-0.5..=2.0).contains(&x)));
    }

    #[test]
    #[should_panic(expected = "want NaN")]
    fn a_missing_nan_fails() {
        assert_nan_pattern(&ndarray::arr1(&[1.0, 2.0]).into_dyn(), &[1], "x");
    }

    #[test]
    #[should_panic(expected = "want finite")]
    fn an_extra_nan_fails() {
        assert_nan_pattern(&ndarray::arr1(&[f64::NAN, 2.0]).into_dyn(), &[], "x");
    }
}
