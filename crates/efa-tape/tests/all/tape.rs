//! Tape-level behaviour: handles, errors, VJPs, gradient store, dumps, determinism, f32/f64.

use efa_check::{check_determinism, Location, Mode, Tolerance};
use efa_tape::{
    audit, audit_vjp, audit_vjp_linearity, AuditOptions, FusedOp, Result, Tape, TapeError, Var,
};
use ndarray::{array, ArrayD, IxDyn};

fn seeded(shape: &[usize], seed: u64) -> ArrayD<f64> {
    // deterministic, irregular values in (−1, 1) from a small LCG
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ArrayD::from_shape_simple_fn(IxDyn(shape), || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    })
}

/// A two-layer block: layer_norm(gelu(x W1 + b1) W2) → softmax cross-entropy, plus an
/// embedding lookup and a gathered position; exercises most ops together.
fn model(t: &mut Tape<f64>, v: &[Var]) -> Result<Var> {
    let (emb, w1, b1, w2, gain, bias) = (v[0], v[1], v[2], v[3], v[4], v[5]);
    let ids = array![[0, 2, 1], [3, 3, 0]].into_dyn();
    let x = t.embedding(emb, &ids)?; // [2, 3, 4]
    let h = t.matmul(x, w1, false, false)?; // [2, 3, 5]
    let h = t.add(h, b1)?;
    let h = t.gelu(h)?;
    let h = t.matmul(h, w2, false, true)?; // w2 [4, 5]ᵀ → [2, 3, 4]
    let h = t.layer_norm(h, gain, bias, 1e-5)?;
    let r = t.add(h, x)?; // residual: x used twice
    let z = t.gather_positions(r, &[2, 0])?; // [2, 4]
    t.softmax_cross_entropy(z, &[1, 3])
}

fn model_params() -> Vec<(&'static str, ArrayD<f64>)> {
    vec![
        ("emb", seeded(&[4, 4], 1)),
        ("w1", seeded(&[4, 5], 2)),
        ("b1", seeded(&[5], 3)),
        ("w2", seeded(&[4, 5], 4)),
        ("gain", seeded(&[4], 5).mapv(|v| 1.0 + 0.3 * v)),
        ("bias", seeded(&[4], 6)),
    ]
}

#[test]
fn whole_block_audits_in_full_and_along_directions() {
    let p = model_params();
    let full = audit(&p, model, &AuditOptions::default()).unwrap();
    assert!(full.passed(), "{full}");
    assert_eq!(full.params.len(), 6);
    assert_eq!(full.summary("w1").unwrap().checked, 20);
    let opts = AuditOptions {
        mode: Mode::Auto {
            max_full: 6,
            n: 3,
            seed: 11,
        },
        fd: efa_check::FdOptions {
            rel_step: 1e-4,
            richardson: true,
        },
        ..Default::default()
    };
    let r = audit(&p, model, &opts).unwrap();
    assert!(r.passed(), "{r}");
    assert_eq!(r.summary("w1").unwrap().checked, 3);
}

/// Squares `x` but claims the gradient is `2x·g + 0.5` at index [0, 1]: wrong exactly there.
#[derive(Clone)]
struct WrongGrad;

impl FusedOp<f64> for WrongGrad {
    fn name(&self) -> &str {
        "wrong"
    }
    fn forward(&mut self, x: &[&ArrayD<f64>]) -> Result<Vec<ArrayD<f64>>> {
        Ok(vec![x[0].mapv(|v| v * v)])
    }
    fn backward(
        &self,
        x: &[&ArrayD<f64>],
        _y: &[&ArrayD<f64>],
        dy: &[Option<&ArrayD<f64>>],
        _need: &[bool],
    ) -> Result<Vec<Option<ArrayD<f64>>>> {
        let mut g = x[0].mapv(|v| 2.0 * v) * dy[0].expect("used");
        g[[0, 1]] += 0.5;
        Ok(vec![Some(g)])
    }
}

#[test]
fn audit_reports_a_wrong_fused_gradient_at_its_exact_index() {
    let p = vec![("x", array![[0.5, -1.0, 2.0]].into_dyn())];
    let r = audit(
        &p,
        |t, v| {
            let y = t.fused(Box::new(WrongGrad), &[v[0]])?;
            t.sum_all(y[0])
        },
        &AuditOptions::default(),
    )
    .unwrap();
    assert!(!r.passed());
    assert_eq!(r.failures.len(), 1, "{r}");
    assert_eq!(r.failures[0].param, "x");
    assert_eq!(r.failures[0].location, Location::Element(vec![0, 1]));
    assert!((r.failures[0].analytic - (-1.5)).abs() < 1e-12);
    assert!((r.failures[0].numeric - (-2.0)).abs() < 1e-6);
}

#[test]
fn vjp_audit_and_cotangent_linearity() {
    let p = vec![("a", seeded(&[3, 4], 7)), ("b", seeded(&[4, 2], 8))];
    let build = |t: &mut Tape<f64>, v: &[Var]| {
        let c = t.matmul(v[0], v[1], false, false)?;
        let s = t.sigmoid(c)?;
        t.log_softmax(s)
    };
    let r = audit_vjp(&p, build, 3, &AuditOptions::default()).unwrap();
    assert!(r.passed(), "{r}");
    let lin = audit_vjp_linearity(&p, build, 5, &Tolerance::new(1e-12, 1e-10)).unwrap();
    assert!(lin.passed(), "{lin}");
    assert_eq!(lin.params[0].checked, 12 + 8);
}

#[test]
fn vars_from_another_tape_are_errors() {
    let mut t1 = Tape::<f64>::new();
    let mut t2 = Tape::<f64>::new();
    let a = t1.input(array![1.0].into_dyn());
    let b = t2.input(array![2.0].into_dyn());
    let e: TapeError = t2.add(a, b).unwrap_err();
    assert_eq!(e.op, "add");
    assert!(e.message.contains("belongs to tape"), "{e}");
    assert!(t2.try_value(a).is_err());
    assert!(t2.backward(a).is_err());
    let g = t2.backward(b).unwrap();
    assert!(g.wrt(a).is_none());
    assert_eq!(g.wrt(b).unwrap(), &array![1.0].into_dyn());
}

#[test]
fn backward_requires_one_element_and_matching_cotangent() {
    let mut t = Tape::<f64>::new();
    let x = t.input(array![1.0, 2.0].into_dyn());
    let y = t.exp(x).unwrap();
    let e = t.backward(y).err().unwrap();
    assert!(
        e.to_string().contains("exactly one element") && e.to_string().contains("[2]"),
        "{e}"
    );
    let e = t.backward_with(y, array![1.0].into_dyn()).err().unwrap();
    assert!(
        e.to_string().contains("[1]") && e.to_string().contains("[2]"),
        "{e}"
    );
    // a [1, 1] output is fine for backward
    let m = t.reshape(x, &[2, 1]).unwrap();
    let s = t.sum(m, &[0], true).unwrap();
    assert_eq!(
        t.backward(s).unwrap().wrt(x).unwrap(),
        &array![1.0, 1.0].into_dyn()
    );
}

#[test]
fn grads_store_params_in_order_and_an_unused_param_is_an_error_unless_allowed() {
    let mut t = Tape::<f64>::new();
    let a = t.param("a", array![1.0, 2.0].into_dyn()).unwrap();
    let unused = t.param("unused", array![[5.0]].into_dyn()).unwrap();
    let c = t.constant(array![3.0, 4.0].into_dyn());
    assert!(t
        .param("a", array![0.0].into_dyn())
        .unwrap_err()
        .to_string()
        .contains("duplicate"));
    let y = t.mul(a, c).unwrap();
    let s = t.sum_all(y).unwrap();
    let g = t.backward(s).unwrap();
    assert_eq!(g.param("a").unwrap(), &array![3.0, 4.0].into_dyn());
    // A parameter that does not reach the output has no gradient: asking for it is an error
    // naming it (a zero would hide the disconnection from every audit) ...
    let e = g.param("unused").unwrap_err().to_string();
    assert!(e.contains("`unused` does not reach the output"), "{e}");
    let e = g.params().unwrap_err().to_string();
    assert!(e.contains("`unused`"), "{e}");
    // ... unless the caller opts in.
    assert_eq!(g.param_if_used("unused").unwrap(), None);
    assert_eq!(
        g.param_if_used("a").unwrap(),
        Some(&array![3.0, 4.0].into_dyn())
    );
    assert_eq!(g.unused_params(), ["unused"]);
    assert!(g.wrt(unused).is_none());
    assert!(g.wrt(c).is_none());
    assert!(g
        .param("nope")
        .unwrap_err()
        .to_string()
        .contains("no parameter named `nope`"));
    assert!(g.param_if_used("nope").is_err());
    assert!(!t.needs_grad(c).unwrap() && t.needs_grad(y).unwrap());
}

#[test]
fn dump_lists_nodes_inputs_shapes_and_saved_bytes() {
    let mut t = Tape::<f64>::new();
    let a = t.param("w", ArrayD::zeros(IxDyn(&[2, 3]))).unwrap();
    let b = t.constant(ArrayD::zeros(IxDyn(&[3, 4])));
    let c = t.matmul(a, b, false, false).unwrap();
    let _ = t.sum_all(c).unwrap();
    let d = t.dump();
    let lines: Vec<&str> = d.lines().collect();
    assert_eq!(lines.len(), 6, "{d}");
    assert!(lines[1].contains("param 'w'") && lines[1].contains("[2, 3]"));
    // matmul saves both operands: (6 + 12)·8 bytes
    assert!(
        lines[3].contains("matmul") && lines[3].contains("[0, 1]") && lines[3].contains("144"),
        "{d}"
    );
    assert!(lines[5].contains("4 nodes, 144 bytes"), "{d}");
    assert_eq!(t.len(), 4);
}

#[test]
fn backward_is_bitwise_deterministic() {
    let p = model_params();
    let r = check_determinism(|| {
        let mut t = Tape::new();
        let v: Vec<Var> = p
            .iter()
            .map(|(n, a)| t.param(n, a.clone()).unwrap())
            .collect();
        let l = model(&mut t, &v).unwrap();
        let g = t.backward(l).unwrap();
        g.params()
            .unwrap()
            .iter()
            .flat_map(|(_, a)| a.iter().copied().collect::<Vec<_>>())
            .collect()
    });
    assert!(r.passed(), "{r}");
}

#[test]
fn f32_forward_and_gradients_agree_with_f64() {
    let p = model_params();
    let mut t64 = Tape::<f64>::new();
    let v64: Vec<Var> = p
        .iter()
        .map(|(n, a)| t64.param(n, a.clone()).unwrap())
        .collect();
    let l64 = model(&mut t64, &v64).unwrap();
    let g64 = t64.backward(l64).unwrap();
    // the same graph in f32 (model is written for f64; rebuild generically here)
    fn model32(t: &mut Tape<f32>, v: &[Var]) -> Result<Var> {
        let ids = array![[0, 2, 1], [3, 3, 0]].into_dyn();
        let x = t.embedding(v[0], &ids)?;
        let h = t.matmul(x, v[1], false, false)?;
        let h = t.add(h, v[2])?;
        let h = t.gelu(h)?;
        let h = t.matmul(h, v[3], false, true)?;
        let h = t.layer_norm(h, v[4], v[5], 1e-5)?;
        let r = t.add(h, x)?;
        let z = t.gather_positions(r, &[2, 0])?;
        t.softmax_cross_entropy(z, &[1, 3])
    }
    let mut t32 = Tape::<f32>::new();
    let v32: Vec<Var> = p
        .iter()
        .map(|(n, a)| t32.param(n, a.mapv(|x| x as f32)).unwrap())
        .collect();
    let l32 = model32(&mut t32, &v32).unwrap();
    let g32 = t32.backward(l32).unwrap();
    let (a, b) = (
        t64.value(l64)[IxDyn(&[])],
        t32.value(l32)[IxDyn(&[])] as f64,
    );
    assert!((a - b).abs() < 1e-5 * a.abs().max(1.0), "{a} vs {b}");
    // gradients: |g32 − g64| ≤ 1e-4 + 1e-3·|g64|
    for ((n, x), (_, y)) in g64.params().unwrap().iter().zip(g32.params().unwrap()) {
        for (p, q) in x.iter().zip(y.iter()) {
            assert!(
                (p - *q as f64).abs() <= 1e-4 + 1e-3 * p.abs(),
                "{n}: {p} vs {q}"
            );
        }
    }
}

#[test]
fn same_var_on_both_sides_of_matmul_accumulates() {
    // G = X·Xᵀ; loss = Σ G∘W for a fixed non-symmetric W, so dX = (W + Wᵀ)·X.
    let x = seeded(&[3, 2], 21);
    let w = seeded(&[3, 3], 22);
    let p = vec![("x", x.clone())];
    let wc = w.clone();
    let r = audit(
        &p,
        move |t, v| {
            let g = t.matmul(v[0], v[0], false, true)?;
            let w = t.constant(wc.clone());
            let g = t.mul(g, w)?;
            t.sum_all(g)
        },
        &AuditOptions::default(),
    )
    .unwrap();
    assert!(r.passed(), "{r}");
    let mut t = Tape::<f64>::new();
    let vx = t.param("x", x.clone()).unwrap();
    let vw = t.constant(w.clone());
    let g = t.matmul(vx, vx, false, true).unwrap();
    let g = t.mul(g, vw).unwrap();
    let l = t.sum_all(g).unwrap();
    let gr = t.backward(l).unwrap();
    for i in 0..3 {
        for k in 0..2 {
            let r: f64 = (0..3).map(|j| (w[[i, j]] + w[[j, i]]) * x[[j, k]]).sum();
            assert!((gr.wrt(vx).unwrap()[[i, k]] - r).abs() < 1e-14);
        }
    }
}

#[test]
fn nonfinite_output_at_the_start_warns_naming_the_first_nonfinite_node() {
    // l = Σ ln x with x[1] = −1: ln gives NaN at node 1 (flat index 1), so l is NaN.
    let p = vec![("x", array![0.5, -1.0, 2.0].into_dyn())];
    let r = audit(
        &p,
        |t, v| {
            let y = t.log(v[0])?;
            t.sum_all(y)
        },
        &AuditOptions::default(),
    )
    .unwrap();
    assert!(!r.passed());
    let w = r.nonfinite_base.as_deref().expect("warning");
    assert!(
        w.starts_with("the audited output (node 2, shape []) is NaN"),
        "{w}"
    );
    assert!(
        w.contains("first non-finite value on the tape: log: anomaly in forward: node 1")
            && w.contains("produced NaN at flat index 1"),
        "{w}"
    );
    assert!(r.to_string().starts_with("WARNING"), "{r}");
    // The same for a vjp audit and the linearity check, on an output that overflows to +∞.
    let build = |t: &mut Tape<f64>, v: &[Var]| t.exp(v[0]);
    let p = vec![("x", array![1.0, 800.0].into_dyn())];
    let r = audit_vjp(&p, build, 1, &AuditOptions::default()).unwrap();
    let w = r.nonfinite_base.as_deref().expect("warning");
    assert!(w.contains("is inf at flat index 1"), "{w}");
    assert!(!r.passed());
    let lin = audit_vjp_linearity(&p, build, 1, &Tolerance::default()).unwrap();
    assert!(lin.nonfinite_base.is_some() && !lin.passed());
    // A finite start has no warning.
    let p = vec![("x", array![1.0, 2.0].into_dyn())];
    assert!(audit_vjp(&p, build, 1, &AuditOptions::default())
        .unwrap()
        .nonfinite_base
        .is_none());
}

/// `set_relu_kink_flip`: inputs within the band of the kink (relative to the largest |x|) get
/// the other side's derivative, the rest the exact one; `None` restores the exact derivative.
#[test]
fn relu_kink_flip_inverts_only_the_inputs_near_the_kink() {
    let x = ndarray::arr1(&[4.0, 3e-7, -2e-7, -1.0, 0.0, 5e-5]).into_dyn();
    let run = |band: Option<f64>| -> Vec<f64> {
        let mut t = Tape::<f64>::new();
        t.set_relu_kink_flip(band);
        let v = t.param("x", x.clone()).unwrap();
        let w = t.constant(ndarray::arr1(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).into_dyn());
        let r = t.relu(v).unwrap();
        let p = t.mul(r, w).unwrap();
        let s = t.sum_all(p).unwrap();
        t.backward(s)
            .unwrap()
            .wrt(v)
            .unwrap()
            .iter()
            .copied()
            .collect()
    };
    assert_eq!(run(None), vec![1.0, 2.0, 0.0, 0.0, 0.0, 6.0]);
    // Band 1e-7 of max |x| = 4: |x| ≤ 4e-7 flips (3e-7, -2e-7 and the 0 at the kink).
    assert_eq!(run(Some(1e-7)), vec![1.0, 0.0, 3.0, 0.0, 5.0, 6.0]);
    assert_eq!(run(Some(0.0)), vec![1.0, 2.0, 0.0, 0.0, 5.0, 6.0]);
}
