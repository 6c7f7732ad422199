//! Errors of the exponential-family routines: every message names the family, the offending
//! value and its row (and component where the observation or parameter is a vector).

use std::fmt;

/// An error from an exponential-family routine.
#[derive(Debug, Clone, PartialEq)]
pub enum ExpfamError {
    /// An observation y outside the family's support (negative or non-integer count, y outside
    /// (0, 1), category out of range, NaN, …).
    Support {
        /// Family name as in the reference file (e.g. `"poisson"`).
        family: &'static str,
        /// Row (observation index) in the batch.
        row: usize,
        /// Component of a vector observation (0 for scalar ones).
        component: usize,
        /// The offending value.
        value: f64,
        /// What the support is.
        expected: &'static str,
    },
    /// A natural parameter η outside the family's domain (e.g. η₂ ≥ 0 for the Gaussian, NaN).
    Domain {
        /// Family name.
        family: &'static str,
        /// Row in the batch.
        row: usize,
        /// Component of η.
        component: usize,
        /// The offending value.
        value: f64,
        /// What the domain is.
        expected: &'static str,
    },
    /// A fixed parameter (s2, n, r, k, a cut-point, a mean value) is invalid.
    Param {
        /// Family name.
        family: &'static str,
        /// Parameter name, e.g. `"s2"` or `"cutpoints[2]"`.
        name: String,
        /// The offending value.
        value: f64,
        /// What is required.
        expected: &'static str,
    },
    /// An array or slice has the wrong length.
    Shape {
        /// Family name.
        family: &'static str,
        /// Which argument.
        what: &'static str,
        /// Required length.
        expected: usize,
        /// Given length.
        got: usize,
    },
    /// The operation does not exist for this family (e.g. A(η) of the ordinal model).
    Unsupported {
        /// Family name.
        family: &'static str,
        /// The operation.
        what: &'static str,
    },
}

impl fmt::Display for ExpfamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpfamError::Support {
                family,
                row,
                component,
                value,
                expected,
            } => write!(
                f,
                "{family}: observation y[{component}] = {value} at row {row} is outside the \
                 support ({expected})"
            ),
            ExpfamError::Domain {
                family,
                row,
                component,
                value,
                expected,
            } => write!(
                f,
                "{family}: natural parameter eta[{component}] = {value} at row {row} is outside \
                 the domain ({expected})"
            ),
            ExpfamError::Param {
                family,
                name,
                value,
                expected,
            } => {
                write!(
                    f,
                    "{family}: parameter {name} = {value} is invalid ({expected})"
                )
            }
            ExpfamError::Shape {
                family,
                what,
                expected,
                got,
            } => {
                write!(f, "{family}: {what} has length {got}, expected {expected}")
            }
            ExpfamError::Unsupported { family, what } => {
                write!(f, "{family}: {what} is not defined for this family")
            }
        }
    }
}

impl std::error::Error for ExpfamError {}
