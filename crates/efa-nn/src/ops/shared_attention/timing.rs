//! A timing of the op at the temperature model's size against the tape's fused attention on
//! the materialised samples (ignored; run by hand).

use super::tests::{Case, NAMES};
use crate::testutil::rand_array;
use crate::TapeNn;
use efa_tape::{FusedOp, Tape, Var};
use ndarray::ArrayD;

/// Forward and backward at the temperature model's size (186 days of 44 cities, 2 heads of
/// 16, f32): the op on its own, and the tape's fused attention on the materialised samples
/// (forward, and backward of `Σ w∘o` including the product and sum):
/// `cargo test -p efa-nn shared_attention_timing -- --ignored --nocapture`.
#[test]
#[ignore]
fn shared_attention_timing() {
    let (g, n) = (186, 44);
    let case = Case {
        g,
        n,
        heads: 2,
        kd: 16,
        lengths: vec![n; g],
        group: (0..g * n).map(|s| s / n).collect(),
        target: (0..g * n).map(|s| s % n).collect(),
    };
    let f32s = |a: &ArrayD<f64>| a.mapv(|x| x as f32);
    let x: Vec<ArrayD<f32>> = case.inputs(1).iter().map(f32s).collect();
    let w = f32s(&rand_array(&[case.b(), n, case.hk()], 2, -1.0, 1.0));
    let median = |mut ts: Vec<f64>| {
        ts.sort_by(f64::total_cmp);
        ts[ts.len() / 2] * 1e3
    };
    let refs: Vec<&ArrayD<f32>> = x.iter().collect();
    let (mut fwd, mut bwd) = (vec![], vec![]);
    for _ in 0..7 {
        let mut op = case.op::<f32>();
        let t0 = std::time::Instant::now();
        let o = op.forward(&refs).unwrap();
        let t1 = std::time::Instant::now();
        let d = op
            .backward(&refs, &[&o[0]], &[Some(&w)], &[true; 6])
            .unwrap();
        let t2 = std::time::Instant::now();
        assert_eq!(d.len(), 6);
        fwd.push((t1 - t0).as_secs_f64());
        bwd.push((t2 - t1).as_secs_f64());
    }
    println!(
        "shared_context_attention op: forward {:.2} ms, backward {:.2} ms",
        median(fwd),
        median(bwd)
    );
    // The samples' own rows, materialised `[B, N, H·K]`.
    let full: Vec<ArrayD<f32>> = (0..3)
        .map(|k| {
            ArrayD::from_shape_fn(ndarray::IxDyn(&[case.b(), n, case.hk()]), |ix| {
                let (s, i, c) = (ix[0], ix[1], ix[2]);
                if i == case.target[s] {
                    x[k + 3][[s, c]]
                } else {
                    x[k][[case.group[s], i, c]]
                }
            })
        })
        .collect();
    for shared in [true, false] {
        let (mut fwd, mut bwd) = (vec![], vec![]);
        for _ in 0..5 {
            let mut t = Tape::<f32>::new();
            let src = if shared { &x } else { &full };
            let v: Vec<Var> = src
                .iter()
                .enumerate()
                .map(|(i, a)| t.param(NAMES[i], a.clone()).unwrap())
                .collect();
            let t0 = std::time::Instant::now();
            let y = if shared {
                t.shared_context_attention(case.args(&v)).unwrap()
            } else {
                let args = efa_attn::Attention::new(v[0], v[1], v[2]);
                t.attention_heads(args, case.heads).unwrap().o
            };
            let t1 = std::time::Instant::now();
            let c = t.constant(w.clone());
            let l = t.mul(y, c).unwrap();
            let l = t.sum_all(l).unwrap();
            let t2 = std::time::Instant::now();
            let _g = t.backward(l).unwrap();
            let t3 = std::time::Instant::now();
            fwd.push((t1 - t0).as_secs_f64());
            bwd.push((t3 - t2).as_secs_f64());
        }
        let name = if shared {
            "tape: shared_context_attention"
        } else {
            "tape: attention_heads, materialised"
        };
        println!(
            "{name:36} forward {:.2} ms, backward {:.2} ms",
            median(fwd),
            median(bwd)
        );
    }
}
