//! Tape ops that wrap the tape-free kernels of other crates through `efa_tape::FusedOp`.

pub mod attention;
pub mod gather;
pub mod linear;
pub mod link;
pub mod nll;

/// The f64 finite-difference audit of every parameter element of `build` (full mode, default
/// tolerances), asserted to pass with the report as the message.
#[cfg(test)]
fn audit_full<F>(params: &[(&str, ndarray::ArrayD<f64>)], build: F)
where
    F: Fn(&mut efa_tape::Tape<f64>, &[efa_tape::Var]) -> Result<efa_tape::Var, efa_tape::TapeError>,
{
    let opts = efa_check::CheckOptions {
        mode: efa_check::Mode::Full,
        ..efa_check::CheckOptions::default()
    };
    let report = efa_tape::audit::audit(params, build, &opts).unwrap();
    assert!(report.passed(), "{report}");
}
