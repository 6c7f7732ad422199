//! Shared test helpers: seeded random tensors, mask catalogue, comparisons, central differences.
#![allow(dead_code)]

use efa_attn::Mask;
use efa_num::Real;
use ndarray::{Array3, Array4, ArrayD, Dimension};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Uniform [-amp, amp) tensor from a fixed seed.
pub fn rand4<T: Real>(shape: [usize; 4], amp: f64, seed: u64) -> Array4<T> {
    let mut rng = StdRng::seed_from_u64(seed);
    Array4::from_shape_fn(shape, |_| T::from_f64(rng.random_range(-amp..amp)))
}

pub fn rand3<T: Real>(shape: [usize; 3], amp: f64, seed: u64) -> Array3<T> {
    let mut rng = StdRng::seed_from_u64(seed);
    Array3::from_shape_fn(shape, |_| T::from_f64(rng.random_range(-amp..amp)))
}

/// Random visibility with probability `p_true`, broadcast over heads.
pub fn rand_dense(b: usize, nq: usize, nk: usize, seed: u64) -> Array4<bool> {
    let mut rng = StdRng::seed_from_u64(seed);
    Array4::from_shape_fn((b, 1, nq, nk), |_| rng.random_range(0.0..1.0) < 0.7)
}

/// Key lengths per batch row: varied, including 0 and full when there is room.
pub fn lengths(b: usize, nk: usize) -> Vec<usize> {
    (0..b)
        .map(|i| match i % 3 {
            0 => nk,
            1 => nk / 2,
            _ => 0,
        })
        .collect()
}

/// Every mask kind (and the combinations the model uses) for a problem; names for messages.
pub fn masks(
    nq: usize,
    nk: usize,
    lens: &[usize],
    dense: &Array4<bool>,
) -> Vec<(&'static str, Mask)> {
    vec![
        ("none", Mask::none()),
        ("causal", Mask::causal()),
        (
            "causal_offset",
            Mask::none().causal_offset(nk as isize - nq as isize),
        ),
        ("key_padding", Mask::none().key_lengths(lens)),
        ("exclude_self", Mask::none().exclude_self()),
        ("dense", Mask::none().dense(dense.clone())),
        ("padding+causal", Mask::causal().key_lengths(lens)),
        (
            "padding+exclude_self",
            Mask::none().key_lengths(lens).exclude_self(),
        ),
    ]
}

/// max |a − b| / (atol + rtol·|b|) ≤ 1 elementwise, with equal infinities allowed.
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
