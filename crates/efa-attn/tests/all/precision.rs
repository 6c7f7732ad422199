//! Error budgets of the kernel on its own (docs/design.md §3c) at adversarial inputs: the
//! forward's `o` and `lse` and the backward's `dq`, `dk`, `dv` in f32 and f64 against the
//! naive reference computed in double-double (`naive::forward_in::<Dd, _>`, about 106 bits),
//! each within twice the error of the same naive definition computed plainly in the kernel's
//! own type, or a few units of that type's round-off of the tensor's largest entry.
//!
//! The inputs: sharp scores (queries and keys ×6: scores spread ~12, 36 times the plain ones),
//! one dominant key per row (a key along a direction every query of its head shares), all-equal
//! scores (zero queries: uniform attention, the cancellation `dS = P·(dP − D)` at its worst)
//! and 1e4-scale values and
//! cotangents; at the models' shape (50 positions, head width 16; the tile kernel's fused
//! backward) and a short one (12 positions: the short-sequence path), unmasked and causal.

use crate::common::rand4;
use efa_attn::{naive, Attention, Mask};
use efa_num::{Dd, Real};
use efa_testkit::rel_err;
use ndarray::{Array, Array3, Array4, Dimension};

/// One adversarial case: inputs in f64 (cast to the type under test), `[b, h, n, d]`.
struct Inputs {
    q: Array4<f64>,
    k: Array4<f64>,
    v: Array4<f64>,
    d_o: Array4<f64>,
    d_lse: Array3<f64>,
}

fn inputs(shape: [usize; 4], case: &str, seed: u64) -> Inputs {
    let [b, h, n, d] = shape;
    let mut x = Inputs {
        q: rand4::<f64>(shape, 1.0, seed),
        k: rand4::<f64>(shape, 1.0, seed + 1),
        v: rand4::<f64>(shape, 1.0, seed + 2),
        d_o: rand4::<f64>(shape, 1.0, seed + 3),
        d_lse: Array3::from_shape_fn((b, h, n), |(i, j, l)| {
            ((i * 7 + j * 3 + l) % 11) as f64 / 11.0 - 0.5
        }),
    };
    match case {
        "sharp" => {
            x.q.mapv_inplace(|v| 6.0 * v);
            x.k.mapv_inplace(|v| 6.0 * v);
        }
        "one dominant key" => {
            // Every query of a head shares a direction `u` (±1 per component) and key 5 lies
            // along it: key 5's score is ~20 above the others', its weight 1 − ~1e-8.
            for bi in 0..b {
                for hi in 0..h {
                    for c in 0..d {
                        let u = if (bi + 3 * hi + 5 * c) % 7 < 3 {
                            -1.0
                        } else {
                            1.0
                        };
                        for i in 0..n {
                            x.q[[bi, hi, i, c]] += 1.5 * u;
                        }
                        x.k[[bi, hi, 5, c]] = 4.0 * u;
                    }
                }
            }
        }
        "one dominant key, values 100 apart from zero" => {
            let mut y = inputs(shape, "one dominant key", seed);
            y.v.mapv_inplace(|v| 100.0 + v);
            return y;
        }
        "all-equal scores" => x.q.fill(0.0),
        "1e4-scale values" => {
            x.v.mapv_inplace(|v| 1e4 * v);
            x.d_o.mapv_inplace(|v| 1e4 * v);
        }
        _ => unreachable!("{case}"),
    }
    x
}

fn cast<T: Real>(a: &Array4<f64>) -> Array4<T> {
    a.mapv(T::from_f64)
}

/// The kernel's and the plain definition's errors against the reference.
fn errors<A: Real, D: Dimension>(
    kernel: &Array<A, D>,
    plain: &Array<A, D>,
    want: &Array<Dd, D>,
) -> (f64, f64) {
    (rel_err(kernel, want), rel_err(plain, want))
}

/// The kernel in `T` against the double-double reference, within twice the plain naive
/// definition's error in `T` or `units` of `T`'s epsilon.
fn check<T: Real>(x: &Inputs, mask: &Mask, what: &str) {
    let (q, k, v, d_o) = (
        cast::<T>(&x.q),
        cast::<T>(&x.k),
        cast::<T>(&x.v),
        cast::<T>(&x.d_o),
    );
    let d_lse = x.d_lse.mapv(T::from_f64);
    let args = Attention::new(q.view(), k.view(), v.view())
        .mask(mask.clone())
        .scale(0.25);
    let out = args.forward().unwrap();
    let grads = args
        .backward(out.view(), d_o.view(), Some(d_lse.view()))
        .unwrap();
    let want_out = naive::forward_in::<Dd, T>(&args).unwrap();
    let want = naive::backward_in::<Dd, T>(&args, d_o.view(), Some(d_lse.view())).unwrap();
    let plain_out = naive::forward_in::<T, T>(&args).unwrap();
    let plain = naive::backward_in::<T, T>(&args, d_o.view(), Some(d_lse.view())).unwrap();
    let units = 32.0 * T::EPSILON.to_f64();
    let rows = [
        ("o", errors(&out.o, &plain_out.o, &want_out.o)),
        ("lse", errors(&out.lse, &plain_out.lse, &want_out.lse)),
        ("dq", errors(&grads.dq, &plain.dq, &want.dq)),
        ("dk", errors(&grads.dk, &plain.dk, &want.dk)),
        ("dv", errors(&grads.dv, &plain.dv, &want.dv)),
    ];
    for (name, (kernel, plain)) in rows {
        eprintln!(
            "{what} {}: {name}: kernel {kernel:.2e}, plain {plain:.2e}",
            T::NAME
        );
        assert!(
            kernel.is_finite() && kernel <= (2.0 * plain).max(units),
            "{what} {}: {name}: kernel error {kernel:.3e} of the largest entry, the plain \
             definition's {plain:.3e}",
            T::NAME
        );
    }
}

fn every_case(shape: [usize; 4]) {
    for (m, mask) in [("none", Mask::none()), ("causal", Mask::causal())] {
        for (s, case) in [
            "sharp",
            "one dominant key",
            "all-equal scores",
            "1e4-scale values",
        ]
        .into_iter()
        .enumerate()
        {
            let x = inputs(shape, case, 40 + 10 * s as u64);
            let what = format!("{shape:?} {m} {case}");
            check::<f32>(&x, &mask, &what);
            check::<f64>(&x, &mask, &what);
        }
    }
}

#[test]
fn within_budget_at_adversarial_inputs_at_the_models_shape() {
    // Tile kernel, fused backward (b·h ≥ FUSED_MIN_HEADS).
    every_case([4, 2, 50, 16]);
}

#[test]
fn within_budget_at_adversarial_inputs_on_the_short_path() {
    // At most 16 keys and at least 16 heads in all: the short-sequence path.
    every_case([8, 2, 12, 16]);
}

/// The backward's definition in double-double given the forward's stored `o` and `lse` (as
/// the kernel reads them): `P = exp(scale·q·kᵀ − lse)` on visible keys (`causal`: `j ≤ i`),
/// `D = ⟨dO, o⟩ − dlse`, `dS = P·(dO·vᵀ − D)`, `dq = scale·dS·k`, `dk = scale·dSᵀ·q`. Against
/// it the kernel's error is its own arithmetic, not the rounding of its inputs.
fn backward_given_outputs(
    x: &Inputs,
    (o, lse): (&Array4<f64>, &Array3<f64>),
    scale: f64,
    causal: bool,
) -> (Array4<Dd>, Array4<Dd>) {
    let [b, h, n, d] = [x.q.dim().0, x.q.dim().1, x.q.dim().2, x.q.dim().3];
    let dv = x.v.dim().3;
    let dd = |a: f64| Dd::from_f64(a);
    let (mut dq, mut dk) = (
        Array4::from_elem((b, h, n, d), Dd::ZERO),
        Array4::from_elem((b, h, n, d), Dd::ZERO),
    );
    for bi in 0..b {
        for hi in 0..h {
            for i in 0..n {
                let mut di = -dd(x.d_lse[[bi, hi, i]]);
                for c in 0..dv {
                    di += dd(x.d_o[[bi, hi, i, c]]) * dd(o[[bi, hi, i, c]]);
                }
                for j in 0..if causal { i + 1 } else { n } {
                    let mut sij = Dd::ZERO;
                    for c in 0..d {
                        sij += dd(x.q[[bi, hi, i, c]]) * dd(x.k[[bi, hi, j, c]]);
                    }
                    let pij = (dd(scale) * sij - dd(lse[[bi, hi, i]])).exp();
                    let mut dp = Dd::ZERO;
                    for c in 0..dv {
                        dp += dd(x.d_o[[bi, hi, i, c]]) * dd(x.v[[bi, hi, j, c]]);
                    }
                    let ds = dd(scale) * pij * (dp - di);
                    for c in 0..d {
                        dq[[bi, hi, i, c]] += ds * dd(x.k[[bi, hi, j, c]]);
                        dk[[bi, hi, j, c]] += ds * dd(x.q[[bi, hi, i, c]]);
                    }
                }
            }
        }
    }
    (dq, dk)
}

/// In f64 the backward forms `dP − D` with one rounding (the product starts from `−D`, itself
/// a compensated sum; docs/design.md §3c). Where one key takes all the weight and the values
/// share a common part far larger than their spread, `dP ≈ D` for that key and their
/// difference is far smaller than either: `dq` and `dk` then stay within 16 f64 epsilons of
/// the definition given the same stored `o` and `lse`, on the tile kernel (one task per head,
/// and, with fewer heads than that needs, key and query tiles in two passes over 132 and 300
/// positions: several tiles each way) and the short path, where rounding `dP` and `D` apart
/// loses about `|v| / spread` of their digits.
#[test]
fn f64_gradients_keep_their_digits_at_one_dominant_key_over_a_common_value() {
    let case = "one dominant key, values 100 apart from zero";
    for shape in [
        [4, 2, 50, 16],
        [8, 2, 12, 16],
        [2, 2, 132, 16],
        [2, 2, 300, 16],
    ] {
        for (causal, mask) in [(false, Mask::none()), (true, Mask::causal())] {
            let x = inputs(shape, case, 90);
            let args = Attention::new(x.q.view(), x.k.view(), x.v.view())
                .mask(mask.clone())
                .scale(0.25);
            let out = args.forward().unwrap();
            let g = args
                .backward(out.view(), x.d_o.view(), Some(x.d_lse.view()))
                .unwrap();
            let (dq, dk) = backward_given_outputs(&x, (&out.o, &out.lse), 0.25, causal);
            for (name, got, w) in [("dq", &g.dq, &dq), ("dk", &g.dk, &dk)] {
                let e = rel_err(got, w);
                eprintln!("{shape:?} causal {causal} {name}: {e:.2e} of the largest entry");
                assert!(
                    e <= 16.0 * f64::EPSILON,
                    "{shape:?} causal {causal} {name}: {e:.2e} of the largest entry"
                );
            }
        }
    }
}

/// The reference is what it claims: double-double agrees with f64 to f64's round-off on a
/// benign case, and is not f64 itself (it differs where f64 rounds).
#[test]
fn the_double_double_reference_is_more_precise_than_f64() {
    let x = inputs([2, 2, 20, 8], "sharp", 3);
    let (q, k, v) = (x.q.clone(), x.k.clone(), x.v.clone());
    let args = Attention::new(q.view(), k.view(), v.view()).scale(0.25);
    let dd = naive::forward_in::<Dd, f64>(&args).unwrap();
    let f = naive::forward_in::<f64, f64>(&args).unwrap();
    let e = rel_err(&f.o, &dd.o);
    assert!(e > 0.0 && e < 1e-13, "f64 against double-double: {e:e}");
}
