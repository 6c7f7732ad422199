//! Op-level audits: one fused op's backward against finite differences of its forward.
//!
//! For op `F` with outputs `y_m = F_m(x_0, …, x_{I−1})` and seeded cotangents `c_m` (uniform in
//! `[−1, 1]`, output `m` from `seed + m`), the audited scalar is
//! `φ(x) = Σ_m ⟨c_m, F_m(x)⟩`. The op's backward with cotangents `c_m` claims `∂φ/∂x_i`;
//! [`efa_check::audit_params`] compares it with central differences of `φ`, element by
//! element or along seeded unit directions (per [`AuditOptions::mode`], so large inputs stay
//! fast with [`efa_check::Mode::Auto`]). Forward is re-run on a fresh copy of the op
//! ([`CloneFusedOp::clone_op`](crate::CloneFusedOp::clone_op)) at every perturbed point.
//!
//! Inputs are reported as parameters named `"{op} input {i}"`, so a failure names the op,
//! the input index and the element. [`Tape::audit_fused_nodes`] runs this audit on every
//! fused node recorded on a tape, at its recorded input values; inputs that are constants on
//! that tape (no gradient flows to them, and the tape never asks the op for one) are not
//! audited but listed in [`Report::skipped`].

use super::{random_cotangent, AuditOptions};
use crate::error::{Result, TapeError};
use crate::op::FusedOp;
use crate::op::Op;
use crate::tape::Tape;
use efa_check::{audit_params, ParamSpec, Report, Skipped};
use ndarray::{ArrayD, Dimension, IxDyn};
use std::cell::RefCell;
use std::fmt;

/// The name an audited input of `op` gets in reports: `"{op} input {i}"`.
pub fn input_name(op: &str, i: usize) -> String {
    format!("{op} input {i}")
}

/// First non-finite element of `a` as `(multi-index, value)`.
fn first_nonfinite(a: &ArrayD<f64>) -> Option<(Vec<usize>, f64)> {
    a.indexed_iter()
        .find(|(_, v)| !v.is_finite())
        .map(|(ix, v)| (ix.slice().to_vec(), *v))
}

/// `Σ_m ⟨c_m, y_m⟩`.
fn contract(outs: &[ArrayD<f64>], cs: &[ArrayD<f64>]) -> f64 {
    outs.iter()
        .zip(cs)
        .map(|(y, c)| y.iter().zip(c.iter()).map(|(a, b)| a * b).sum::<f64>())
        .sum()
}

/// Runs a fresh copy of `op` forward on `inputs`.
fn run_forward(op: &dyn FusedOp<f64>, inputs: &[ArrayD<f64>]) -> Result<Vec<ArrayD<f64>>> {
    let mut fresh = op.clone_op();
    let refs: Vec<&ArrayD<f64>> = inputs.iter().collect();
    let outs = fresh.forward(&refs)?;
    if outs.is_empty() {
        return Err(TapeError::new(
            format!("fused:{}", op.name()),
            "forward returned no outputs",
        ));
    }
    Ok(outs)
}

/// The audit shared by [`audit_fused`] and [`Tape::audit_fused_nodes`]: inputs with
/// `needs_grad[i]` are audited, the others listed as skipped with `skip_reason`.
fn audit_op(
    op: &dyn FusedOp<f64>,
    inputs: &[ArrayD<f64>],
    needs_grad: &[bool],
    skip_reason: &str,
    seed: u64,
    opts: &AuditOptions,
) -> Result<Report> {
    let name = op.name().to_string();
    let err_name = format!("fused:{name}");
    let mut fresh = op.clone_op();
    let refs: Vec<&ArrayD<f64>> = inputs.iter().collect();
    let outs = fresh.forward(&refs)?;
    if outs.is_empty() {
        return Err(TapeError::new(err_name, "forward returned no outputs"));
    }
    let cs: Vec<ArrayD<f64>> = outs
        .iter()
        .enumerate()
        .map(|(m, y)| random_cotangent(y.shape(), seed.wrapping_add(m as u64)))
        .collect();
    let out_refs: Vec<&ArrayD<f64>> = outs.iter().collect();
    let d_out: Vec<Option<&ArrayD<f64>>> = cs.iter().map(Some).collect();
    let grads = fresh.backward(&refs, &out_refs, &d_out, needs_grad)?;
    if grads.len() != inputs.len() {
        return Err(TapeError::new(
            err_name,
            format!(
                "backward returned {} gradients for {} inputs",
                grads.len(),
                inputs.len()
            ),
        ));
    }
    let mut specs = Vec::new();
    let mut claimed = Vec::new();
    let mut audited = Vec::new();
    let mut skipped = Vec::new();
    for (i, (g, x)) in grads.iter().zip(inputs).enumerate() {
        match (needs_grad[i], g) {
            (false, _) => skipped.push(Skipped {
                name: input_name(&name, i),
                shape: x.shape().to_vec(),
                reason: skip_reason.to_string(),
            }),
            (true, None) => {
                return Err(TapeError::new(
                    err_name,
                    format!(
                        "backward returned no gradient for input {i} (shape {:?}), which needs one",
                        x.shape()
                    ),
                ))
            }
            (true, Some(g)) if g.shape() != x.shape() => {
                return Err(TapeError::new(
                    err_name,
                    format!(
                        "backward returned gradient of shape {:?} for input {i} of shape {:?}",
                        g.shape(),
                        x.shape()
                    ),
                ))
            }
            (true, Some(g)) => {
                specs.push(ParamSpec {
                    name: input_name(&name, i),
                    shape: x.shape().to_vec(),
                    values: x.iter().copied().collect(),
                });
                claimed.push(g.iter().copied().collect::<Vec<f64>>());
                audited.push(i);
            }
        }
    }
    let err = RefCell::new(None);
    let phi = |vals: &[Vec<f64>]| -> f64 {
        let mut xs = inputs.to_vec();
        for (&i, v) in audited.iter().zip(vals) {
            xs[i] =
                ArrayD::from_shape_vec(IxDyn(inputs[i].shape()), v.clone()).expect("audit: sizes");
        }
        match run_forward(op, &xs) {
            Ok(ys) => contract(&ys, &cs),
            Err(e) => {
                err.borrow_mut().get_or_insert(e);
                f64::NAN
            }
        }
    };
    let mut report =
        audit_params(&specs, &claimed, phi, opts).map_err(|e| TapeError::new(err_name, e.0))?;
    if let Some(e) = err.into_inner() {
        return Err(e);
    }
    report.skipped = skipped;
    if report.nonfinite_base.is_some() {
        report.nonfinite_base = Some(nonfinite_text(&name, inputs, &outs));
    }
    Ok(report)
}

/// Names the first non-finite input or output element of the op at the base point.
fn nonfinite_text(name: &str, inputs: &[ArrayD<f64>], outs: &[ArrayD<f64>]) -> String {
    let found = |what: &str, xs: &[ArrayD<f64>]| {
        xs.iter().enumerate().find_map(|(k, a)| {
            first_nonfinite(a).map(|(ix, v)| format!("{name} {what} {k} is {v} at {ix:?}"))
        })
    };
    let out = found("output", outs);
    match (found("input", inputs), out) {
        (Some(i), Some(o)) => format!("{i}; {o}"),
        (i, o) => i
            .or(o)
            .unwrap_or_else(|| format!("{name}: Σ⟨c, output⟩ is not finite")),
    }
}

/// Audits the backward of `op` at `inputs` (every input needs a gradient): the op's
/// vector-Jacobian product with seeded cotangents `c_m` (output `m` from `seed + m`, uniform
/// in `[−1, 1]`) against central differences of `φ(x) = Σ_m ⟨c_m, F_m(x)⟩` with respect to
/// every input, per `opts`. `op` itself is not run: each evaluation uses a fresh copy
/// ([`CloneFusedOp::clone_op`](crate::CloneFusedOp::clone_op)).
///
/// The report has one parameter per input, named `"{op} input {i}"` ([`input_name`]), and
/// every compared value (verbose data). If an input or output is not finite at `inputs`,
/// [`Report::nonfinite_base`] names the first such element (a warning; the report does not
/// pass).
///
/// Errors if forward fails (at `inputs` or any perturbed point), or backward returns the
/// wrong number of gradients, no gradient for an input, or one of the wrong shape.
pub fn audit_fused(
    op: &dyn FusedOp<f64>,
    inputs: &[ArrayD<f64>],
    seed: u64,
    opts: &AuditOptions,
) -> Result<Report> {
    let all = vec![true; inputs.len()];
    audit_op(op, inputs, &all, "", seed, opts)
}

/// The audit of one fused node of a tape ([`Tape::audit_fused_nodes`]).
#[derive(Clone, Debug, PartialEq)]
pub struct FusedNodeReport {
    /// Tape node id of the fused op (its head node, as in [`Tape::dump`]).
    pub node: usize,
    /// The op's name (e.g. `"attention"`).
    pub op: String,
    /// Tape node id of each input, in input order.
    pub input_nodes: Vec<usize>,
    /// Tape node id of each output.
    pub output_nodes: Vec<usize>,
    /// Per-input comparisons (parameters named `"{op} input {i}"`); constant inputs are in
    /// `report.skipped`.
    pub report: Report,
}

impl FusedNodeReport {
    /// True iff every audited input passed and the op was finite at its recorded inputs.
    pub fn passed(&self) -> bool {
        self.report.passed()
    }
}

impl fmt::Display for FusedNodeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "fused node {} ({}): inputs from nodes {:?}, outputs {:?}",
            self.node, self.op, self.input_nodes, self.output_nodes
        )?;
        write!(f, "{}", self.report)
    }
}

impl Tape<f64> {
    /// Audits every fused node recorded on this tape, in creation order, at its recorded
    /// input values: [`audit_fused`] with the tape's own `needs_grad` flags, so exactly the
    /// gradients the reverse sweep asks for are checked. Inputs that are constants on this
    /// tape are listed as skipped, not audited. Node `k` (in order) uses cotangent seed
    /// `seed + 1000·k`.
    ///
    /// Errors (naming the op) as [`audit_fused`] does.
    pub fn audit_fused_nodes(
        &self,
        seed: u64,
        opts: &AuditOptions,
    ) -> Result<Vec<FusedNodeReport>> {
        let mut reports = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let Op::FusedHead { op, outputs } = &node.op else {
                continue;
            };
            let inputs: Vec<ArrayD<f64>> =
                node.inputs.iter().map(|&j| self.val(j).clone()).collect();
            let need: Vec<bool> = node
                .inputs
                .iter()
                .map(|&j| self.nodes[j].needs_grad)
                .collect();
            let node_seed = seed.wrapping_add(1000u64.wrapping_mul(reports.len() as u64));
            let report = audit_op(
                op.as_ref(),
                &inputs,
                &need,
                "constant on this tape: no gradient flows to it, so it is not audited",
                node_seed,
                opts,
            )
            .map_err(|e| TapeError::new(e.op, format!("node {i}: {}", e.message)))?;
            reports.push(FusedNodeReport {
                node: i,
                op: op.name().to_string(),
                input_nodes: node.inputs.clone(),
                output_nodes: outputs.clone(),
                report,
            });
        }
        Ok(reports)
    }
}
