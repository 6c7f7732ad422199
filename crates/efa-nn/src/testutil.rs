//! Test helpers: seeded arrays and an audit assertion that prints the report on failure.

use efa_tape::{audit, AuditOptions, Result, Tape, Var};
use ndarray::{ArrayD, IxDyn};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Array of `shape` with entries uniform in `[lo, hi]` from `seed`.
pub(crate) fn rand_array(shape: &[usize], seed: u64, lo: f64, hi: f64) -> ArrayD<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    ArrayD::from_shape_simple_fn(IxDyn(shape), || rng.random_range(lo..=hi))
}

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
