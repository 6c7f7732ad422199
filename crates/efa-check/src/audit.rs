//! Audits of a scalar function of several named tensors against claimed gradients.
//!
//! For parameter `p` with values `θ_p` and claimed gradient `g_p`:
//! * [`Mode::Full`] compares every `g_p[i]` with `(f(θ + h·eᵢ) − f(θ − h·eᵢ)) / 2h`;
//! * [`Mode::Directions`] draws `n` seeded unit directions `d` (normalised Gaussians) and
//!   compares `⟨g_p, d⟩` with `(f(θ + h·d) − f(θ − h·d)) / 2h`;
//! * [`Mode::Auto`] uses `Full` for tensors of at most `max_full` elements, else `Directions`.

use crate::fd::{central_difference, directional_difference, FdOptions};
use crate::report::{Compared, Location, Report, SummaryBuilder};
use crate::{unravel, Tolerance};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fmt;

/// A named tensor: name, shape and row-major values.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    /// Name used in reports.
    pub name: String,
    /// Shape; `values.len()` equals its product.
    pub shape: Vec<usize>,
    /// Row-major values.
    pub values: Vec<f64>,
}

impl ParamSpec {
    /// Builds a spec, checking that `values.len() == Π shape`.
    pub fn new(name: &str, shape: &[usize], values: Vec<f64>) -> Result<Self, CheckError> {
        let n: usize = shape.iter().product();
        if n != values.len() {
            return Err(CheckError(format!(
                "ParamSpec '{name}': shape {shape:?} has {n} elements but {} values were given",
                values.len()
            )));
        }
        Ok(ParamSpec {
            name: name.to_string(),
            shape: shape.to_vec(),
            values,
        })
    }
}

/// Which comparisons an audit makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every element.
    Full,
    /// `n` seeded random unit directions per parameter.
    Directions {
        /// Directions per parameter.
        n: usize,
        /// RNG seed (parameter `p` uses `seed + p`).
        seed: u64,
    },
    /// `Full` for parameters with at most `max_full` elements, else `Directions { n, seed }`.
    Auto {
        /// Largest element count audited in full.
        max_full: usize,
        /// Directions per large parameter.
        n: usize,
        /// RNG seed.
        seed: u64,
    },
}

/// Everything an audit needs besides the function: tolerance, step and mode.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CheckOptions {
    /// Acceptance rule (default abs 1e-5, rel 1e-3).
    pub tol: Tolerance,
    /// Finite-difference step and Richardson switch (default rel step 1e-6, plain).
    pub fd: FdOptions,
    /// Which comparisons (default [`Mode::Full`]).
    pub mode: Mode,
}

impl Default for CheckOptions {
    /// Default tolerance, default step, full Jacobian.
    fn default() -> Self {
        CheckOptions {
            tol: Tolerance::default(),
            fd: FdOptions::default(),
            mode: Mode::Full,
        }
    }
}

/// A malformed audit request (mismatched lengths); the message names what differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckError(pub String);

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CheckError {}

/// Draws a unit vector of length `n` from normalised standard Gaussians (Box–Muller).
fn unit_direction(rng: &mut StdRng, n: usize) -> Vec<f64> {
    let mut d: Vec<f64> = (0..n)
        .map(|_| {
            // u1 ∈ (0, 1] so ln u1 is finite.
            let u1: f64 = 1.0 - rng.random::<f64>();
            let u2: f64 = rng.random::<f64>();
            (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
        })
        .collect();
    let norm = d.iter().map(|v| v * v).sum::<f64>().sqrt();
    if norm > 0.0 {
        d.iter_mut().for_each(|v| *v /= norm);
    }
    d
}

/// The `count` seeded unit directions of length `len` that [`Mode::Directions`] compares
/// along (normalised standard Gaussians from `seed`); the seed of a report entry is in
/// [`crate::Compared::Directions`].
pub fn unit_directions(seed: u64, len: usize, count: usize) -> Vec<Vec<f64>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..count).map(|_| unit_direction(&mut rng, len)).collect()
}

/// The warning text for a non-finite `f(θ₀)`.
pub fn nonfinite_message(value: f64) -> String {
    format!("f(θ₀) = {value}")
}

/// Audits claimed gradients `grads[p]` of `f(θ_0, …, θ_{P−1})` for every parameter in
/// `params` (row-major values), per `opts`. `f` receives all parameters' current values.
/// Every comparison's analytic and numeric value is kept in the report (verbose data).
///
/// `f` is also evaluated once at the starting point: if `f(θ₀)` is not finite, the report
/// carries [`Report::nonfinite_base`] (a warning: the comparisons are still made and
/// reported, but the report does not pass).
///
/// **Kinks.** Compared element by element, an element whose central difference disagrees
/// is checked once more with one-sided differences: where they disagree (`f` is not
/// differentiable there, e.g. a ReLU input exactly at 0 — a zero bias meeting a zero input
/// at initialisation), an analytic value between them is a valid subgradient and passes; the
/// element is listed in [`Report::kinks`]. Where `f` is smooth the one-sided differences
/// agree and a wrong gradient still fails. Random directions get no such second look.
///
/// Errors if `grads.len() != params.len()` or a gradient's length differs from its
/// parameter's; numerical disagreements are not errors but entries in the [`Report`].
pub fn audit_params(
    params: &[ParamSpec],
    grads: &[Vec<f64>],
    mut f: impl FnMut(&[Vec<f64>]) -> f64,
    opts: &CheckOptions,
) -> Result<Report, CheckError> {
    if grads.len() != params.len() {
        return Err(CheckError(format!(
            "audit_params: {} parameters but {} gradients",
            params.len(),
            grads.len()
        )));
    }
    for (p, g) in params.iter().zip(grads) {
        if p.values.len() != g.len() || p.values.len() != p.shape.iter().product::<usize>() {
            return Err(CheckError(format!(
                "audit_params: parameter '{}' shape {:?} has {} values but its gradient has {}",
                p.name,
                p.shape,
                p.values.len(),
                g.len()
            )));
        }
    }
    let mut vals: Vec<Vec<f64>> = params.iter().map(|p| p.values.clone()).collect();
    let mut report = Report::default();
    let base = f(&vals);
    if !base.is_finite() {
        report.nonfinite_base = Some(nonfinite_message(base));
    }
    for (pi, (p, g)) in params.iter().zip(grads).enumerate() {
        let mut x = p.values.clone();
        let mut eval = |xs: &[f64]| {
            vals[pi].copy_from_slice(xs);
            f(&vals)
        };
        let n = x.len();
        let dirs = match opts.mode {
            Mode::Full => None,
            Mode::Directions { n, seed } => Some((n, seed)),
            Mode::Auto {
                max_full,
                n: nd,
                seed,
            } => (n > max_full).then_some((nd, seed)),
        };
        let summary = match dirs {
            None => {
                let mut summary = SummaryBuilder::new(&p.name, &p.shape, Compared::Elements);
                for (i, &gi) in g.iter().enumerate() {
                    let mut num = central_difference(&mut eval, &mut x, i, &opts.fd);
                    if !opts.tol.passes(gi, num) && base.is_finite() {
                        if let Some(n) =
                            at_kink(&mut eval, &mut x, i, &opts.fd, base, gi, &opts.tol)
                        {
                            report
                                .kinks
                                .push(format!("{}{:?}", p.name, unravel(i, &p.shape)));
                            num = n;
                        }
                    }
                    let loc = Location::Element(unravel(i, &p.shape));
                    report
                        .failures
                        .extend(summary.record(&opts.tol, loc, gi, num));
                }
                summary
            }
            Some((nd, seed)) => {
                let seed = seed.wrapping_add(pi as u64);
                let mut summary =
                    SummaryBuilder::new(&p.name, &p.shape, Compared::Directions { seed });
                if n > 0 {
                    // The directions of `unit_directions(seed, n, nd)`, drawn one at a time.
                    let mut rng = StdRng::seed_from_u64(seed);
                    for k in 0..nd {
                        let d = unit_direction(&mut rng, n);
                        let ana: f64 = g.iter().zip(&d).map(|(a, b)| a * b).sum();
                        let num = directional_difference(&mut eval, &mut x, &d, &opts.fd);
                        report.failures.extend(summary.record(
                            &opts.tol,
                            Location::Direction(k),
                            ana,
                            num,
                        ));
                    }
                }
                summary
            }
        };
        vals[pi].copy_from_slice(&p.values);
        report.params.push(summary.finish());
    }
    Ok(report)
}

/// The subgradient check of element `i` where the central difference disagrees with the
/// analytic `ana`: with the one-sided differences `l = (f(θ) − f(θ − h·eᵢ)) / h` and
/// `r = (f(θ + h·eᵢ) − f(θ)) / h` (`base = f(θ)`), `f` has a kink at θ along `eᵢ` when they
/// disagree beyond `tol`; then `ana` is accepted if it lies in `[min(l, r), max(l, r)]`
/// widened by `tol` (a one-sided derivative or between them, as a ReLU's 0 at its kink is),
/// and the value returned is `ana` clamped into that interval, to be compared in place of
/// the central difference. `None` where `f` is smooth (the central difference stands) or
/// `ana` lies outside.
fn at_kink(
    f: &mut dyn FnMut(&[f64]) -> f64,
    x: &mut [f64],
    i: usize,
    fd: &FdOptions,
    base: f64,
    ana: f64,
    tol: &Tolerance,
) -> Option<f64> {
    let x0 = x[i];
    let h = fd.rel_step * x0.abs().max(1.0);
    x[i] = x0 + h;
    let (xp, fp) = (x[i], f(x));
    x[i] = x0 - h;
    let (xm, fm) = (x[i], f(x));
    x[i] = x0;
    let l = (base - fm) / (x0 - xm);
    let r = (fp - base) / (xp - x0);
    let (lo, hi) = (l.min(r), l.max(r));
    if !(lo.is_finite() && hi.is_finite()) || tol.passes(l, r) {
        return None;
    }
    let slack = tol.abs + tol.rel * lo.abs().max(hi.abs());
    (ana >= lo - slack && ana <= hi + slack).then(|| ana.clamp(lo, hi))
}

/// Audits a claimed gradient `grad` of `f: ℝⁿ → ℝ` at `x` (reported as parameter `"x"` of
/// shape `[n]`).
pub fn check_gradient(
    mut f: impl FnMut(&[f64]) -> f64,
    x: &[f64],
    grad: &[f64],
    opts: &CheckOptions,
) -> Result<Report, CheckError> {
    let spec = ParamSpec::new("x", &[x.len()], x.to_vec())?;
    audit_params(&[spec], &[grad.to_vec()], |v| f(&v[0]), opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    // f(A, b) = Σ_ij A_ij² · b_j + sin(b_0); ∂/∂A_ij = 2·A_ij·b_j, ∂/∂b_j = Σ_i A_ij² + [j=0]·cos b_0.
    fn f(v: &[Vec<f64>]) -> f64 {
        let (a, b) = (&v[0], &v[1]);
        let mut s = b[0].sin();
        for i in 0..2 {
            for j in 0..3 {
                s += a[i * 3 + j].powi(2) * b[j];
            }
        }
        s
    }

    fn grads(a: &[f64], b: &[f64]) -> Vec<Vec<f64>> {
        let mut ga = vec![0.0; 6];
        let mut gb = vec![0.0; 3];
        for i in 0..2 {
            for j in 0..3 {
                ga[i * 3 + j] = 2.0 * a[i * 3 + j] * b[j];
                gb[j] += a[i * 3 + j].powi(2);
            }
        }
        gb[0] += b[0].cos();
        vec![ga, gb]
    }

    fn specs() -> Vec<ParamSpec> {
        vec![
            ParamSpec::new("A", &[2, 3], vec![0.5, -1.0, 2.0, 0.1, 0.3, -0.7]).unwrap(),
            ParamSpec::new("b", &[3], vec![1.5, -0.2, 0.8]).unwrap(),
        ]
    }

    #[test]
    fn correct_gradient_passes_full_and_directions() {
        let s = specs();
        let g = grads(&s[0].values, &s[1].values);
        let full = audit_params(&s, &g, f, &CheckOptions::default()).unwrap();
        assert!(full.passed(), "{full}");
        assert_eq!(full.summary("A").unwrap().checked, 6);
        let opts = CheckOptions {
            mode: Mode::Directions { n: 5, seed: 7 },
            ..Default::default()
        };
        let dirs = audit_params(&s, &g, f, &opts).unwrap();
        assert!(dirs.passed(), "{dirs}");
        assert_eq!(dirs.summary("b").unwrap().checked, 5);
    }

    #[test]
    fn kinks_accept_a_subgradient_and_nothing_else() {
        // f = relu(a) + relu(b)·3 + b² at a = 0 (kink), b = 0.5 (smooth): ∂f/∂b = 3 + 1 = 4.
        let f = |v: &[Vec<f64>]| v[0][0].max(0.0) + 3.0 * v[0][1].max(0.0) + v[0][1].powi(2);
        let spec = || vec![ParamSpec::new("p", &[2], vec![0.0, 0.5]).unwrap()];
        let opts = CheckOptions {
            mode: Mode::Full,
            ..CheckOptions::default()
        };
        // relu'(0) = 0 and = 1 are both one-sided derivatives: both pass, at a kink.
        for a in [0.0, 1.0, 0.4] {
            let r = audit_params(&spec(), &[vec![a, 4.0]], f, &opts).unwrap();
            assert!(r.passed(), "{a}: {r}");
            assert_eq!(r.kinks, vec!["p[0]".to_string()]);
        }
        // Outside [0, 1] fails; a wrong gradient at the smooth element fails with no kink.
        let r = audit_params(&spec(), &[vec![1.5, 4.0]], f, &opts).unwrap();
        assert!(!r.passed());
        let r = audit_params(&spec(), &[vec![0.0, 4.1]], f, &opts).unwrap();
        assert!(!r.passed());
        assert_eq!(r.failures.len(), 1);
        assert_eq!(r.kinks, vec!["p[0]".to_string()]);
    }

    #[test]
    fn wrong_gradient_is_flagged_at_the_exact_index() {
        let s = specs();
        let mut g = grads(&s[0].values, &s[1].values);
        g[0][4] += 0.01; // A[1, 1]
        let r = audit_params(&s, &g, f, &CheckOptions::default()).unwrap();
        assert!(!r.passed());
        assert_eq!(r.failures.len(), 1, "{r}");
        let fail = &r.failures[0];
        assert_eq!(fail.param, "A");
        assert_eq!(fail.location, Location::Element(vec![1, 1]));
        // analytic 2·0.3·(−0.2) + 0.01 = −0.11; numeric −0.12.
        assert!((fail.analytic - (-0.11)).abs() < 1e-12);
        assert!((fail.numeric - (-0.12)).abs() < 1e-7);
        assert!(r.summary("b").unwrap().pass && !r.summary("A").unwrap().pass);
        let text = r.to_string();
        assert!(text.contains("[1, 1]") && text.contains("FAIL"), "{text}");
        // Seeded directions also catch it (a perturbation of 0.01 along a unit direction).
        let opts = CheckOptions {
            mode: Mode::Directions { n: 4, seed: 1 },
            ..Default::default()
        };
        let rd = audit_params(&s, &g, f, &opts).unwrap();
        assert!(
            !rd.summary("A").unwrap().pass && rd.summary("b").unwrap().pass,
            "{rd}"
        );
    }

    #[test]
    fn auto_mode_switches_on_size_and_mismatches_are_errors() {
        let s = specs();
        let g = grads(&s[0].values, &s[1].values);
        let opts = CheckOptions {
            mode: Mode::Auto {
                max_full: 3,
                n: 2,
                seed: 0,
            },
            ..Default::default()
        };
        let r = audit_params(&s, &g, f, &opts).unwrap();
        assert_eq!(r.summary("A").unwrap().checked, 2); // 6 > 3: directions
        assert_eq!(r.summary("b").unwrap().checked, 3); // full
        let err = audit_params(&s, &g[..1], f, &opts).unwrap_err();
        assert!(err.0.contains("2 parameters but 1 gradients"), "{err}");
        assert!(ParamSpec::new("z", &[2, 2], vec![0.0; 3]).is_err());
    }

    #[test]
    fn check_gradient_single_vector_and_unit_directions() {
        let r = check_gradient(
            |x| x[0] * x[1],
            &[3.0, 4.0],
            &[4.0, 3.0],
            &Default::default(),
        );
        assert!(r.unwrap().passed());
        let mut rng = StdRng::seed_from_u64(3);
        let d = unit_direction(&mut rng, 10);
        assert!((d.iter().map(|v| v * v).sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn nonfinite_start_is_a_warning_that_blocks_passing() {
        // f = ln(x0) + x1 at x0 = 0: f(θ₀) = −∞; the x1 derivative is still compared.
        let r = check_gradient(
            |x| x[0].ln() + x[1],
            &[0.0, 2.0],
            &[1.0, 1.0],
            &Default::default(),
        )
        .unwrap();
        assert_eq!(r.nonfinite_base.as_deref(), Some("f(θ₀) = -inf"));
        assert!(!r.passed());
        assert_eq!(r.params[0].checked, 2);
        assert!(r.to_string().contains("WARNING"), "{r}");
        // Verbose data: both comparisons with their analytic values.
        assert_eq!(r.params[0].analytic, vec![1.0, 1.0]);
        // Directions are reproducible from the seed in the report.
        let opts = CheckOptions {
            mode: Mode::Directions { n: 3, seed: 9 },
            ..Default::default()
        };
        let g = [2.0, -1.0, 0.5];
        let r = check_gradient(
            |x| 2.0 * x[0] - x[1] + 0.5 * x[2],
            &[0.1, 0.2, 0.3],
            &g,
            &opts,
        )
        .unwrap();
        assert!(r.passed() && r.nonfinite_base.is_none(), "{r}");
        let p = &r.params[0];
        let Compared::Directions { seed } = p.compared else {
            panic!("{:?}", p.compared)
        };
        for (k, d) in unit_directions(seed, 3, 3).iter().enumerate() {
            let dot: f64 = g.iter().zip(d).map(|(a, b)| a * b).sum();
            assert_eq!(p.analytic[k], dot);
        }
    }
}
