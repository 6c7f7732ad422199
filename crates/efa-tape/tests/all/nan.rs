//! NaN propagates through every op (forward and backward): a NaN input gives NaN in every
//! output element that depends on it, and NaN in every gradient element whose formula reads
//! it; elements that do not depend on the NaN stay finite. Each test names the exact NaN
//! pattern, derived by hand from the op's formula. (The fused ops of `efa-nn` have the same
//! tests in `efa-nn`'s `tests/all/nan.rs`.)

use efa_tape::{Grads, Tape, Var};
use ndarray::{array, ArrayD};

use efa_testkit::assert_nan_pattern as pattern;

const NAN: f64 = f64::NAN;

/// Backward of `y` with an all-ones cotangent.
fn grads(t: &Tape<f64>, y: Var) -> Grads<f64> {
    let ones = ArrayD::from_elem(t.value(y).raw_dim(), 1.0);
    t.backward_with(y, ones).unwrap()
}

fn g(gr: &Grads<f64>, v: Var) -> ArrayD<f64> {
    gr.wrt(v).expect("gradient").clone()
}

#[test]
fn unary_ops() {
    // x = [0.7, NaN, 1.3]: y[1] is NaN for every op; dy/dx[1] reads x (or y) except for
    // neg, scale and shift, whose derivative is a constant (−1, c, 1).
    let names = [
        "neg", "exp", "log", "log1p", "softplus", "sigmoid", "tanh", "relu", "gelu", "sqrt",
        "square", "scale", "shift",
    ];
    for name in names {
        let mut t = Tape::<f64>::new();
        let x = t.input(array![0.7, NAN, 1.3].into_dyn());
        let y = match name {
            "neg" => t.neg(x),
            "exp" => t.exp(x),
            "log" => t.log(x),
            "log1p" => t.log1p(x),
            "softplus" => t.softplus(x),
            "sigmoid" => t.sigmoid(x),
            "tanh" => t.tanh(x),
            "relu" => t.relu(x),
            "gelu" => t.gelu(x),
            "sqrt" => t.sqrt(x),
            "square" => t.square(x),
            "scale" => t.scale(x, 2.5),
            _ => t.shift(x, 0.5),
        }
        .unwrap();
        pattern(t.value(y), &[1], name);
        let gx = g(&grads(&t, y), x);
        match name {
            "neg" => assert_eq!(gx[1], -1.0),
            "scale" => assert_eq!(gx[1], 2.5),
            "shift" => assert_eq!(gx[1], 1.0),
            _ => pattern(&gx, &[1], name),
        }
    }
    // relu at a negative NaN-free point is still exactly 0 with gradient 0.
    let mut t = Tape::<f64>::new();
    let x = t.input(array![-2.0, NAN].into_dyn());
    let y = t.relu(x).unwrap();
    assert_eq!(t.value(y)[0], 0.0);
    assert_eq!(g(&grads(&t, y), x)[0], 0.0);
}

#[test]
fn binary_ops_with_broadcasting() {
    // a [3] with NaN at 1, b [1]: y = a ∘ b broadcast. ∂/∂a reads only b (add, sub, mul, div:
    // g, g, g·b, g/b), so it stays finite; ∂/∂b = Σ over the broadcast axis reads a for mul
    // (Σ g·a) and div (Σ −g·a/b²), so it is NaN there and finite for add and sub.
    for (k, name) in ["add", "sub", "mul", "div"].iter().enumerate() {
        let mut t = Tape::<f64>::new();
        let a = t.input(array![0.5, NAN, -1.5].into_dyn());
        let b = t.input(array![2.0].into_dyn());
        let y = match k {
            0 => t.add(a, b),
            1 => t.sub(a, b),
            2 => t.mul(a, b),
            _ => t.div(a, b),
        }
        .unwrap();
        pattern(t.value(y), &[1], name);
        let gr = grads(&t, y);
        pattern(&g(&gr, a), &[], name);
        pattern(&g(&gr, b), if k >= 2 { &[0] } else { &[] }, name);
    }
}

#[test]
fn matmul() {
    // A [2, 3] with NaN at [0, 1]: C = A·B has row 0 NaN. dA = G·Bᵀ does not read A (finite);
    // dB = Aᵀ·G has row 1 (fed by A[0, 1]) NaN.
    let a0 = array![[1.0, NAN, 0.5], [0.2, -0.3, 0.8]].into_dyn();
    let b0 = array![[0.5, -1.0], [2.0, 0.1], [0.3, 0.7]].into_dyn();
    let mut t = Tape::<f64>::new();
    let a = t.input(a0.clone());
    let b = t.input(b0.clone());
    let c = t.matmul(a, b, false, false).unwrap();
    pattern(t.value(c), &[0, 1], "matmul");
    let gr = grads(&t, c);
    pattern(&g(&gr, a), &[], "matmul dA");
    pattern(&g(&gr, b), &[2, 3], "matmul dB");
}

#[test]
fn reductions_and_shape_ops() {
    let x0 = array![[1.0, NAN, 0.5], [0.2, -0.3, 0.8]].into_dyn();
    let mut t = Tape::<f64>::new();
    let x = t.input(x0);
    let s = t.sum(x, &[1], false).unwrap();
    pattern(t.value(s), &[0], "sum");
    let m = t.mean(x, &[0], true).unwrap();
    pattern(t.value(m), &[1], "mean");
    let sa = t.sum_all(x).unwrap();
    let ma = t.mean_all(x).unwrap();
    pattern(t.value(sa), &[0], "sum_all");
    pattern(t.value(ma), &[0], "mean_all");
    // Reductions' gradients are g broadcast back (they do not read x).
    pattern(&g(&grads(&t, ma), x), &[], "mean_all backward");
    let bx = t.reshape(x, &[2, 1, 3]).unwrap();
    let b = t.broadcast_to(bx, &[2, 2, 3]).unwrap();
    pattern(t.value(b), &[1, 4], "broadcast_to");
    let p = t.transpose(x, 0, 1).unwrap();
    pattern(t.value(p), &[2], "permute");
    let c = t.concat(&[x, x], 1).unwrap();
    pattern(t.value(c), &[1, 4], "concat");
    let sl = t.slice(x, 1, 1, 3).unwrap();
    pattern(t.value(sl), &[0], "slice");
    // A slice that leaves the NaN out does not depend on it.
    let sl0 = t.slice(x, 1, 2, 3).unwrap();
    pattern(t.value(sl0), &[], "slice without the NaN");
    let y = t.mul(c, c).unwrap();
    pattern(&g(&grads(&t, y), x), &[1], "concat then square backward");
}

#[test]
fn indexing_ops() {
    let mut t = Tape::<f64>::new();
    let tab = t.input(array![[0.1, 0.2], [NAN, 0.4], [0.5, 0.6]].into_dyn());
    let e = t.embedding(tab, &array![2, 1, 0, 1].into_dyn()).unwrap();
    pattern(t.value(e), &[2, 6], "embedding");
    let sq = t.square(e).unwrap();
    pattern(&g(&grads(&t, sq), tab), &[2], "embedding backward");
    let x = t.input(array![[[1.0, 2.0], [NAN, 4.0]], [[5.0, 6.0], [7.0, 8.0]]].into_dyn());
    let gp = t.gather_positions(x, &[1, 1]).unwrap();
    pattern(t.value(gp), &[0], "gather_positions");
    // masked_fill: a NaN at an unmasked position stays; at a masked position the output is
    // the fill value by definition (it does not depend on x there). A NaN fill value shows.
    let a = t.input(array![[NAN, 1.0], [2.0, NAN]].into_dyn());
    let mask = array![[false, false], [false, true]].into_dyn();
    let mf = t.masked_fill(a, &mask, -5.0).unwrap();
    pattern(t.value(mf), &[0], "masked_fill");
    assert_eq!(t.value(mf)[[1, 1]], -5.0);
    let mf2 = t.masked_fill(a, &mask, NAN).unwrap();
    pattern(t.value(mf2), &[0, 3], "masked_fill with a NaN value");
    let sq = t.square(mf).unwrap();
    pattern(&g(&grads(&t, sq), a), &[0], "masked_fill backward");
}

#[test]
fn layer_norm_softmax_and_losses() {
    let x0 = array![[1.0, NAN, 0.5], [0.2, -0.3, 0.8]].into_dyn();
    let mut t = Tape::<f64>::new();
    let x = t.input(x0.clone());
    let gain = t.input(array![1.0, 0.5, 2.0].into_dyn());
    let bias = t.input(array![0.0, 0.1, -0.1].into_dyn());
    let ln = t.layer_norm(x, gain, bias, 1e-5).unwrap();
    // μ and σ² of row 0 read the NaN: the whole row is NaN.
    pattern(t.value(ln), &[0, 1, 2], "layer_norm");
    let sq = t.square(ln).unwrap();
    let gr = grads(&t, sq);
    pattern(&g(&gr, x), &[0, 1, 2], "layer_norm dx");
    // dgain = Σ_rows g∘x̂ and dbias = Σ_rows g with g = 2y: both read row 0.
    pattern(&g(&gr, gain), &[0, 1, 2], "layer_norm dgain");
    pattern(&g(&gr, bias), &[0, 1, 2], "layer_norm dbias");
    for log in [false, true] {
        let mut t = Tape::<f64>::new();
        // Row 1 is NaN beside −∞ only: the max skips NaN, so this row once came out as a
        // "fully masked" row of zeros.
        let ninf = f64::NEG_INFINITY;
        let x = t.input(array![[1.0, NAN, 0.5], [ninf, NAN, ninf], [0.2, -0.3, 0.8]].into_dyn());
        let y = if log { t.log_softmax(x) } else { t.softmax(x) }.unwrap();
        pattern(t.value(y), &[0, 1, 2, 3, 4, 5], "softmax");
        let w = t.constant(array![1.0, 2.0, 3.0].into_dyn());
        let z = t.mul(y, w).unwrap();
        pattern(
            &g(&grads(&t, z), x),
            &[0, 1, 2, 3, 4, 5],
            "softmax backward",
        );
    }
    let mut t = Tape::<f64>::new();
    let ninf = f64::NEG_INFINITY;
    let x = t.input(array![[0.1, 0.2, 0.3], [ninf, NAN, ninf]].into_dyn());
    let l = t.softmax_cross_entropy(x, &[0, 2]).unwrap();
    pattern(t.value(l), &[0], "softmax_cross_entropy");
    pattern(
        &g(&grads(&t, l), x),
        &[3, 4, 5],
        "softmax_cross_entropy backward",
    );
    let mut t = Tape::<f64>::new();
    let p = t.input(array![0.5, NAN, 1.0].into_dyn());
    let l = t.mse(p, &array![0.0, 1.0, 2.0].into_dyn()).unwrap();
    pattern(t.value(l), &[0], "mse");
    pattern(&g(&grads(&t, l), p), &[1], "mse backward");
    let l = t.mse(p, &array![0.0, 1.0, NAN].into_dyn()).unwrap();
    pattern(&g(&grads(&t, l), p), &[1, 2], "mse with a NaN target");
}
