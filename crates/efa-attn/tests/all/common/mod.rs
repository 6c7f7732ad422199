//! Shared test helpers: seeded random tensors, mask catalogue, comparisons, central differences.
#![allow(dead_code)]

use efa_attn::Mask;
use efa_num::Real;
use ndarray::{Array3, Array4};
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

pub use efa_testkit::{assert_close, central_diff};
