//! A custom model on the tape: one attention layer over a short sequence, its last position
//! mapped to the natural parameter of a Poisson count, and the mean Poisson nll
//! `A(η) − y·η − log h(y)` with `A(η) = e^η`. Reads the gradient of every parameter and of an
//! intermediate (the attention output), and checks one parameter's gradient against central
//! differences of the loss.
//!
//! Run: `cargo run --example custom_model`.

use efa::nn::prelude::*;
use ndarray::{Array2, ArrayD, IxDyn};

/// Deterministic inputs: `sin`/`cos` patterns, no RNG needed.
fn filled(shape: &[usize], phase: f64) -> ArrayD<f64> {
    let mut k = 0.0;
    ArrayD::from_shape_simple_fn(IxDyn(shape), || {
        k += 1.0;
        0.4 * (0.7 * k + phase).sin()
    })
}

/// η for two sequences of four positions, width 6, two heads of width 3.
fn loss(tape: &mut Tape<f64>, w: &[Var], y: &Array2<f64>) -> Result<(Var, Var), TapeError> {
    let x = tape.constant(filled(&[2, 4, 6], 0.3));
    let q = tape.linear(x, w[0], None)?;
    let k = tape.linear(x, w[1], None)?;
    let v = tape.linear(x, w[2], None)?;
    // o = softmax(q·kᵀ/√3 + causal mask)·v per head, on the fused kernel.
    let att = tape.attention_heads(Attention::new(q, k, v).mask(Mask::causal()), 2)?;
    let last = tape.gather_positions(att.o, &[3, 3])?; // [2, 6]
    let eta = tape.linear(last, w[3], None)?; // [2, 1]
    let nll = tape.nll(&Family::Poisson, eta, y, None)?; // per row
    Ok((tape.mean_all(nll)?, att.o))
}

fn main() {
    let names = ["w_q", "w_k", "w_v", "w_out"];
    let shapes: [&[usize]; 4] = [&[6, 6], &[6, 6], &[6, 6], &[6, 1]];
    let values: Vec<ArrayD<f64>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| filled(s, i as f64))
        .collect();
    let y = Array2::from_shape_vec((2, 1), vec![2.0, 0.0]).unwrap();

    let mut tape = Tape::new();
    let w: Vec<Var> = names
        .iter()
        .zip(&values)
        .map(|(n, v)| tape.param(n, v.clone()).unwrap())
        .collect();
    let (l, o) = loss(&mut tape, &w, &y).unwrap();
    let grads = tape.backward(l).unwrap();
    println!("loss = {:.6}", tape.value(l)[[]]);
    for n in names {
        let g = grads.param(n).unwrap();
        println!(
            "∂loss/∂{n}: shape {:?}, |g|∞ = {:.3e}",
            g.shape(),
            g.iter().fold(0.0f64, |m, x| m.max(x.abs()))
        );
    }
    // Intermediate gradients are kept too: ∂loss/∂o for the attention output.
    let go = grads.wrt(o).expect("the attention output reaches the loss");
    println!("∂loss/∂o: shape {:?}", go.shape());
    // Only the last position of each sequence is read, so every other row of ∂loss/∂o is 0.
    assert!(go.slice(ndarray::s![.., ..3, ..]).iter().all(|&g| g == 0.0));

    // One gradient against central differences of the loss (efa-check's implementation).
    let g = grads.param("w_out").unwrap().clone();
    let mut loss_at = |w_out: &[f64]| {
        let mut t = Tape::new();
        let mut vals = values.clone();
        vals[3] = ArrayD::from_shape_vec(IxDyn(&[6, 1]), w_out.to_vec()).unwrap();
        let w: Vec<Var> = names
            .iter()
            .zip(&vals)
            .map(|(n, v)| t.param(n, v.clone()).unwrap())
            .collect();
        let (l, _) = loss(&mut t, &w, &y).unwrap();
        t.value(l)[[]]
    };
    let at: Vec<f64> = values[3].iter().copied().collect();
    let fd = efa::check::central_gradient(&mut loss_at, &at, &Default::default());
    for (i, (n, a)) in fd.iter().zip(g.iter()).enumerate() {
        assert!((n - a).abs() < 1e-8, "w_out[{i}]: {n} vs {a}");
    }
    println!("∂loss/∂w_out agrees with central differences");
}

#[cfg(test)]
mod tests {
    #[test]
    fn example_runs() {
        super::main();
    }
}
