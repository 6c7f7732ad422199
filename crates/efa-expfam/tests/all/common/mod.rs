//! Shared test helpers: the reference cases (read by the crate's own reader,
//! `refcheck::format`) and a central-difference helper.
#![allow(dead_code)]

use efa_expfam::refcheck::{format, RefCase};

/// Path of the reference file (`EFA_REFERENCE`, or beside the repository).
pub fn reference_path() -> std::path::PathBuf {
    efa_testkit::expfam_reference()
}

/// Loads every case of the reference file (each one validated).
pub fn load_cases() -> Vec<RefCase> {
    format::read_file(&reference_path()).unwrap_or_else(|e| panic!("{e}"))
}

/// Central differences `(f(x + h eᵢ) − f(x − h eᵢ)) / 2h`, `h = 1e-6·max(1, |xᵢ|)`, for every
/// coordinate: the project's one implementation, `efa_check::central_gradient`.
pub fn central_diff(f: &dyn Fn(&[f64]) -> f64, x: &[f64]) -> Vec<f64> {
    efa_check::central_gradient(&mut |v| f(v), x, &efa_check::FdOptions::default())
}
