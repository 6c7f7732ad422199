//! Audit reports: every failing element by parameter name and index, per-parameter summaries
//! with every compared value (analytic and numeric, for verbose printing and JSON), the
//! tensors that were skipped and why, and a warning when the audited function is not finite
//! at the starting point. All fields are plain data (names, indices, `Vec<f64>`).

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

/// What entry `k` of [`ParamSummary::analytic`] and [`ParamSummary::numeric`] compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compared {
    /// Entry `k` is element `k` in row-major order: the full gradient (for a scalar
    /// function, its Jacobian) element by element.
    Elements,
    /// Entry `k` is `⟨g, d_k⟩` along the `k`-th seeded unit direction; the directions are
    /// `crate::unit_directions(seed, len, n)`.
    Directions {
        /// The seed the directions were drawn from.
        seed: u64,
    },
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

/// Summary of one parameter's comparisons, with every compared value.
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
    /// What each entry of `analytic` / `numeric` compares.
    pub compared: Compared,
    /// Every claimed value, one per comparison, in order.
    pub analytic: Vec<f64>,
    /// Every finite-difference value, one per comparison, in order.
    pub numeric: Vec<f64>,
}

impl ParamSummary {
    /// Location of comparison `k` (a row-major multi-index or a direction number).
    pub fn location(&self, k: usize) -> Location {
        match self.compared {
            Compared::Elements => Location::Element(crate::unravel(k, &self.shape)),
            Compared::Directions { .. } => Location::Direction(k),
        }
    }
}

/// A tensor the audit did not check, and why (never counted as passing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Name of the tensor.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Why it was not checked.
    pub reason: String,
}

/// Result of an audit: failures (every one, in order), per-parameter summaries, skipped
/// tensors, and the non-finite-start warning.
///
/// **Non-finite starting point.** When the audited function is not finite at θ₀,
/// `nonfinite_base` says so. This is a warning, not an error: the audit still runs and the
/// report keeps every comparison (so the affected elements can be seen), but a report with
/// the warning never [`passes`](Report::passed), since finite differences through a
/// non-finite value are meaningless.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Every failing comparison.
    pub failures: Vec<Failure>,
    /// One summary per audited parameter, in the order given.
    pub params: Vec<ParamSummary>,
    /// Tensors that were not audited, with the reason.
    pub skipped: Vec<Skipped>,
    /// Set when `f(θ₀)` is not finite: what was not finite, and where if known.
    pub nonfinite_base: Option<String>,
    /// Elements where `f` has a kink (its one-sided differences disagree, e.g. a ReLU input
    /// exactly at 0) and the analytic value was accepted as lying between them (a
    /// subgradient), as `parameter[index]`; see [`crate::audit_params`].
    pub kinks: Vec<String>,
}

impl Report {
    /// True iff no comparison failed and `f(θ₀)` was finite. Skipped tensors do not count
    /// as passing; they are listed in [`Report::skipped`] and printed.
    pub fn passed(&self) -> bool {
        self.nonfinite_base.is_none()
            && self.failures.is_empty()
            && self.params.iter().all(|p| p.pass)
    }

    /// The summary of parameter `name`, if audited.
    pub fn summary(&self, name: &str) -> Option<&ParamSummary> {
        self.params.iter().find(|p| p.name == name)
    }

    /// Appends the failures, summaries and skipped tensors of `other`; keeps the first
    /// non-finite warning and appends a later one.
    pub fn merge(&mut self, other: Report) {
        self.failures.extend(other.failures);
        self.params.extend(other.params);
        self.skipped.extend(other.skipped);
        self.kinks.extend(other.kinks);
        self.nonfinite_base = match (self.nonfinite_base.take(), other.nonfinite_base) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        };
    }

    /// A printable form listing every comparison (index, analytic, numeric, errors) after
    /// the summary table: the verbose mode.
    pub fn verbose(&self) -> Verbose<'_> {
        Verbose(self)
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
    pub(crate) fn new(name: &str, shape: &[usize], compared: Compared) -> Self {
        SummaryBuilder {
            summary: ParamSummary {
                name: name.to_string(),
                shape: shape.to_vec(),
                checked: 0,
                max_abs_err: 0.0,
                max_rel_err: 0.0,
                pass: true,
                compared,
                analytic: Vec::new(),
                numeric: Vec::new(),
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
        s.analytic.push(analytic);
        s.numeric.push(numeric);
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

fn write_warning(f: &mut fmt::Formatter<'_>, r: &Report) -> fmt::Result {
    if let Some(w) = &r.nonfinite_base {
        writeln!(f, "WARNING: not finite at the starting point: {w}")?;
        writeln!(
            f,
            "WARNING: finite differences through a non-finite value are meaningless; this audit does not pass"
        )?;
    }
    Ok(())
}

fn write_table(f: &mut fmt::Formatter<'_>, r: &Report) -> fmt::Result {
    writeln!(
        f,
        "{:<24} {:<16} {:>8} {:>12} {:>12}  status",
        "parameter", "shape", "checked", "max abs err", "max rel err"
    )?;
    for p in &r.params {
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
    for s in &r.skipped {
        writeln!(
            f,
            "{:<24} {:<16} {:>8} {:>12} {:>12}  SKIPPED: {}",
            s.name,
            format!("{:?}", s.shape),
            0,
            "-",
            "-",
            s.reason
        )?;
    }
    Ok(())
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_warning(f, self)?;
        write_table(f, self)?;
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
        write_warning(f, self)
    }
}

/// Verbose display of a [`Report`] (from [`Report::verbose`]): the summary, then every
/// comparison of every parameter with its analytic and numeric value.
pub struct Verbose<'a>(pub &'a Report);

impl fmt::Display for Verbose<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.0;
        write_warning(f, r)?;
        write_table(f, r)?;
        for p in &r.params {
            match p.compared {
                Compared::Elements => writeln!(f, "\n{} {:?}: every element", p.name, p.shape)?,
                Compared::Directions { seed } => writeln!(
                    f,
                    "\n{} {:?}: ⟨g, d_k⟩ along seeded unit directions (seed {seed})",
                    p.name, p.shape
                )?,
            }
            writeln!(
                f,
                "  {:<16} {:>22} {:>22} {:>12}",
                "index", "analytic", "numeric", "abs err"
            )?;
            for (k, (a, n)) in p.analytic.iter().zip(&p.numeric).enumerate() {
                writeln!(
                    f,
                    "  {:<16} {:>22.15e} {:>22.15e} {:>12.3e}",
                    p.location(k).to_string(),
                    a,
                    n,
                    (a - n).abs()
                )?;
            }
        }
        writeln!(f, "\n{}", if r.passed() { "passed" } else { "FAILED" })
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::{unravel, Tolerance};

    #[test]
    fn builder_records_failures_and_maxima() {
        let mut b = SummaryBuilder::new("w", &[2], Compared::Elements);
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
        assert_eq!(s.analytic, vec![1.0, 2.0]);
        assert_eq!(s.numeric, vec![1.0, 1.0]);
        let r = Report {
            failures: vec![fail],
            params: vec![s],
            ..Report::default()
        };
        assert!(!r.passed());
        let text = r.to_string();
        assert!(text.contains("FAIL") && text.contains("[1]"), "{text}");
    }

    #[test]
    fn nan_comparison_fails_and_poisons_maxima() {
        let mut b = SummaryBuilder::new("w", &[1], Compared::Directions { seed: 3 });
        assert!(b
            .record(&Tolerance::default(), Location::Direction(0), f64::NAN, 1.0)
            .is_some());
        let s = b.finish();
        assert!(s.max_abs_err.is_nan() && !s.pass);
    }

    #[test]
    fn warning_skipped_and_verbose_are_printed_and_block_passing() {
        let mut b = SummaryBuilder::new("w", &[2, 2], Compared::Elements);
        let tol = Tolerance::default();
        for k in 0..4 {
            assert!(b
                .record(
                    &tol,
                    Location::Element(unravel(k, &[2, 2])),
                    0.25 * k as f64,
                    0.25 * k as f64
                )
                .is_none());
        }
        let mut r = Report {
            params: vec![b.finish()],
            skipped: vec![Skipped {
                name: "ids".into(),
                shape: vec![3],
                reason: "constant".into(),
            }],
            ..Report::default()
        };
        assert!(r.passed(), "{r}");
        let text = r.to_string();
        assert!(text.contains("SKIPPED: constant"), "{text}");
        // Every comparison, with its multi-index and both values, in verbose mode.
        let v = r.verbose().to_string();
        assert!(
            v.contains("[1, 1]") && v.contains("7.500000000000000e-1"),
            "{v}"
        );
        assert_eq!(r.params[0].location(2), Location::Element(vec![1, 0]));
        r.nonfinite_base = Some("f(θ₀) = NaN".into());
        assert!(!r.passed());
        let text = r.to_string();
        assert!(
            text.starts_with("WARNING: not finite at the starting point: f(θ₀) = NaN"),
            "{text}"
        );
        let mut other = Report {
            nonfinite_base: Some("second".into()),
            ..Report::default()
        };
        other.merge(r);
        assert_eq!(other.nonfinite_base.as_deref(), Some("second; f(θ₀) = NaN"));
        assert_eq!(other.skipped.len(), 1);
    }
}
