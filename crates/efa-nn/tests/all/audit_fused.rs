//! Op-level audits on recorded tapes: `Tape::audit_fused_nodes` on every fused node, with a
//! planted bug (one element of one input's gradient off by 0.25) beside the library's
//! `linear`, and on a tape that uses every `efa-nn` fused op (gather_sum, linear, attention,
//! link, nll, bag_sum).

use efa_check::{Location, Mode};
use efa_nn::prelude::*;
use ndarray::{array, Array2, ArrayD, IxDyn};

use efa_testkit::tape::{planted_a as a0, planted_b as b0, Planted};

#[test]
fn tape_fused_nodes_are_audited_and_constants_listed_as_skipped() {
    let mut t = Tape::<f64>::new();
    let a = t.param("a", a0()).unwrap();
    let b = t.constant(b0());
    let w = t
        .param(
            "w",
            array![[0.3, -0.2], [0.1, 0.4], [-0.5, 0.6], [0.2, 0.2]].into_dyn(),
        )
        .unwrap();
    let ys = t
        .fused(Box::new(Planted { planted: true }), &[a, b])
        .unwrap();
    let lin = t.linear(ys[0], w, None).unwrap(); // [2, 2]
    let bw = t.param("bw", b0()).unwrap();
    let ys2 = t
        .fused(Box::new(Planted { planted: true }), &[a, bw])
        .unwrap();
    let s = t.sum_all(lin).unwrap();
    let s2 = t.sum_all(ys2[1]).unwrap();
    let _loss = t.add(s, s2).unwrap();
    let reports = t.audit_fused_nodes(3, &AuditOptions::default()).unwrap();
    let ops: Vec<&str> = reports.iter().map(|r| r.op.as_str()).collect();
    assert_eq!(ops, ["planted", "linear", "planted"]);
    // Node ids are the head nodes in the dump; inputs are the recorded input nodes.
    assert_eq!(reports[0].input_nodes, vec![a.index(), b.index()]);
    assert_eq!(reports[0].output_nodes, vec![ys[0].index(), ys[1].index()]);
    assert_eq!(reports[0].node, ys[0].index() - 1);
    assert!(t.dump().contains("fused:planted"));
    // First planted node: b is a constant there, so only input 0 is audited (and passes);
    // input 1 is listed as skipped, not as passing.
    let r0 = &reports[0].report;
    assert!(r0.passed(), "{r0}");
    assert_eq!(r0.params.len(), 1);
    assert_eq!(r0.skipped.len(), 1);
    assert_eq!(r0.skipped[0].name, "planted input 1");
    assert!(reports[0].to_string().contains("SKIPPED"));
    // linear passes for both inputs.
    assert!(reports[1].passed(), "{}", reports[1]);
    assert_eq!(reports[1].report.params.len(), 2);
    // Second planted node: b is a parameter, so the planted element is caught.
    let r2 = &reports[2];
    assert!(!r2.passed());
    assert_eq!(r2.report.failures.len(), 1, "{r2}");
    assert_eq!(r2.report.failures[0].param, "planted input 1");
    assert_eq!(r2.report.failures[0].location, Location::Element(vec![2]));
    assert!(r2.to_string().contains(&format!("fused node {}", r2.node)));
}

#[test]
fn every_library_fused_op_passes_on_a_recorded_tape() {
    // gather_sum → linear → attention → link → nll, plus bag_sum; Auto mode keeps large
    // inputs on seeded directions.
    let mut t = Tape::<f64>::new();
    let val = |shape: &[usize], s: f64| {
        let mut i = 0.0;
        ArrayD::from_shape_fn(IxDyn(shape), |_| {
            i += 1.0;
            (i * 0.61 + s).sin()
        })
    };
    let table = t.param("table", val(&[5, 4], 0.1)).unwrap();
    let ids = Array2::from_shape_vec((2, 3), vec![1, 4, NONE, 0, 2, 2]).unwrap();
    let x = t
        .gather_sum(
            &[table],
            vec![Part {
                ids: ids.clone(),
                col: 0,
            }],
            None,
            4,
            1,
        )
        .unwrap()[0]; // [2, 3, 4]
    let wq = t.param("wq", val(&[4, 4], 0.2)).unwrap();
    let bq = t.param("bq", val(&[4], 0.3)).unwrap();
    let q = t.linear(x, wq, Some(bq)).unwrap();
    let mask = Mask::causal().key_lengths([3, 2]);
    let o = t
        .attention_heads(Attention::new(q, x, x).mask(mask).scale(0.5), 2)
        .unwrap()
        .o; // [2, 3, 4]
    let last = t.gather_positions(o, &[2, 1]).unwrap(); // [2, 4]
    let wz = t.param("wz", val(&[4, 2], 0.4)).unwrap();
    let z = t.linear(last, wz, None).unwrap(); // [2, 2]
    let eta = t.natural(&Family::Gaussian, z).unwrap();
    let y = Array2::from_shape_vec((2, 1), vec![0.3, -1.0]).unwrap();
    let nll = t.nll(&Family::Gaussian, eta, &y, None).unwrap();
    let bag = t.bag_sum(table, ids, None).unwrap();
    let a = t.sum_all(nll).unwrap();
    let b = t.sum_all(bag).unwrap();
    let _ = t.add(a, b).unwrap();
    let opts = AuditOptions {
        mode: Mode::Auto {
            max_full: 16,
            n: 6,
            seed: 1,
        },
        ..AuditOptions::default()
    };
    let reports = t.audit_fused_nodes(11, &opts).unwrap();
    let ops: Vec<&str> = reports.iter().map(|r| r.op.as_str()).collect();
    assert_eq!(
        ops,
        [
            "gather_sum",
            "linear",
            "attention",
            "linear",
            "link",
            "gaussian",
            "bag_sum"
        ]
    );
    for r in &reports {
        assert!(r.passed(), "{r}");
        assert!(r.report.params.iter().all(|p| p.checked > 0), "{r}");
    }
    // The 24-element q input of attention went to seeded directions, the 4-element bias in full.
    let att = &reports[2].report;
    assert_eq!(att.summary("attention input 0").unwrap().checked, 6);
    assert_eq!(
        reports[1].report.summary("linear input 2").unwrap().checked,
        4
    );
}
