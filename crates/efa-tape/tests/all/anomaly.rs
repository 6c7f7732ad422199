//! Anomaly mode: the first non-finite value, forward or backward, is an error naming the op,
//! node id and parameters; without the mode nothing changes.

use efa_tape::Tape;
use ndarray::array;

#[test]
fn forward_anomaly_names_op_node_and_params() {
    let mut t = Tape::<f64>::new();
    t.set_detect_anomaly(true);
    let w = t.param("w", array![1.0, -2.0].into_dyn()).unwrap(); // node 0
    let b = t.param("b", array![0.5, 0.5].into_dyn()).unwrap(); // node 1
    let c = t.param("unused", array![1.0].into_dyn()).unwrap(); // node 2
    let _ = c;
    let l = t.log(w).unwrap(); // node 3: log(-2) = NaN
    let s = t.add(l, b).unwrap();
    let out = t.sum_all(s).unwrap();
    let e = t.anomaly().expect("recorded").clone();
    assert_eq!(e.op, "log");
    assert_eq!(
        e.message,
        "anomaly in forward: node 3 (shape [2], inputs [0]) produced NaN at flat index 1; parameters involved: w"
    );
    // Backward refuses with the same error instead of producing NaN gradients.
    assert_eq!(t.backward(out).err(), Some(e));
}

#[test]
fn backward_anomaly_names_op_and_param() {
    let mut t = Tape::<f64>::new();
    t.set_detect_anomaly(true);
    let w = t.param("w", array![3.0, 0.0].into_dyn()).unwrap(); // node 0
    let r = t.sqrt(w).unwrap(); // node 1: finite forward, d/dw = 1/(2√0) = ∞
    let out = t.sum_all(r).unwrap(); // node 2
    assert!(t.anomaly().is_none());
    let e = t.backward(out).err().expect("anomaly");
    assert_eq!(e.op, "sqrt");
    assert_eq!(
        e.message,
        "anomaly in backward: node 1 passed inf at flat index 1 to the gradient of its input node 0 (shape [2]); parameters involved: w"
    );
}

#[test]
fn off_by_default_and_finite_graphs_are_unchanged() {
    let build = |on: bool| {
        let mut t = Tape::<f64>::new();
        t.set_detect_anomaly(on);
        let w = t.param("w", array![3.0, 0.0].into_dyn()).unwrap();
        let r = t.sqrt(w).unwrap();
        let out = t.sum_all(r).unwrap();
        t.backward(out).map(|g| g.param("w").unwrap().clone())
    };
    // Without the mode the infinite gradient is returned as before.
    let g = build(false).unwrap();
    assert_eq!(g[1], f64::INFINITY);
    assert!(build(true).is_err());
    // A finite graph gives identical gradients either way.
    let grads = |on: bool| {
        let mut t = Tape::<f64>::new();
        t.set_detect_anomaly(on);
        assert_eq!(t.detect_anomaly(), on);
        let w = t
            .param("w", array![[0.3, -1.2], [2.0, 0.7]].into_dyn())
            .unwrap();
        let e = t.exp(w).unwrap();
        let out = t.sum_all(e).unwrap();
        t.backward(out).unwrap().param("w").unwrap().clone()
    };
    assert_eq!(grads(true), grads(false));
}
