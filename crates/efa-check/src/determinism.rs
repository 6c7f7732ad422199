//! Run-to-run bitwise determinism and linearity of vector-Jacobian products.

use crate::report::{Compared, Location, Report, SummaryBuilder};
use crate::{CheckError, Tolerance};
use std::fmt;

/// Outcome of [`check_determinism`]: every element whose bits differ between two runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeterminismReport {
    /// Lengths of the two runs' outputs.
    pub lens: (usize, usize),
    /// `(index, bits of run 1, bits of run 2)` for every differing element.
    pub mismatches: Vec<(usize, u64, u64)>,
}

impl DeterminismReport {
    /// True iff both runs had the same length and identical bits everywhere.
    pub fn passed(&self) -> bool {
        self.lens.0 == self.lens.1 && self.mismatches.is_empty()
    }
}

impl fmt::Display for DeterminismReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lens.0 != self.lens.1 {
            writeln!(f, "run lengths differ: {} vs {}", self.lens.0, self.lens.1)?;
        }
        if self.mismatches.is_empty() {
            return writeln!(
                f,
                "bitwise identical ({} elements)",
                self.lens.0.min(self.lens.1)
            );
        }
        writeln!(f, "{} element(s) differ:", self.mismatches.len())?;
        for &(i, a, b) in &self.mismatches {
            writeln!(
                f,
                "  [{i}] {:#018x} ({:e}) vs {:#018x} ({:e})",
                a,
                f64::from_bits(a),
                b,
                f64::from_bits(b)
            )?;
        }
        Ok(())
    }
}

/// Runs `f` twice and reports every position whose `u64` bit pattern differs.
pub fn check_determinism_bits(mut f: impl FnMut() -> Vec<u64>) -> DeterminismReport {
    let a = f();
    let b = f();
    let mismatches = a
        .iter()
        .zip(&b)
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .map(|(i, (&x, &y))| (i, x, y))
        .collect();
    DeterminismReport {
        lens: (a.len(), b.len()),
        mismatches,
    }
}

/// Runs `f` twice and reports every element whose f64 bits differ (so `-0.0` vs `0.0` and
/// different NaN payloads count as differences; equal NaNs do not).
pub fn check_determinism(mut f: impl FnMut() -> Vec<f64>) -> DeterminismReport {
    check_determinism_bits(|| f().into_iter().map(f64::to_bits).collect())
}

/// Checks `vjp(a·u + b·w) = a·vjp(u) + b·vjp(w)` element by element within `tol`
/// (numeric side = the right-hand side). Reported as parameter `"vjp"` with flat indices.
///
/// Errors if `u` and `w` differ in length or the three VJPs differ in length.
pub fn check_cotangent_linearity(
    mut vjp: impl FnMut(&[f64]) -> Vec<f64>,
    u: &[f64],
    w: &[f64],
    a: f64,
    b: f64,
    tol: &Tolerance,
) -> Result<Report, CheckError> {
    if u.len() != w.len() {
        return Err(CheckError(format!(
            "check_cotangent_linearity: cotangents have lengths {} and {}",
            u.len(),
            w.len()
        )));
    }
    let mix: Vec<f64> = u.iter().zip(w).map(|(x, y)| a * x + b * y).collect();
    let lhs = vjp(&mix);
    let gu = vjp(u);
    let gw = vjp(w);
    if lhs.len() != gu.len() || gu.len() != gw.len() {
        return Err(CheckError(format!(
            "check_cotangent_linearity: vjp lengths differ: {}, {}, {}",
            lhs.len(),
            gu.len(),
            gw.len()
        )));
    }
    let mut summary = SummaryBuilder::new("vjp", &[lhs.len()], Compared::Elements);
    let mut report = Report::default();
    for i in 0..lhs.len() {
        let rhs = a * gu[i] + b * gw[i];
        report
            .failures
            .extend(summary.record(tol, Location::Element(vec![i]), lhs[i], rhs));
    }
    report.params.push(summary.finish());
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn determinism_flags_the_differing_element() {
        let mut calls = 0;
        let r = check_determinism(|| {
            calls += 1;
            if calls == 1 {
                vec![1.0, 2.0, 0.0]
            } else {
                vec![1.0, 2.0, -0.0]
            }
        });
        assert!(!r.passed());
        assert_eq!(r.mismatches, vec![(2, 0u64, (-0.0f64).to_bits())]);
        assert!(check_determinism(|| vec![f64::NAN, 3.5]).passed());
        let mut n = 0;
        let lens = check_determinism_bits(|| {
            n += 1;
            vec![0; n]
        });
        assert!(!lens.passed() && lens.lens == (1, 2));
    }

    #[test]
    fn linearity_holds_for_a_linear_map_and_fails_for_a_nonlinear_one() {
        // vjp(c) = Jᵀc with J = [[1, 2], [3, 4], [5, 6]]: linear.
        let lin = |c: &[f64]| {
            vec![
                c[0] + 3.0 * c[1] + 5.0 * c[2],
                2.0 * c[0] + 4.0 * c[1] + 6.0 * c[2],
            ]
        };
        let u = [0.3, -1.0, 2.0];
        let w = [1.5, 0.5, -0.25];
        let tol = Tolerance::default();
        assert!(check_cotangent_linearity(lin, &u, &w, 2.0, -3.0, &tol)
            .unwrap()
            .passed());
        // A squared term breaks linearity on component 1 only.
        let bad = |c: &[f64]| vec![c[0], c[1] * c[1]];
        let r = check_cotangent_linearity(bad, &u, &w, 2.0, -3.0, &tol).unwrap();
        assert_eq!(r.failures.len(), 1);
        assert_eq!(r.failures[0].location, Location::Element(vec![1]));
        assert!(check_cotangent_linearity(lin, &u, &w[..2], 1.0, 1.0, &tol).is_err());
    }
}
