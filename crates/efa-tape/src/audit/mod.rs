//! Finite-difference audits of tape-built functions, through `efa-check`.
//!
//! [`audit`] registers the given named tensors as parameters, builds a scalar loss, takes the
//! analytic gradient from [`Tape::backward`] and compares it with central differences of the
//! loss rebuilt at perturbed values. [`audit_vjp`] does the same for a non-scalar output
//! through `⟨c, out⟩` with a seeded random cotangent `c` and [`Tape::backward_with`];
//! [`audit_vjp_linearity`] checks `vjp(a·u + b·w) = a·vjp(u) + b·vjp(w)`.
//!
//! Op level: [`audit_fused`] checks one [`crate::FusedOp`]'s backward against finite
//! differences of its forward, [`Tape::audit_fused_nodes`] every fused node recorded on a
//! tape, and [`fused_jacobian`] gives an op's full analytic and numeric Jacobians.
//!
//! Every report keeps each compared value ([`efa_check::ParamSummary::analytic`] and
//! `numeric`; print them with [`Report::verbose`]). When the audited output is not finite at
//! the starting point, the report's [`Report::nonfinite_base`] names the first non-finite
//! value on the tape (or of the op): a warning, not an error, but such a report never passes.

mod fused;
mod jacobian;

pub use fused::{audit_fused, input_name, FusedNodeReport};
pub use jacobian::{fused_jacobian, MAX_JACOBIAN_ENTRIES};

use crate::error::{Result, TapeError};
use crate::tape::{Tape, Var};
use efa_check::{audit_params, check_cotangent_linearity, ParamSpec, Report, Tolerance};
use ndarray::{ArrayD, IxDyn};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cell::RefCell;

/// Options of a tape audit: tolerance, step and mode (see [`efa_check::CheckOptions`]).
pub type AuditOptions = efa_check::CheckOptions;

fn register(tape: &mut Tape<f64>, params: &[(&str, ArrayD<f64>)]) -> Result<Vec<Var>> {
    params
        .iter()
        .map(|(n, v)| tape.param(n, v.clone()))
        .collect()
}

fn specs(params: &[(&str, ArrayD<f64>)]) -> Vec<ParamSpec> {
    params
        .iter()
        .map(|(n, v)| ParamSpec {
            name: n.to_string(),
            shape: v.shape().to_vec(),
            values: v.iter().copied().collect(),
        })
        .collect()
}

/// Evaluates `⟨c, build(θ)⟩` (or the scalar itself when `c` is `None`) at flat values `vals`;
/// the first error is kept in `err` and NaN returned.
fn eval<F>(
    params: &[(&str, ArrayD<f64>)],
    build: &F,
    c: Option<&ArrayD<f64>>,
    vals: &[Vec<f64>],
    err: &RefCell<Option<TapeError>>,
) -> f64
where
    F: Fn(&mut Tape<f64>, &[Var]) -> Result<Var>,
{
    let run = || -> Result<f64> {
        let mut t = Tape::new();
        let vars = params
            .iter()
            .zip(vals)
            .map(|((n, p), v)| {
                let a = ArrayD::from_shape_vec(IxDyn(p.shape()), v.clone()).expect("audit: sizes");
                t.param(n, a)
            })
            .collect::<Result<Vec<_>>>()?;
        let out = build(&mut t, &vars)?;
        let y = t.try_value(out)?;
        Ok(match c {
            None => y.sum(),
            Some(c) => y.iter().zip(c.iter()).map(|(a, b)| a * b).sum(),
        })
    };
    run().unwrap_or_else(|e| {
        err.borrow_mut().get_or_insert(e);
        f64::NAN
    })
}

/// Every parameter's analytic gradient, flattened; a parameter that does not reach the
/// output is an error naming it (its finite-difference derivative would be zero too, so a
/// zero-filled gradient would pass the audit and hide the disconnection).
fn flat_grads(g: &crate::Grads<f64>, params: &[(&str, ArrayD<f64>)]) -> Result<Vec<Vec<f64>>> {
    params
        .iter()
        .map(|(n, _)| Ok(g.param(n)?.iter().copied().collect()))
        .collect()
}

/// The warning for a non-finite output `out` at the starting point: its first non-finite
/// element and the first node of the tape (in creation order) holding a non-finite value.
fn nonfinite_output(t: &Tape<f64>, out: Var) -> Result<Option<String>> {
    let y = t.try_value(out)?;
    let Some((k, v)) = y.iter().enumerate().find(|(_, v)| !v.is_finite()) else {
        return Ok(None);
    };
    let first = crate::anomaly::first_non_finite_node(t, out.index())
        .map_or_else(String::new, |e| {
            format!("; first non-finite value on the tape: {e}")
        });
    Ok(Some(format!(
        "the audited output (node {}, shape {:?}) is {v} at flat index {k}{first}",
        out.index(),
        y.shape()
    )))
}

/// Audits the gradient of the one-element output of `build` with respect to every named
/// parameter in `params` against central finite differences (per `opts`).
///
/// Errors if building fails (at the base point or any perturbed point) or the output has more
/// than one element; gradient disagreements are listed in the returned report.
pub fn audit<F>(params: &[(&str, ArrayD<f64>)], build: F, opts: &AuditOptions) -> Result<Report>
where
    F: Fn(&mut Tape<f64>, &[Var]) -> Result<Var>,
{
    let mut t = Tape::new();
    let vars = register(&mut t, params)?;
    let out = build(&mut t, &vars)?;
    let g = t.backward(out)?;
    let analytic = flat_grads(&g, params)?;
    let err = RefCell::new(None);
    let mut report = audit_params(
        &specs(params),
        &analytic,
        |v| eval(params, &build, None, v, &err),
        opts,
    )
    .map_err(|e| TapeError::new("audit", e.0))?;
    if let Some(e) = err.into_inner() {
        return Err(e);
    }
    report.nonfinite_base = nonfinite_output(&t, out)?.or(report.nonfinite_base);
    Ok(report)
}

/// Seeded cotangent with entries uniform in `[−1, 1]`.
pub(crate) fn random_cotangent(shape: &[usize], seed: u64) -> ArrayD<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    ArrayD::from_shape_simple_fn(IxDyn(shape), || rng.random_range(-1.0..=1.0))
}

/// Audits the vector-Jacobian product of a (possibly non-scalar) output: analytic
/// `backward_with(out, c)` against finite differences of `⟨c, out(θ)⟩`, `c` uniform in
/// `[−1, 1]` from `seed`.
pub fn audit_vjp<F>(
    params: &[(&str, ArrayD<f64>)],
    build: F,
    seed: u64,
    opts: &AuditOptions,
) -> Result<Report>
where
    F: Fn(&mut Tape<f64>, &[Var]) -> Result<Var>,
{
    let mut t = Tape::new();
    let vars = register(&mut t, params)?;
    let out = build(&mut t, &vars)?;
    let c = random_cotangent(t.try_value(out)?.shape(), seed);
    let g = t.backward_with(out, c.clone())?;
    let analytic = flat_grads(&g, params)?;
    let err = RefCell::new(None);
    let mut report = audit_params(
        &specs(params),
        &analytic,
        |v| eval(params, &build, Some(&c), v, &err),
        opts,
    )
    .map_err(|e| TapeError::new("audit_vjp", e.0))?;
    if let Some(e) = err.into_inner() {
        return Err(e);
    }
    report.nonfinite_base = nonfinite_output(&t, out)?.or(report.nonfinite_base);
    Ok(report)
}

/// Checks linearity of `backward_with` in the cotangent: for seeded random `u`, `w` and the
/// scalars `a = 1.75`, `b = −0.5`, `vjp(a·u + b·w) = a·vjp(u) + b·vjp(w)` over all
/// parameters' gradients (concatenated), within `tol`.
pub fn audit_vjp_linearity<F>(
    params: &[(&str, ArrayD<f64>)],
    build: F,
    seed: u64,
    tol: &Tolerance,
) -> Result<Report>
where
    F: Fn(&mut Tape<f64>, &[Var]) -> Result<Var>,
{
    let mut t = Tape::new();
    let vars = register(&mut t, params)?;
    let out = build(&mut t, &vars)?;
    let shape = t.try_value(out)?.shape().to_vec();
    let u = random_cotangent(&shape, seed);
    let w = random_cotangent(&shape, seed.wrapping_add(1));
    let err = RefCell::new(None);
    let vjp = |c: &[f64]| -> Vec<f64> {
        let c = ArrayD::from_shape_vec(IxDyn(&shape), c.to_vec()).expect("audit: sizes");
        match t.backward_with(out, c) {
            Ok(g) => match flat_grads(&g, params) {
                Ok(f) => f.concat(),
                Err(e) => {
                    err.borrow_mut().get_or_insert(e);
                    Vec::new()
                }
            },
            Err(e) => {
                err.borrow_mut().get_or_insert(e);
                Vec::new()
            }
        }
    };
    let u: Vec<f64> = u.iter().copied().collect();
    let w: Vec<f64> = w.iter().copied().collect();
    let report = check_cotangent_linearity(vjp, &u, &w, 1.75, -0.5, tol);
    if let Some(e) = err.into_inner() {
        return Err(e);
    }
    let mut report = report.map_err(|e| TapeError::new("audit_vjp_linearity", e.0))?;
    report.nonfinite_base = nonfinite_output(&t, out)?;
    Ok(report)
}
