//! A gradient audit that catches a planted bug: a fused op `y = a ∘ b²` whose backward is
//! wrong in one element of one input. `audit_fused` compares the op's backward with central
//! differences of its own forward and names the op, the input index and the element; the
//! audit of every fused node of a recorded tape finds it inside a larger computation.
//!
//! Run: `cargo run --example planted_bug_audit`.

use efa::check::{CheckOptions, Location, Mode};
use efa::tape::audit::audit_fused;
use efa::tape::prelude::*;
use ndarray::{array, ArrayD};

/// `y = a ∘ b²` elementwise; its backward is `da = dy ∘ b²`, `db = 2·dy ∘ a ∘ b`, except that
/// `planted` adds 0.5 to element 2 of `db`.
#[derive(Clone)]
struct MulSquare {
    planted: bool,
}

impl FusedOp<f64> for MulSquare {
    fn name(&self) -> &str {
        "mul_square"
    }

    fn forward(&mut self, x: &[&ArrayD<f64>]) -> Result<Vec<ArrayD<f64>>, TapeError> {
        Ok(vec![x[0] * &x[1].mapv(|b| b * b)])
    }

    fn backward(
        &self,
        x: &[&ArrayD<f64>],
        _y: &[&ArrayD<f64>],
        dy: &[Option<&ArrayD<f64>>],
        _need: &[bool],
    ) -> Result<Vec<Option<ArrayD<f64>>>, TapeError> {
        let dy = dy[0]
            .cloned()
            .unwrap_or_else(|| ArrayD::zeros(x[0].raw_dim()));
        // forward computed a ∘ b², so da = dy ∘ b² and db = 2·dy ∘ a ∘ b
        let da = &dy * &x[1].mapv(|b| b * b);
        let mut db = &dy * x[0] * x[1] * 2.0;
        if self.planted {
            db[[2]] += 0.5;
        }
        Ok(vec![Some(da), Some(db)])
    }
}

fn main() {
    let a = array![0.5, -1.0, 2.0, 0.25].into_dyn();
    let b = array![1.5, 0.3, -0.7, 2.0].into_dyn();
    let opts = CheckOptions {
        mode: Mode::Full,
        ..CheckOptions::default()
    };
    // The correct op passes; the planted one fails exactly at input 1, element [2].
    let ok = audit_fused(
        &MulSquare { planted: false },
        &[a.clone(), b.clone()],
        7,
        &opts,
    )
    .unwrap();
    assert!(ok.passed(), "{ok}");
    let bad = audit_fused(
        &MulSquare { planted: true },
        &[a.clone(), b.clone()],
        7,
        &opts,
    )
    .unwrap();
    println!("{bad}");
    assert_eq!(bad.failures.len(), 1);
    let f = &bad.failures[0];
    assert_eq!(f.param, "mul_square input 1");
    assert_eq!(f.location, Location::Element(vec![2]));
    assert!((f.analytic - f.numeric).abs() > 0.1);

    // Inside a larger computation: record it on a tape and audit every fused node there.
    let mut t = Tape::<f64>::new();
    let (va, vb) = (t.param("a", a).unwrap(), t.param("b", b).unwrap());
    let y = t
        .fused(Box::new(MulSquare { planted: true }), &[va, vb])
        .unwrap()[0];
    let z = t.tanh(y).unwrap();
    let _ = t.sum_all(z).unwrap();
    let nodes = t.audit_fused_nodes(3, &opts).unwrap();
    assert_eq!(nodes.len(), 1);
    assert!(!nodes[0].passed());
    println!(
        "fused node {} ({}) fails at {} {}",
        nodes[0].node,
        nodes[0].op,
        nodes[0].report.failures[0].param,
        nodes[0].report.failures[0].location
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn example_runs() {
        super::main();
    }
}
