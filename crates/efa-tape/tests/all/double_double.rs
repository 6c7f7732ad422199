//! The tape in the double-double reference type (`efa_num::Dd`, ~106 bits): a graph through
//! every primitive op family (products, element-wise and unary maps, reductions, shapes,
//! gathers, softmax and its log, layer norm, the two losses) against central differences
//! computed in Dd. With steps of 1e-9, truncation (h² ≈ 1e-18) and round-off (1e-32 / h) leave
//! the differences good to ~1e-17, so a gradient that agrees is right far beyond what an f64
//! finite-difference audit (~1e-7) can see; and the Dd gradient agrees with the f64 tape's to
//! f64 round-off.

use efa_num::{Dd, Real};
use efa_tape::{Result, Tape, Var};
use ndarray::{ArrayD, IxDyn};

/// Seeded inputs `x [3, 4]`, `w [4, 5]`, `g, b [5]` (a fixed pattern, no generator needed).
fn inputs() -> Vec<(&'static str, ArrayD<f64>)> {
    let f = |shape: &[usize], k: f64| {
        let n: usize = shape.iter().product();
        let v: Vec<f64> = (0..n)
            .map(|i| ((i as f64) * 0.37 + k).sin() * 0.8)
            .collect();
        ArrayD::from_shape_vec(IxDyn(shape), v).unwrap()
    };
    vec![
        ("x", f(&[3, 4], 0.1)),
        ("w", f(&[4, 5], 0.7)),
        ("g", f(&[5], 1.3).mapv(|v| 1.0 + 0.2 * v)),
        ("b", f(&[5], 2.1)),
    ]
}

/// A scalar through every op family.
fn graph<T: Real>(t: &mut Tape<T>, v: &[Var]) -> Result<Var> {
    let (x, w, g, b) = (v[0], v[1], v[2], v[3]);
    let h = t.matmul(x, w, false, false)?; // [3, 5]
    let h = t.layer_norm(h, g, b, T::from_f64(1e-3))?;
    let a = t.tanh(h)?;
    let s = t.sigmoid(h)?;
    let p = t.softplus(a)?;
    let q = t.mul(p, s)?;
    let e = t.exp(a)?;
    let r = t.div(q, e)?;
    let r = t.sub(r, a)?;
    let sq = t.square(r)?;
    let sq = t.add(sq, e)?;
    let l = t.log(sq)?;
    let rt = t.sqrt(sq)?;
    let sm = t.softmax(l)?;
    let ls = t.log_softmax(rt)?;
    let m = t.mul(sm, ls)?;
    let tr = t.transpose(m, 0, 1)?; // [5, 3]
    let rows = t.reshape(tr, &[5, 3])?;
    let sl = t.slice(rows, 0, 1, 4)?; // [3, 3]
    let sl3 = t.reshape(sl, &[3, 3, 1])?;
    let gp = t.gather_positions(sl3, &[2, 0, 1])?; // [3, 1]
    let col = t.sum(sl, &[1], false)?; // [3]
    let ce = t.softmax_cross_entropy(m, &[4, 0, 2])?;
    let mse = t.mse(col, &ArrayD::from_elem(IxDyn(&[3]), T::from_f64(0.25)))?;
    let gs = t.sum_all(gp)?;
    let y = t.add(ce, mse)?;
    let y = t.add(y, gs)?;
    let rl = t.relu(h)?;
    let rl = t.mean_all(rl)?;
    t.add(y, rl)
}

fn eval<T: Real>(vals: &[(&str, ArrayD<T>)]) -> (T, Vec<ArrayD<T>>) {
    let mut t = Tape::<T>::new();
    let v: Vec<Var> = vals
        .iter()
        .map(|(n, a)| t.param(n, a.clone()).unwrap())
        .collect();
    let y = graph(&mut t, &v).unwrap();
    let loss = t.value(y).iter().next().copied().unwrap();
    let grads = t.backward(y).unwrap();
    let g = v.iter().map(|&x| grads.wrt(x).unwrap().clone()).collect();
    (loss, g)
}

type Build = fn(&mut Tape<Dd>, &[Var]) -> Result<Var>;

/// One op family at a time (each a scalar through `sum_all`), then the whole graph.
fn families() -> Vec<(&'static str, Build)> {
    fn h(t: &mut Tape<Dd>, v: &[Var]) -> Result<Var> {
        t.matmul(v[0], v[1], false, false)
    }
    vec![
        ("matmul", |t, v| {
            let y = h(t, v)?;
            t.sum_all(y)
        }),
        ("layer_norm", |t, v| {
            let y = h(t, v)?;
            let y = t.layer_norm(y, v[2], v[3], Dd::from_f64(1e-3))?;
            let y = t.square(y)?;
            t.sum_all(y)
        }),
        ("tanh", |t, v| {
            let y = h(t, v)?;
            let y = t.tanh(y)?;
            t.sum_all(y)
        }),
        ("sigmoid", |t, v| {
            let y = h(t, v)?;
            let y = t.sigmoid(y)?;
            t.sum_all(y)
        }),
        ("softplus", |t, v| {
            let y = h(t, v)?;
            let y = t.softplus(y)?;
            t.sum_all(y)
        }),
        ("exp, log, sqrt, div", |t, v| {
            let y = h(t, v)?;
            let e = t.exp(y)?;
            let l = t.log(e)?;
            let r = t.sqrt(e)?;
            let d = t.div(l, r)?;
            t.sum_all(d)
        }),
        ("softmax, log_softmax", |t, v| {
            let y = h(t, v)?;
            let a = t.softmax(y)?;
            let b = t.log_softmax(y)?;
            let m = t.mul(a, b)?;
            t.sum_all(m)
        }),
        ("softmax_cross_entropy", |t, v| {
            let y = h(t, v)?;
            t.softmax_cross_entropy(y, &[4, 0, 2])
        }),
        ("mse", |t, v| {
            let y = h(t, v)?;
            let s = t.sum(y, &[1], false)?;
            t.mse(s, &ArrayD::from_elem(IxDyn(&[3]), Dd::from_f64(0.25)))
        }),
        ("relu, mean_all", |t, v| {
            let y = h(t, v)?;
            let y = t.relu(y)?;
            t.mean_all(y)
        }),
        ("transpose, slice, gather, sum", |t, v| {
            let y = h(t, v)?;
            let y = t.square(y)?;
            let tr = t.transpose(y, 0, 1)?;
            let sl = t.slice(tr, 0, 1, 4)?;
            let sl3 = t.reshape(sl, &[3, 3, 1])?;
            let gp = t.gather_positions(sl3, &[2, 0, 1])?;
            t.sum_all(gp)
        }),
        ("whole graph", graph::<Dd>),
    ]
}

#[test]
fn double_double_gradients_match_double_double_central_differences() {
    let base: Vec<(&str, ArrayD<Dd>)> = inputs()
        .into_iter()
        .map(|(n, a)| (n, a.mapv(Dd::from_f64)))
        .collect();
    let h = Dd::from_f64(1e-9);
    for (family, build) in families() {
        let run = |vals: &[(&str, ArrayD<Dd>)]| -> (Dd, Vec<ArrayD<Dd>>) {
            let mut t = Tape::<Dd>::new();
            let v: Vec<Var> = vals
                .iter()
                .map(|(n, a)| t.param(n, a.clone()).unwrap())
                .collect();
            let y = build(&mut t, &v).unwrap();
            let loss = t.value(y).iter().next().copied().unwrap();
            let g = t.backward(y).unwrap();
            (
                loss,
                v.iter()
                    .map(|&x| {
                        g.wrt(x)
                            .cloned()
                            .unwrap_or_else(|| ArrayD::zeros(IxDyn(&[0])))
                    })
                    .collect(),
            )
        };
        let (_, grads) = run(&base);
        let mut worst = 0.0f64;
        for (k, (name, a)) in base.iter().enumerate() {
            if grads[k].len() != a.len() {
                continue; // not an input of this family
            }
            let scale = grads[k].iter().fold(0.0f64, |m, g| m.max(g.to_f64().abs()));
            for i in 0..a.len() {
                let at = |d: Dd| {
                    let mut p = base.clone();
                    p[k].1.as_slice_mut().unwrap()[i] += d;
                    run(&p).0
                };
                let fd = (at(h) - at(-h)) / (h + h);
                let got = grads[k].as_slice().unwrap()[i];
                let err = ((got - fd).abs() / Dd::from_f64(scale.max(1e-300))).to_f64();
                worst = worst.max(err);
                assert!(
                    err < 1e-15,
                    "{family}: {name}[{i}]: tape {got}, differences {fd} ({err:.2e})"
                );
            }
        }
        eprintln!("{family}: worst relative difference {worst:.2e}");
    }
}

#[test]
fn double_double_and_f64_tapes_agree_to_f64_round_off() {
    let f64s = inputs();
    let dds: Vec<(&str, ArrayD<Dd>)> = f64s
        .iter()
        .map(|(n, a)| (*n, a.mapv(Dd::from_f64)))
        .collect();
    let (l64, g64) = eval(&f64s);
    let (ldd, gdd) = eval(&dds);
    assert!((ldd.to_f64() - l64).abs() <= 1e-14 * l64.abs());
    for (a, b) in g64.iter().zip(&gdd) {
        let scale = b.iter().fold(0.0f64, |m, g| m.max(g.to_f64().abs()));
        for (x, y) in a.iter().zip(b.iter()) {
            assert!((x - y.to_f64()).abs() <= 1e-13 * scale, "{x} vs {y}");
        }
    }
    // And the Dd values are not just f64 values: the low words carry digits.
    assert!(gdd.iter().flatten().any(|g| g.lo() != 0.0));
}

#[test]
fn rounding_recorded_values_to_f64_stores_f64_and_keeps_exact_arithmetic() {
    let x = ndarray::arr1(&[0.3, -1.7, 2.9])
        .into_dyn()
        .mapv(Dd::from_f64);
    let run = |round: bool| {
        let mut t = Tape::<Dd>::new();
        t.set_round_values_to_f64(round);
        let v = t.param("x", x.clone()).unwrap();
        let e = t.exp(v).unwrap();
        let y = t.sum_all(e).unwrap();
        let g = t.backward(y).unwrap();
        (
            t.value(e).clone(),
            t.value(y).clone(),
            g.wrt(v).unwrap().clone(),
        )
    };
    let (exact_e, exact_y, exact_g) = run(false);
    let (e, y, g) = run(true);
    // Every recorded value is the f64 nearest to the exact one…
    for (a, b) in e.iter().zip(&exact_e) {
        assert_eq!(*a, Dd::from_f64(b.to_f64()), "exp value {b}");
        assert_eq!(a.lo(), 0.0);
    }
    // …the sum is the f64 nearest to the exact sum of the stored (rounded) values…
    let stored: Dd = e.iter().fold(Dd::ZERO, |s, v| s + *v);
    let first = |a: &ArrayD<Dd>| *a.iter().next().unwrap();
    assert_eq!(first(&y).to_f64(), stored.to_f64());
    assert!(first(&exact_y).lo() != 0.0);
    // …and the gradient (exp's, read from the stored value) is the rounded exp.
    for (a, b) in g.iter().zip(&exact_g) {
        assert_eq!(a.to_f64(), b.to_f64());
    }
    // Off, the values keep their low words.
    assert!(exact_e.iter().any(|v| v.lo() != 0.0));
}

/// With f32 storage every recorded value (the parameter too) is the f32 nearest to the exact
/// one, the arithmetic between them stays exact, and the gradient read from stored values is
/// the exact gradient at those values.
#[test]
fn rounding_recorded_values_to_f32_stores_f32_and_keeps_exact_arithmetic() {
    let x = ndarray::arr1(&[0.3, -1.7, 2.9])
        .into_dyn()
        .mapv(Dd::from_f64);
    let run = |f32s: bool| {
        let mut t = Tape::<Dd>::new();
        // f64 first, then f32: the later call decides (`false` turns rounding off).
        t.set_round_values_to_f64(true);
        t.set_round_values_to_f32(f32s);
        let v = t.param("x", x.clone()).unwrap();
        let e = t.exp(v).unwrap();
        let y = t.sum_all(e).unwrap();
        let g = t.backward(y).unwrap();
        (
            t.value(v).clone(),
            t.value(e).clone(),
            t.value(y).clone(),
            g.wrt(v).unwrap().clone(),
        )
    };
    let (xs, e, y, g) = run(true);
    let to32 = |d: Dd| f64::from(d.to_f64() as f32);
    for (a, b) in xs.iter().zip(&x) {
        assert_eq!(a.to_f64(), to32(*b), "parameter {b}");
        assert_eq!(a.lo(), 0.0);
    }
    // exp of the stored parameter, rounded to f32 (the gradient of sum∘exp is that value).
    for ((a, s), d) in e.iter().zip(&xs).zip(&g) {
        let exact = s.exp();
        assert_eq!(a.to_f64(), to32(exact), "exp value at {s}");
        assert_ne!(a.to_f64(), exact.to_f64(), "f32 storage must round {exact}");
        assert_eq!(d, a);
    }
    let stored: Dd = e.iter().fold(Dd::ZERO, |s, v| s + *v);
    assert_eq!(y.iter().next().unwrap().to_f64(), to32(stored));
    // Off: values keep more than f32.
    let (_, e64, _, _) = run(false);
    assert!(e64.iter().zip(&e).any(|(a, b)| a.to_f64() != b.to_f64()));
}
