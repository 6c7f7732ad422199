//! NaN propagates through every `efa-nn` fused op (forward and backward): a NaN input gives
//! NaN in every output element that depends on it, and NaN in every gradient element whose
//! formula reads it; elements that do not depend on the NaN stay finite. Each test names the
//! exact NaN pattern, derived by hand from the op's formula. (The tape's primitive ops are
//! tested the same way in `efa-tape`'s `tests/all/nan.rs`.)

use efa_nn::prelude::*;
use ndarray::{array, Array2, ArrayD, IxDyn};

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
fn linear() {
    // A [2, 3] with NaN at [0, 1], as in the tape's matmul NaN test: y = x·W + b has row 0
    // NaN, dW = xᵀ·G has row 1 NaN, dx = G·Wᵀ does not read x.
    let a0 = array![[1.0, NAN, 0.5], [0.2, -0.3, 0.8]].into_dyn();
    let b0 = array![[0.5, -1.0], [2.0, 0.1], [0.3, 0.7]].into_dyn();
    // db = Σ dy does not read x. A NaN bias poisons its column.
    let mut t = Tape::<f64>::new();
    let x = t.input(a0);
    let w = t.input(b0);
    let bias = t.input(array![0.1, NAN].into_dyn());
    let y = t.linear(x, w, Some(bias)).unwrap();
    pattern(t.value(y), &[0, 1, 3], "linear");
    let gr = grads(&t, y);
    pattern(&g(&gr, x), &[], "linear dx");
    pattern(&g(&gr, w), &[2, 3], "linear dW");
    pattern(&g(&gr, bias), &[], "linear db");
}

#[test]
fn gather_sum_and_bag_sum() {
    let mut t = Tape::<f64>::new();
    let tab = t.input(array![[0.1, 0.2], [NAN, 0.4], [0.5, 0.6]].into_dyn());
    let bias = t.input(array![0.0, NAN].into_dyn());
    let ids = Array2::from_shape_vec((1, 3), vec![1, NONE, 0]).unwrap();
    let out = t
        .gather_sum(
            &[tab],
            vec![Part {
                ids: ids.clone(),
                col: 0,
            }],
            Some(bias),
            2,
            1,
        )
        .unwrap()[0]; // [1, 3, 2]
    pattern(t.value(out), &[0, 1, 3, 5], "gather_sum");
    let gr = grads(&t, out);
    pattern(
        &g(&gr, tab),
        &[],
        "gather_sum backward (does not read the table)",
    );
    // bag_sum: a zero weight times a NaN row is still NaN (0·NaN = NaN).
    let mut t = Tape::<f64>::new();
    let tab = t.input(array![[0.1, 0.2], [NAN, 0.4], [0.5, 0.6]].into_dyn());
    let ids = Array2::from_shape_vec((2, 2), vec![1, 0, 2, 0]).unwrap();
    let w = Array2::from_shape_vec((2, 2), vec![0.0, 1.0, 1.0, 1.0]).unwrap();
    let out = t.bag_sum(tab, ids, Some(w)).unwrap();
    pattern(t.value(out), &[0], "bag_sum");
    let sq = t.square(out).unwrap();
    // d table[r] = Σ w·2·out[b]: rows 1 and 0 read out[0] (NaN at column 0).
    pattern(&g(&grads(&t, sq), tab), &[0, 2], "bag_sum backward");
}

#[test]
fn link_and_nll() {
    let mut t = Tape::<f64>::new();
    let z = t.input(array![[0.3, NAN], [0.2, -1.0]].into_dyn());
    let eta = t.natural(&Family::Gaussian, z).unwrap();
    pattern(t.value(eta), &[1], "link");
    pattern(&g(&grads(&t, eta), z), &[1], "link backward");
    // nll: a NaN natural parameter is outside every family's domain: an error naming the
    // family and the row, never a finite loss.
    let y = Array2::from_shape_vec((2, 1), vec![0.5, 1.0]).unwrap();
    let e = t
        .nll(&Family::Gaussian, eta, &y, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("gaussian") && e.contains("NaN") && e.contains("row 0"),
        "{e}"
    );
}

fn attention_case(nan_in: usize) -> (Tape<f64>, [Var; 3], Var, Var) {
    let mut t = Tape::<f64>::new();
    let mut xs: Vec<ArrayD<f64>> = (0..3)
        .map(|s| {
            ArrayD::from_shape_fn(IxDyn(&[1, 3, 1, 2]), |ix| {
                ((ix[1] * 2 + ix[3] + s) as f64 * 0.7).sin()
            })
        })
        .collect();
    xs[nan_in][[0, 1, 0, 0]] = NAN;
    let v: Vec<Var> = xs.into_iter().map(|x| t.input(x)).collect();
    let out = t
        .attention(Attention::new(v[0], v[1], v[2]).scale(1.0))
        .unwrap();
    (t, [v[0], v[1], v[2]], out.o, out.lse)
}

#[test]
fn attention_with_a_nan_value() {
    // A NaN value element v[1, 0] reaches o[:, 0] for every query (all see key 1); lse does
    // not read v. dv = Pᵀ·do does not read v either.
    let (t, x, o, lse) = attention_case(2);
    pattern(t.value(o), &[0, 2, 4], "attention o (NaN value)");
    pattern(t.value(lse), &[], "attention lse (NaN value)");
    let gr = grads(&t, o);
    pattern(&g(&gr, x[2]), &[], "attention dv");
    pattern(&g(&gr, x[0]), &[0, 1, 2, 3, 4, 5], "attention dq");
}

#[test]
fn attention_with_a_nan_key_or_query() {
    // A NaN key element makes score column 1 NaN for every query: every o and lse is NaN.
    let (t, _, o, lse) = attention_case(1);
    pattern(t.value(o), &[0, 1, 2, 3, 4, 5], "attention o (NaN key)");
    pattern(t.value(lse), &[0, 1, 2], "attention lse (NaN key)");
    // A NaN query element makes row 1 of the scores all NaN: o[1] and lse[1] must be NaN.
    let (t, x, o, lse) = attention_case(0);
    pattern(t.value(o), &[2, 3], "attention o (NaN query)");
    pattern(t.value(lse), &[1], "attention lse (NaN query)");
    let gr = grads(&t, o);
    pattern(&g(&gr, x[0]), &[2, 3], "attention dq (NaN query)");
}
