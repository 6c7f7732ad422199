//! Test helpers: seeded arrays (from the test kit) and an audit assertion that prints the
//! report on failure. (The kit's own `tape::assert_audit` is typed with the tape crate as a
//! dependency, a different crate from this one under `cfg(test)`, hence this copy.)

use crate::audit::{audit, AuditOptions};
use crate::error::Result;
use crate::tape::{Tape, Var};
pub(crate) use efa_testkit::rand_array;
use ndarray::ArrayD;

/// Audits `build` with default tolerances (abs 1e-5, rel 1e-3, full Jacobian) and panics
/// with the report table if any element fails.
#[track_caller]
pub(crate) fn assert_audit<F>(params: &[(&str, ArrayD<f64>)], build: F)
where
    F: Fn(&mut Tape<f64>, &[Var]) -> Result<Var>,
{
    let report = audit(params, build, &AuditOptions::default()).expect("audit ran");
    assert!(report.passed(), "gradient audit failed:\n{report}");
}
