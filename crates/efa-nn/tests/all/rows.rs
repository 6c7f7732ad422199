//! The one-sequence row-major kernel of the post-norm block (`efa_nn::ops::block::rows`):
//! forward (probabilities and output) and backward against the naive f64 reference with key
//! padding, at awkward sizes and row strides, for every SIMD variant in f32 and f64; the
//! backward against central differences; errors for slices that do not fit.

use efa_attn::{naive, Attention, Isa, Mask};
use efa_nn::ops::block::rows::{self, Qkv, QkvGrads, Rows, RowsMut, RowsScratch, RowsShape};
use efa_num::Real;
use efa_testkit::{assert_close, central_diff};
use ndarray::{Array4, ArrayD, IxDyn};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// `rows × ld` row-major values uniform in [−amp, amp) (the columns past the width are junk
/// the kernel must not read as data).
fn matrix(rows: usize, ld: usize, amp: f64, seed: u64) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..rows * ld)
        .map(|_| rng.random_range(-amp..amp))
        .collect()
}

/// Row-major `[n, heads·w]` (row stride `ld`) as the naive reference's `[1, heads, n, w]`.
fn four(m: &[f64], ld: usize, n: usize, heads: usize, w: usize) -> Array4<f64> {
    Array4::from_shape_fn((1, heads, n, w), |(_, h, r, c)| m[r * ld + h * w + c])
}

fn cast<T: Real>(v: &[f64]) -> Vec<T> {
    v.iter().map(|&x| T::from_f64(x)).collect()
}

/// The shapes checked: the temperature model's (44 and 132 keys, one or all queries), odd
/// widths, a single row, and padding (fewer visible keys, none).
fn shapes() -> Vec<RowsShape> {
    let s = |nq, nk, keys, heads, dk, dv| RowsShape {
        nq,
        nk,
        keys,
        heads,
        dk,
        dv,
        scale: 1.0 / (dk as f64).sqrt(),
    };
    vec![
        s(44, 44, 44, 2, 16, 16),
        s(1, 132, 132, 2, 16, 16),
        s(5, 7, 3, 2, 3, 5),
        s(1, 1, 1, 1, 1, 1),
        s(17, 33, 33, 3, 4, 4),
        s(3, 5, 0, 2, 2, 2),
        s(20, 18, 17, 1, 17, 2),
        // Whole padded head widths (operands and outputs in place) with key padding: the
        // visible keys end inside a padded block (23 of 40: the product writes columns 0..23 or a
        // little more, depending on the instruction set; the rest of each row is zeroed after).
        s(6, 40, 23, 2, 16, 16),
        s(2, 9, 0, 2, 16, 16),
    ]
}

fn r<T>(data: &[T], ld: usize) -> Rows<'_, T> {
    Rows { data, ld }
}

fn check<T: Real>(s: &RowsShape, isa: Isa, seed: u64) {
    let (hdk, hdv) = (s.heads * s.dk, s.heads * s.dv);
    let (ldq, ldk, ldv, ldo) = (hdk + 3, hdk + 1, hdv + 2, hdv + 5);
    let q = matrix(s.nq, ldq, 1.5, seed);
    let k = matrix(s.nk, ldk, 1.5, seed + 1);
    let v = matrix(s.nk, ldv, 1.0, seed + 2);
    let g = matrix(s.nq, ldo, 1.0, seed + 3);
    let (qt, kt, vt, gt) = (cast::<T>(&q), cast::<T>(&k), cast::<T>(&v), cast::<T>(&g));
    let mut p = vec![T::NAN; s.p_len()];
    let mut o = vec![T::from_f64(7.0); s.nq * ldo];
    let mut scratch = RowsScratch::new();
    rows::forward(
        isa,
        s,
        Qkv {
            q: r(&qt, ldq),
            k: r(&kt, ldk),
            v: r(&vt, ldv),
        },
        &mut p,
        RowsMut {
            data: &mut o,
            ld: ldo,
        },
        &mut scratch,
    )
    .unwrap();
    // P was prefilled with NaN: the forward writes every element (no zero-fill is relied on),
    // zeros outside the visible keys and the queries (`p_index` says where each is kept).
    let mut inside = vec![false; p.len()];
    for h in 0..s.heads {
        for i in 0..s.nq {
            for j in 0..s.keys {
                inside[s.p_index(h, i, j)] = true;
            }
        }
    }
    for (at, x) in p.iter().enumerate() {
        assert!(
            x.is_finite() && (inside[at] || *x == T::ZERO),
            "{s:?}: P[{at}] = {x:?}"
        );
    }
    let mut dq = vec![T::NAN; s.nq * ldq];
    let mut dk = vec![T::NAN; s.nk * ldk];
    let mut dv = vec![T::NAN; s.nk * ldv];
    rows::backward(
        isa,
        s,
        Qkv {
            q: r(&qt, ldq),
            k: r(&kt, ldk),
            v: r(&vt, ldv),
        },
        &p,
        r(&gt, ldo),
        QkvGrads {
            dq: RowsMut {
                data: &mut dq,
                ld: ldq,
            },
            dk: RowsMut {
                data: &mut dk,
                ld: ldk,
            },
            dv: RowsMut {
                data: &mut dv,
                ld: ldv,
            },
        },
        &mut scratch,
    )
    .unwrap();
    // The reference on [1, H, N, D] arrays of the same (rounded) values.
    let back = |x: &[T]| x.iter().map(|v| v.to_f64()).collect::<Vec<_>>();
    let (q4, k4, v4, g4) = (
        four(&back(&qt), ldq, s.nq, s.heads, s.dk),
        four(&back(&kt), ldk, s.nk, s.heads, s.dk),
        four(&back(&vt), ldv, s.nk, s.heads, s.dv),
        four(&back(&gt), ldo, s.nq, s.heads, s.dv),
    );
    let args = Attention::new(q4.view(), k4.view(), v4.view())
        .mask(Mask::none().key_lengths([s.keys]))
        .scale(s.scale);
    let want_o = naive::forward(&args).unwrap().o;
    let want_p = naive::probabilities(&args).unwrap();
    let want = naive::backward(&args, g4.view(), None).unwrap();
    let (atol, rtol) = if T::BYTES == 4 {
        (2e-5, 2e-4)
    } else {
        (1e-13, 1e-11)
    };
    let what = format!("{} {isa:?} {s:?}", T::NAME);
    let p4 = Array4::from_shape_fn((1, s.heads, s.nq, s.nk), |(_, h, i, j)| {
        p[s.p_index(h, i, j)].to_f64()
    });
    assert_close(&p4, &want_p, atol, rtol, &format!("P {what}"));
    let got = |m: &[T], ld, n, w| four(&back(m), ld, n, s.heads, w);
    assert_close(
        &got(&o, ldo, s.nq, s.dv),
        &want_o,
        atol,
        rtol,
        &format!("o {what}"),
    );
    assert_close(
        &got(&dq, ldq, s.nq, s.dk),
        &want.dq,
        atol,
        rtol,
        &format!("dq {what}"),
    );
    assert_close(
        &got(&dk, ldk, s.nk, s.dk),
        &want.dk,
        atol,
        rtol,
        &format!("dk {what}"),
    );
    assert_close(
        &got(&dv, ldv, s.nk, s.dv),
        &want.dv,
        atol,
        rtol,
        &format!("dv {what}"),
    );
    // Columns past the heads' width are not written.
    for i in 0..s.nq {
        assert!(o[i * ldo + hdv..(i + 1) * ldo]
            .iter()
            .all(|x| x.to_f64() == 7.0));
    }
}

#[test]
fn forward_and_backward_match_the_naive_reference_for_every_variant() {
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        for (n, s) in shapes().iter().enumerate() {
            check::<f64>(s, isa, 10 * n as u64);
            check::<f32>(s, isa, 10 * n as u64 + 5);
        }
    }
}

#[test]
fn backward_matches_central_differences() {
    // φ(q, k, v) = Σ ⟨c, o⟩ for one sequence with 2 of 4 keys visible.
    let s = RowsShape {
        nq: 3,
        nk: 4,
        keys: 2,
        heads: 2,
        dk: 2,
        dv: 3,
        scale: 0.8,
    };
    let (hk, hv) = (s.heads * s.dk, s.heads * s.dv);
    let q = matrix(s.nq, hk, 1.0, 1);
    let k = matrix(s.nk, hk, 1.0, 2);
    let v = matrix(s.nk, hv, 1.0, 3);
    let c = matrix(s.nq, hv, 1.0, 4);
    let out = |q: &[f64], k: &[f64], v: &[f64]| {
        let mut p = vec![0.0; s.p_len()];
        let mut o = vec![0.0; s.nq * hv];
        rows::forward(
            Isa::Scalar,
            &s,
            Qkv {
                q: Rows { data: q, ld: hk },
                k: Rows { data: k, ld: hk },
                v: Rows { data: v, ld: hv },
            },
            &mut p,
            RowsMut {
                data: &mut o,
                ld: hv,
            },
            &mut RowsScratch::new(),
        )
        .unwrap();
        (p, o)
    };
    let phi = |q: &[f64], k: &[f64], v: &[f64]| -> f64 {
        out(q, k, v).1.iter().zip(&c).map(|(a, b)| a * b).sum()
    };
    let (p, _) = out(&q, &k, &v);
    let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
    rows::backward(
        Isa::Scalar,
        &s,
        Qkv {
            q: Rows { data: &q, ld: hk },
            k: Rows { data: &k, ld: hk },
            v: Rows { data: &v, ld: hv },
        },
        &p,
        Rows { data: &c, ld: hv },
        QkvGrads {
            dq: RowsMut {
                data: &mut dq,
                ld: hk,
            },
            dk: RowsMut {
                data: &mut dk,
                ld: hk,
            },
            dv: RowsMut {
                data: &mut dv,
                ld: hv,
            },
        },
        &mut RowsScratch::new(),
    )
    .unwrap();
    let arr = |x: &[f64]| ArrayD::from_shape_vec(IxDyn(&[x.len()]), x.to_vec()).unwrap();
    let vec_of = |a: &ArrayD<f64>| a.iter().copied().collect::<Vec<_>>();
    let fq = central_diff(&arr(&q), |x| phi(&vec_of(x), &k, &v));
    let fk = central_diff(&arr(&k), |x| phi(&q, &vec_of(x), &v));
    let fv = central_diff(&arr(&v), |x| phi(&q, &k, &vec_of(x)));
    for (name, got, want) in [("dq", &dq, fq), ("dk", &dk, fk), ("dv", &dv, fv)] {
        for (i, (a, b)) in got.iter().zip(want.iter()).enumerate() {
            assert!(
                (a - b).abs() <= 1e-8,
                "{name}[{i}]: {a} vs finite difference {b}"
            );
        }
    }
    // Hidden keys (rows 2, 3) get exactly zero gradients.
    assert!(dk[2 * hk..].iter().chain(&dv[2 * hv..]).all(|&x| x == 0.0));
}

#[test]
fn slices_that_do_not_fit_are_errors_naming_the_tensor() {
    let s = RowsShape {
        nq: 2,
        nk: 3,
        keys: 3,
        heads: 2,
        dk: 2,
        dv: 2,
        scale: 1.0,
    };
    let x = vec![0.0f64; 12];
    let mut p = vec![0.0; s.p_len()];
    let mut o = vec![0.0; 8];
    let e = rows::forward(
        Isa::Scalar,
        &s,
        Qkv {
            q: Rows { data: &x, ld: 4 },
            k: Rows {
                data: &x[..11],
                ld: 4,
            },
            v: Rows { data: &x, ld: 4 },
        },
        &mut p,
        RowsMut {
            data: &mut o,
            ld: 4,
        },
        &mut RowsScratch::new(),
    )
    .unwrap_err();
    assert_eq!(e.tensor, "k");
    assert!(
        e.message.contains("need 12 elements, the slice has 11"),
        "{e}"
    );
    let bad = RowsShape { keys: 4, ..s };
    let e = rows::forward(
        Isa::Scalar,
        &bad,
        Qkv {
            q: Rows { data: &x, ld: 4 },
            k: Rows { data: &x, ld: 4 },
            v: Rows { data: &x, ld: 4 },
        },
        &mut p,
        RowsMut {
            data: &mut o,
            ld: 4,
        },
        &mut RowsScratch::new(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("4 visible keys of 3"), "{e}");
}

/// The entry points that keep or read the softmax's maxima and scales check that buffer and
/// the slices they read, naming the tensor: on the column path (9 queries or more), a `kept`
/// one element short; for the probabilities alone, a `q` one row short.
#[test]
fn kept_statistics_and_slices_that_do_not_fit_are_errors_naming_the_tensor() {
    let s = RowsShape {
        nq: 10,
        nk: 10,
        keys: 10,
        heads: 2,
        dk: 2,
        dv: 2,
        scale: 1.0,
    };
    assert!(s.p_transposed() && s.kept_len() > 0);
    let x = vec![0.5f64; 40];
    let rows = |n: usize| Rows {
        data: &x[..n * 4],
        ld: 4,
    };
    let mut p = vec![std::mem::MaybeUninit::new(0.0f64); s.p_len()];
    let mut o = vec![0.0; 40];
    let mut short = vec![0.0; s.kept_len() - 1];
    let e = rows::forward_uninit_kept(
        Isa::Scalar,
        &s,
        Qkv {
            q: rows(10),
            k: rows(10),
            v: rows(10),
        },
        &mut p,
        &mut short,
        RowsMut {
            data: &mut o,
            ld: 4,
        },
        &mut RowsScratch::new(),
    )
    .unwrap_err();
    assert_eq!(e.tensor, "kept", "{e}");
    assert!(
        e.to_string().contains(&format!("needs {}", s.kept_len())),
        "{e}"
    );
    let e = rows::probs_uninit(
        Isa::Scalar,
        &s,
        rows(10),
        rows(10),
        Some(&short),
        &mut p,
        &mut RowsScratch::new(),
    )
    .unwrap_err();
    assert_eq!(e.tensor, "kept", "{e}");
    let kept = vec![0.0; s.kept_len()];
    let e = rows::probs_uninit(
        Isa::Scalar,
        &s,
        rows(9),
        rows(10),
        Some(&kept),
        &mut p,
        &mut RowsScratch::new(),
    )
    .unwrap_err();
    assert_eq!(e.tensor, "q", "{e}");
}
