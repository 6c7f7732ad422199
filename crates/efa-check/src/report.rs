//! Audit reports: every failing element by parameter name and index, plus per-parameter
//! summaries, printable as a table.

use std::fmt;

/// Where a compared value lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// One element, by row-major multi-index into the parameter's shape.
    Element(Vec<usize>),
    /// The `k`-th seeded random unit direction: compares `⟨g, d_k⟩` with the numeric
    /// directional derivative.
    Direction(usize),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Element(ix) => write!(f, "{ix:?}"),
            Location::Direction(k) => write!(f, "dir#{k}"),
        }
    }
}

/// One comparison that failed the tolerance.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    /// Parameter name.
    pub param: String,
    /// Element index or direction number.
    pub location: Location,
    /// Claimed (analytic) value.
    pub analytic: f64,
    /// Finite-difference value.
    pub numeric: f64,
    /// `|analytic − numeric|`.
    pub abs_err: f64,
    /// `|analytic − numeric| / max(|analytic|, |numeric|)` (0 if both are 0).
    pub rel_err: f64,
}

/// Summary of one parameter's comparisons.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSummary {
    /// Parameter name.
    pub name: String,
    /// Parameter shape.
    pub shape: Vec<usize>,
    /// Number of comparisons made (elements or directions).
    pub checked: usize,
    /// Largest `|analytic − numeric|` seen (NaN if any comparison was NaN).
    pub max_abs_err: f64,
    /// Largest relative error seen (NaN if any comparison was NaN).
    pub max_rel_err: f64,
    /// True iff every comparison passed the tolerance.
    pub pass: bool,
}

/// Result of an audit: failures (every one, in order) and per-parameter summaries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Every failing comparison.
    pub failures: Vec<Failure>,
    /// One summary per audited parameter, in the order given.
    pub params: Vec<ParamSummary>,
}

impl Report {
    /// True iff no comparison failed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty() && self.params.iter().all(|p| p.pass)
    }

    /// The summary of parameter `name`, if audited.
    pub fn summary(&self, name: &str) -> Option<&ParamSummary> {
        self.params.iter().find(|p| p.name == name)
    }

    /// Appends the failures and summaries of `other`.
    pub fn merge(&mut self, other: Report) {
        self.failures.extend(other.failures);
        self.params.extend(other.params);
    }
}

fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Accumulates comparisons for one parameter.
pub(crate) struct SummaryBuilder {
    summary: ParamSummary,
}

impl SummaryBuilder {
    pub(crate) fn new(name: &str, shape: &[usize]) -> Self {
        SummaryBuilder {
            summary: ParamSummary {
                name: name.to_string(),
                shape: shape.to_vec(),
                checked: 0,
                max_abs_err: 0.0,
                max_rel_err: 0.0,
                pass: true,
            },
        }
    }

    /// Records one comparison; returns the failure if it did not pass.
    pub(crate) fn record(
        &mut self,
        tol: &crate::Tolerance,
        location: Location,
        analytic: f64,
        numeric: f64,
    ) -> Option<Failure> {
        let abs_err = (analytic - numeric).abs();
        let rel_err = crate::rel_err(analytic, numeric);
        let s = &mut self.summary;
        s.checked += 1;
        s.max_abs_err = nan_max(s.max_abs_err, abs_err);
        s.max_rel_err = nan_max(s.max_rel_err, rel_err);
        if tol.passes(analytic, numeric) {
            None
        } else {
            s.pass = false;
            Some(Failure {
                param: s.name.clone(),
                location,
                analytic,
                numeric,
                abs_err,
                rel_err,
            })
        }
    }

    pub(crate) fn finish(self) -> ParamSummary {
        self.summary
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<24} {:<16} {:>8} {:>12} {:>12}  status",
            "parameter", "shape", "checked", "max abs err", "max rel err"
        )?;
        for p in &self.params {
            writeln!(
                f,
                "{:<24} {:<16} {:>8} {:>12.3e} {:>12.3e}  {}",
                p.name,
                format!("{:?}", p.shape),
                p.checked,
                p.max_abs_err,
                p.max_rel_err,
                if p.pass { "ok" } else { "FAIL" }
            )?;
        }
        if self.failures.is_empty() {
            writeln!(f, "all comparisons passed")?;
        } else {
            writeln!(f, "{} failing comparison(s):", self.failures.len())?;
            writeln!(
                f,
                "{:<24} {:<16} {:>14} {:>14} {:>12} {:>12}",
                "parameter", "index", "analytic", "numeric", "abs err", "rel err"
            )?;
            for x in &self.failures {
                writeln!(
                    f,
                    "{:<24} {:<16} {:>14.6e} {:>14.6e} {:>12.3e} {:>12.3e}",
                    x.param,
                    x.location.to_string(),
                    x.analytic,
                    x.numeric,
                    x.abs_err,
                    x.rel_err
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tolerance;

    #[test]
    fn builder_records_failures_and_maxima() {
        let mut b = SummaryBuilder::new("w", &[2]);
        let tol = Tolerance::default();
        assert!(b
            .record(&tol, Location::Element(vec![0]), 1.0, 1.0)
            .is_none());
        let fail = b
            .record(&tol, Location::Element(vec![1]), 2.0, 1.0)
            .unwrap();
        assert_eq!(fail.abs_err, 1.0);
        assert_eq!(fail.rel_err, 0.5);
        let s = b.finish();
        assert!(!s.pass);
        assert_eq!(s.checked, 2);
        assert_eq!(s.max_abs_err, 1.0);
        let r = Report {
            failures: vec![fail],
            params: vec![s],
        };
        assert!(!r.passed());
        let text = r.to_string();
        assert!(text.contains("FAIL") && text.contains("[1]"), "{text}");
    }

    #[test]
    fn nan_comparison_fails_and_poisons_maxima() {
        let mut b = SummaryBuilder::new("w", &[1]);
        assert!(b
            .record(&Tolerance::default(), Location::Direction(0), f64::NAN, 1.0)
            .is_some());
        let s = b.finish();
        assert!(s.max_abs_err.is_nan() && !s.pass);
    }
}
