//! Gradient audit toolkit for efa, on plain closures (no tape dependency).
//!
//! * [`Tolerance`]: an element passes if `|a − n| ≤ abs + rel·|n|` (analytic `a`, numeric `n`).
//! * [`fd`]: the project's one central-difference implementation,
//!   `(f(θ+h) − f(θ−h)) / 2h` with step `h = rel_step·max(1, |θ|)`, optionally
//!   Richardson-extrapolated `(4·D(h/2) − D(h)) / 3`; scalar ([`central_difference`],
//!   [`central_gradient`], [`directional_difference`]) and vector-valued
//!   ([`central_difference_vec`], [`numeric_jacobian`]).
//! * [`audit`]: audit a function of several named tensors ([`ParamSpec`]) against claimed
//!   gradients, element by element ([`Mode::Full`]) or along seeded random unit directions
//!   ([`Mode::Directions`]); the result is a [`Report`] that keeps every compared value
//!   (print them with [`Report::verbose`]) and warns when `f(θ₀)` is not finite
//!   ([`Report::nonfinite_base`]: a warning, not an error, but the report does not pass).
//! * [`jacobian`]: full analytic-versus-numeric Jacobian blocks ([`Jacobian`]).
//! * [`determinism`]: bitwise run-to-run comparison and linearity of a vector-Jacobian product
//!   in its cotangent.
//!
//! ```
//! use efa_check::{check_gradient, CheckOptions, Location};
//! // f(x) = x₀²·x₁, ∇f = (2·x₀·x₁, x₀²) = (12, 4) at (2, 3); claim 13 for the first entry.
//! let f = |x: &[f64]| x[0] * x[0] * x[1];
//! let report = check_gradient(f, &[2.0, 3.0], &[13.0, 4.0], &CheckOptions::default()).unwrap();
//! assert!(!report.passed());
//! assert_eq!(report.failures[0].location, Location::Element(vec![0]));
//! assert!((report.failures[0].numeric - 12.0).abs() < 1e-6);
//! // Every compared value is kept (verbose mode).
//! assert_eq!(report.params[0].analytic, vec![13.0, 4.0]);
//! ```

#![warn(missing_docs)]

pub mod audit;
pub mod determinism;
pub mod fd;
pub mod jacobian;
pub mod precision;
pub mod report;

pub use audit::{
    audit_params, check_gradient, nonfinite_message, unit_directions, CheckError, CheckOptions,
    Mode, ParamSpec,
};
pub use determinism::{
    check_cotangent_linearity, check_determinism, check_determinism_bits, DeterminismReport,
};
pub use fd::{
    central_difference, central_difference_vec, central_gradient, directional_difference, FdOptions,
};
pub use jacobian::{numeric_jacobian, Jacobian};
pub use report::{Compared, Failure, Location, ParamSummary, Report, Skipped, Verbose};

/// The audit entry points, options and report types in one import:
/// `use efa_check::prelude::*;`.
pub mod prelude {
    pub use crate::audit::{audit_params, check_gradient, CheckOptions, Mode, ParamSpec};
    pub use crate::fd::{central_difference, central_gradient, FdOptions};
    pub use crate::report::{Compared, Failure, Location, ParamSummary, Report};
    pub use crate::Tolerance;
}

/// Per-element acceptance rule: an analytic value `a` passes against a numeric value `n` iff
/// `|a − n| ≤ abs + rel·|n|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Absolute part of the bound.
    pub abs: f64,
    /// Relative part of the bound (times `|numeric|`).
    pub rel: f64,
}

impl Default for Tolerance {
    /// `abs = 1e-5`, `rel = 1e-3` (docs/design.md §7).
    fn default() -> Self {
        Tolerance {
            abs: 1e-5,
            rel: 1e-3,
        }
    }
}

impl Tolerance {
    /// Builds a tolerance `|a − n| ≤ abs + rel·|n|`.
    pub fn new(abs: f64, rel: f64) -> Self {
        Tolerance { abs, rel }
    }

    /// True iff `|analytic − numeric| ≤ abs + rel·|numeric|`; a NaN on either side fails.
    pub fn passes(&self, analytic: f64, numeric: f64) -> bool {
        let err = (analytic - numeric).abs();
        err <= self.abs + self.rel * numeric.abs()
    }
}

/// Relative error `|a − n| / max(|a|, |n|)`, defined as 0 when both are 0.
pub fn rel_err(analytic: f64, numeric: f64) -> f64 {
    let err = (analytic - numeric).abs();
    let scale = analytic.abs().max(numeric.abs());
    if scale == 0.0 {
        0.0
    } else {
        err / scale
    }
}

/// A seeded, platform-independent stream of values uniform in `[0, 1)` (xorshift64 on the
/// seed times the golden-ratio constant, 53 bits per value), for test inputs that must be the
/// same on every machine without drawing from the OS.
pub fn unit_values(seed: u64) -> impl Iterator<Item = f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    std::iter::repeat_with(move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    })
}

/// Row-major multi-index of flat position `flat` in a tensor of shape `shape`.
pub fn unravel(flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    let mut rest = flat;
    for (d, &n) in shape.iter().enumerate().rev() {
        if n > 0 {
            idx[d] = rest % n;
            rest /= n;
        }
    }
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_values_are_seeded_uniform_draws_in_the_unit_interval() {
        let a: Vec<f64> = unit_values(7).take(20_000).collect();
        assert_eq!(a, unit_values(7).take(20_000).collect::<Vec<_>>());
        assert_ne!(a[..8], unit_values(8).take(8).collect::<Vec<_>>()[..]);
        assert!(a.iter().all(|&u| (0.0..1.0).contains(&u)));
        // Mean 1/2 and variance 1/12 of U[0, 1), within 5 standard errors.
        let n = a.len() as f64;
        let mean = a.iter().sum::<f64>() / n;
        let var = a.iter().map(|u| (u - mean).powi(2)).sum::<f64>() / n;
        assert!(
            (mean - 0.5).abs() < 5.0 * (1.0 / 12.0 / n).sqrt(),
            "mean {mean}"
        );
        assert!((var - 1.0 / 12.0).abs() < 0.004, "variance {var}");
        // Each decile holds about a tenth of the draws.
        for d in 0..10 {
            let lo = d as f64 / 10.0;
            let k = a.iter().filter(|&&u| u >= lo && u < lo + 0.1).count() as f64;
            assert!((k / n - 0.1).abs() < 0.01, "decile {d}: {k}");
        }
    }

    #[test]
    fn tolerance_bound_is_abs_plus_rel_times_numeric() {
        let t = Tolerance::new(1e-5, 1e-3);
        // bound at n = 10 is 1e-5 + 1e-2 = 0.01001
        assert!(t.passes(10.01, 10.0));
        assert!(!t.passes(10.0101, 10.0));
        assert!(!t.passes(f64::NAN, 1.0));
        assert!(!t.passes(1.0, f64::NAN));
        assert_eq!(Tolerance::default(), Tolerance::new(1e-5, 1e-3));
    }

    #[test]
    fn unravel_row_major() {
        assert_eq!(unravel(5, &[2, 3]), vec![1, 2]);
        assert_eq!(unravel(7, &[2, 2, 2]), vec![1, 1, 1]);
        assert_eq!(unravel(0, &[]), Vec::<usize>::new());
        assert_eq!(rel_err(0.0, 0.0), 0.0);
        assert_eq!(rel_err(2.0, 1.0), 0.5);
    }
}
