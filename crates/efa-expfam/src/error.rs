//! Errors of the exponential-family routines: every message names the family, the offending
//! value and its row (and component where the observation or parameter is a vector). Values are
//! printed with [`Num`], so 1e-300 reads `1e-300`, not a run of zeros.

use std::fmt::{self, Write};

/// Display of a float for messages: the shortest decimal that round-trips, in fixed notation
/// for 10⁻⁴ ≤ |x| < 10¹⁵ (and 0), in scientific notation (`{:e}`) otherwise, so neither tiny
/// nor huge values print as long runs of zeros; `inf`, `-inf` and `NaN` as such. A precision
/// (`{:.3}`) sets the digits after the point in either notation; width and alignment pad the
/// whole number.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Num(pub f64);

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = self.0;
        let fixed = x == 0.0 || !x.is_finite() || (1e-4..1e15).contains(&x.abs());
        let s = match (fixed, f.precision()) {
            (true, None) => format!("{x}"),
            (true, Some(p)) => format!("{x:.p$}"),
            (false, None) => format!("{x:e}"),
            (false, Some(p)) => format!("{x:.p$e}"),
        };
        let pad = f.width().unwrap_or(0).saturating_sub(s.chars().count());
        let (before, after) = match f.align() {
            Some(fmt::Alignment::Left) => (0, pad),
            Some(fmt::Alignment::Center) => (pad / 2, pad - pad / 2),
            // Numbers align right by default.
            _ => (pad, 0),
        };
        let fill = f.fill();
        for _ in 0..before {
            f.write_char(fill)?;
        }
        f.write_str(&s)?;
        for _ in 0..after {
            f.write_char(fill)?;
        }
        Ok(())
    }
}

/// An error from an exponential-family routine.
#[derive(Debug, Clone, PartialEq)]
pub enum ExpfamError {
    /// An observation y outside the family's support (negative or non-integer count, y outside
    /// (0, 1), category out of range, NaN, …).
    Support {
        /// Family name as in the reference file (e.g. `"poisson"`).
        family: &'static str,
        /// Row (observation index) in the batch; `None` for one-off calls ([`crate::Eval`]).
        row: Option<usize>,
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
        /// Row in the batch; `None` for one-off calls ([`crate::Eval`]).
        row: Option<usize>,
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
                "{family}: observation y[{component}] = {}{} is outside the support ({expected})",
                Num(*value),
                AtRow(*row)
            ),
            ExpfamError::Domain {
                family,
                row,
                component,
                value,
                expected,
            } => write!(
                f,
                "{family}: natural parameter eta[{component}] = {}{} is outside the domain \
                 ({expected})",
                Num(*value),
                AtRow(*row)
            ),
            ExpfamError::Param {
                family,
                name,
                value,
                expected,
            } => {
                write!(
                    f,
                    "{family}: parameter {name} = {} is invalid ({expected})",
                    Num(*value)
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

impl ExpfamError {
    /// The same error without a row (for one-off calls, where there is no batch).
    pub fn without_row(self) -> Self {
        match self {
            ExpfamError::Support {
                family,
                component,
                value,
                expected,
                ..
            } => ExpfamError::Support {
                family,
                row: None,
                component,
                value,
                expected,
            },
            ExpfamError::Domain {
                family,
                component,
                value,
                expected,
                ..
            } => ExpfamError::Domain {
                family,
                row: None,
                component,
                value,
                expected,
            },
            other => other,
        }
    }
}

/// `" at row {r}"`, or nothing for a one-off call.
struct AtRow(Option<usize>);

impl fmt::Display for AtRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(r) => write!(f, " at row {r}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn num_picks_fixed_or_scientific_by_magnitude() {
        assert_eq!(Num(1e-300).to_string(), "1e-300");
        assert_eq!(Num(-2.5e-42).to_string(), "-2.5e-42");
        assert_eq!(Num(1e300).to_string(), "1e300");
        assert_eq!(Num(0.0).to_string(), "0");
        assert_eq!(Num(0.25).to_string(), "0.25");
        assert_eq!(Num(-1234.5).to_string(), "-1234.5");
        assert_eq!(Num(1e-4).to_string(), "0.0001");
        assert_eq!(Num(9.9e-5).to_string(), "9.9e-5");
        assert_eq!(Num(f64::INFINITY).to_string(), "inf");
        assert_eq!(Num(f64::NAN).to_string(), "NaN");
        assert_eq!(format!("{:.2}", Num(2.0634)), "2.06");
        assert_eq!(format!("{:.2}", Num(4.5e15)), "4.50e15");
        assert_eq!(format!("{:>8.1}", Num(3.25)), "     3.2");
        assert_eq!(format!("{:<8}", Num(1e-9)), "1e-9    ");
    }

    #[test]
    fn messages_print_tiny_values_in_scientific_notation() {
        let e = ExpfamError::Domain {
            family: "gaussian",
            row: Some(3),
            component: 1,
            value: 1e-300,
            expected: "eta2 < 0",
        };
        let m = e.to_string();
        assert!(m.contains("eta[1] = 1e-300 at row 3"), "{m}");
        let m = e.without_row().to_string();
        assert!(
            m.contains("eta[1] = 1e-300 is outside") && !m.contains("row"),
            "{m}"
        );
        let p = ExpfamError::Param {
            family: "gaussian_known_var",
            name: "s2".into(),
            value: -1e-200,
            expected: "finite s2 > 0",
        };
        assert!(p.to_string().contains("s2 = -1e-200 is invalid"), "{p}");
    }
}
