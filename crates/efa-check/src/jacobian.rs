//! Full Jacobians, analytic beside numeric, for verbose audits of small vector functions.
//!
//! A [`Jacobian`] block holds `J[r, k] = ∂y[r]/∂x[k]` for one output tensor `y` and one input
//! tensor `x`, row-major over `(flat r, flat k)`; [`numeric_jacobian`] builds the numeric side
//! from [`crate::central_difference_vec`] (one column per input element).

use crate::fd::{central_difference_vec, FdOptions};
use crate::report::{Compared, Location, Report, SummaryBuilder};
use crate::{unravel, Tolerance};

/// One block `∂output/∂input` of a Jacobian, analytic and numeric, as plain data.
#[derive(Clone, Debug, PartialEq)]
pub struct Jacobian {
    /// Name of the output tensor.
    pub output: String,
    /// Name of the input tensor.
    pub input: String,
    /// Shape of the output.
    pub out_shape: Vec<usize>,
    /// Shape of the input.
    pub in_shape: Vec<usize>,
    /// `∂y[r]/∂x[k]` claimed by the code under audit, row-major `[len(y), len(x)]`.
    pub analytic: Vec<f64>,
    /// The same by central differences, row-major `[len(y), len(x)]`.
    pub numeric: Vec<f64>,
}

impl Jacobian {
    /// Compares every entry with `tol`: one parameter named `"∂{output}/∂{input}"` of shape
    /// `out_shape ++ in_shape`, so a failure's index is the output index followed by the
    /// input index.
    pub fn compare(&self, tol: &Tolerance) -> Report {
        let name = format!("∂{}/∂{}", self.output, self.input);
        let shape: Vec<usize> = self
            .out_shape
            .iter()
            .chain(&self.in_shape)
            .copied()
            .collect();
        let mut b = SummaryBuilder::new(&name, &shape, Compared::Elements);
        let mut report = Report::default();
        for (k, (&a, &n)) in self.analytic.iter().zip(&self.numeric).enumerate() {
            let loc = Location::Element(unravel(k, &shape));
            report.failures.extend(b.record(tol, loc, a, n));
        }
        report.params.push(b.finish());
        report
    }
}

/// Numeric Jacobian of `f: ℝⁿ → ℝᵐ` at `x`, row-major `[m, n]`
/// (`J[r, k] = ∂f_r/∂x_k` by [`central_difference_vec`]).
///
/// Panics if `f` changes its output length between evaluations (caller bug).
pub fn numeric_jacobian(
    f: &mut dyn FnMut(&[f64]) -> Vec<f64>,
    x: &[f64],
    opts: &FdOptions,
) -> Vec<f64> {
    let n = x.len();
    let mut x = x.to_vec();
    let cols: Vec<Vec<f64>> = (0..n)
        .map(|k| central_difference_vec(f, &mut x, k, opts))
        .collect();
    let m = cols.first().map_or(0, Vec::len);
    let mut j = vec![0.0; m * n];
    for (k, col) in cols.iter().enumerate() {
        assert_eq!(col.len(), m, "numeric_jacobian: output length changed");
        for (r, &v) in col.iter().enumerate() {
            j[r * n + k] = v;
        }
    }
    j
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_jacobian_of_a_polynomial_map_and_comparison() {
        // f(a, b) = (a·b, a², b³): J = [[b, a], [2a, 0], [0, 3b²]] = [[3, 2], [4, 0], [0, 27]]
        // at (2, 3).
        let mut f = |x: &[f64]| vec![x[0] * x[1], x[0] * x[0], x[1].powi(3)];
        let num = numeric_jacobian(&mut f, &[2.0, 3.0], &FdOptions::default());
        let want = [3.0, 2.0, 4.0, 0.0, 0.0, 27.0];
        for (a, b) in num.iter().zip(&want) {
            assert!((a - b).abs() < 1e-6, "{num:?}");
        }
        let mut analytic = want.to_vec();
        analytic[5] = 26.0; // ∂f₂/∂b wrong
        let j = Jacobian {
            output: "y".into(),
            input: "x".into(),
            out_shape: vec![3],
            in_shape: vec![2],
            analytic,
            numeric: num,
        };
        let r = j.compare(&Tolerance::default());
        assert_eq!(r.failures.len(), 1, "{r}");
        assert_eq!(r.failures[0].param, "∂y/∂x");
        assert_eq!(r.failures[0].location, Location::Element(vec![2, 1]));
    }
}
