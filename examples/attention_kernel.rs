//! The fused attention kernel called directly, with a causal mask and key-padding lengths:
//! `o = softmax(scale·q·kᵀ + mask)·v` and `lse = log Σ_visible exp(scale·q·kᵀ)` per query row,
//! checked against the naive f64 reference; and, with `v = k`, the identity
//! `o = (1/scale)·∂lse/∂q` (the output is the mean of the empirical exponential family over
//! the keys whose log-partition is `lse`), through the kernel's own backward.
//!
//! Run: `cargo run --example attention_kernel`.

use efa::attn::{naive, Attention, Mask};
use ndarray::{Array3, Array4};

fn filled(shape: (usize, usize, usize, usize), phase: f32) -> Array4<f32> {
    let mut k = 0.0f32;
    Array4::from_shape_simple_fn(shape, || {
        k += 1.0;
        (0.37 * k + phase).sin()
    })
}

fn main() {
    // [batch, heads, len, dim]: 2 sequences, 2 heads, 7 positions, width 8.
    let (b, h, n, d) = (2, 2, 7, 8);
    let q = filled((b, h, n, d), 0.1);
    let k = filled((b, h, n, d), 0.9);
    // Query i sees keys j ≤ i and j < length: the second sequence has 5 valid positions.
    let mask = Mask::causal().key_lengths([7, 5]);
    let scale = 0.5;
    let args = Attention::new(q.view(), k.view(), k.view())
        .mask(mask)
        .scale(scale);
    let out = args.forward().unwrap();
    let reference = naive::forward(&args).unwrap();
    let max_err = out
        .o
        .iter()
        .zip(reference.o.iter())
        .fold(0.0f64, |m, (a, r)| m.max((f64::from(*a) - r).abs()));
    println!("kernel vs naive f64 reference: max |Δo| = {max_err:.2e}");
    assert!(max_err < 1e-5);
    // Query 6 of sequence 2 sees keys 0..5 only (padding), query 0 only key 0.
    assert!((f64::from(out.lse[[1, 0, 6]]) - reference.lse[[1, 0, 6]]).abs() < 1e-5);

    // ∂(Σᵢ lseᵢ)/∂q through the kernel's backward (d_o = 0, d_lse = 1): with v = k this is
    // scale·o.
    let zeros = Array4::<f32>::zeros(out.o.raw_dim());
    let ones = Array3::<f32>::ones(out.lse.raw_dim());
    let g = args
        .backward(out.view(), zeros.view(), Some(ones.view()))
        .unwrap();
    let max_dev =
        g.dq.iter()
            .zip(out.o.iter())
            .fold(0.0f32, |m, (dq, o)| m.max((dq / scale as f32 - o).abs()));
    println!("max |(1/scale)·∂lse/∂q − o| = {max_dev:.2e}");
    assert!(max_dev < 1e-5);
}

#[cfg(test)]
mod tests {
    #[test]
    fn example_runs() {
        super::main();
    }
}
