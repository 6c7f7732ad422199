//! Tape helpers: an audit assertion and a fused op with a plantable bug, for the tests of the
//! op-level and graph-level gradient audits.

use efa_tape::{audit, AuditOptions, FusedOp, Result, Tape, Var};
use ndarray::{array, ArrayD, Axis};

/// Audits `build` with default tolerances (abs 1e-5, rel 1e-3, full Jacobian) and panics
/// with the report table if any element fails.
#[track_caller]
pub fn assert_audit<F>(params: &[(&str, ArrayD<f64>)], build: F)
where
    F: Fn(&mut Tape<f64>, &[Var]) -> Result<Var>,
{
    let report = audit(params, build, &AuditOptions::default()).expect("audit ran");
    assert!(report.passed(), "gradient audit failed:\n{report}");
}

/// A fused op with inputs `a` `[R, C]` and `b` `[C]` and outputs `y0 = a ∘ b` (b broadcast
/// over rows, `[R, C]`) and `y1[j] = Σ_r a[r, j]²` (`[C]`). With `planted`, its backward adds
/// 0.25 to `db[2]`: an audit must find exactly that op, input and element.
#[derive(Clone, Debug)]
pub struct Planted {
    /// Whether the backward carries the planted bug.
    pub planted: bool,
}

impl FusedOp<f64> for Planted {
    fn name(&self) -> &str {
        "planted"
    }
    fn forward(&mut self, x: &[&ArrayD<f64>]) -> Result<Vec<ArrayD<f64>>> {
        let y0 = x[0] * x[1];
        let y1 = x[0].mapv(|v| v * v).sum_axis(Axis(0));
        Ok(vec![y0, y1])
    }
    fn backward(
        &self,
        x: &[&ArrayD<f64>],
        _y: &[&ArrayD<f64>],
        dy: &[Option<&ArrayD<f64>>],
        need: &[bool],
    ) -> Result<Vec<Option<ArrayD<f64>>>> {
        let (a, b) = (x[0], x[1]);
        let z0 = ArrayD::zeros(a.raw_dim());
        let z1 = ArrayD::zeros(b.raw_dim());
        let (c0, c1) = (dy[0].unwrap_or(&z0), dy[1].unwrap_or(&z1));
        // forward computed a∘b and Σ_r a², so da = c0∘b + 2a∘c1 and db = Σ_r c0∘a
        let da = c0 * b + &(a * c1 * 2.0);
        let mut db = (c0 * a).sum_axis(Axis(0));
        if self.planted {
            db[2] += 0.25;
        }
        Ok(vec![need[0].then_some(da), need[1].then_some(db)])
    }
}

/// The planted op's input `a` `[2, 4]`.
pub fn planted_a() -> ArrayD<f64> {
    array![[0.5, -1.0, 2.0, 0.3], [1.5, 0.25, -0.75, 1.0]].into_dyn()
}

/// The planted op's input `b` `[4]`.
pub fn planted_b() -> ArrayD<f64> {
    array![0.2, -1.3, 0.8, 2.0].into_dyn()
}
