//! Full Jacobians of a fused op, analytic (from its backward) beside numeric (central
//! differences of its forward): the verbose view of [`super::audit_fused`] for small ops.
//!
//! Block `(m, i)` is `J[r, k] = ∂y_m[r]/∂x_i[k]`. Row `r` of the analytic side is the op's
//! backward with the cotangent `e_r` on output `m` (the other outputs unused); column `k`
//! of the numeric side is [`efa_check::central_difference_vec`] of every output with respect
//! to `x_i[k]`. Cost: one backward per output element and two forwards per input element.

use super::fused::input_name;
use crate::error::{Result, TapeError};
use crate::op::FusedOp;
use efa_check::{numeric_jacobian, FdOptions, Jacobian};
use ndarray::{ArrayD, IxDyn};
use std::cell::RefCell;

/// Largest number of Jacobian entries [`fused_jacobian`] builds (`Σ len(y_m) · Σ len(x_i)`),
/// so a large op is an error rather than an allocation failure: 4,194,304 entries, 32 MiB per
/// side in f64.
pub const MAX_JACOBIAN_ENTRIES: usize = 1 << 22;

/// Every block `∂y_m/∂x_i` of the Jacobian of `op` at `inputs`, analytic and numeric, in the
/// order `(m, i)` output-major. Outputs are named `"{op} output {m}"`, inputs
/// `"{op} input {i}"`. Compare a block with [`Jacobian::compare`].
///
/// Errors if the Jacobian has more than [`MAX_JACOBIAN_ENTRIES`] entries (naming the sizes),
/// if forward fails, or if backward returns no gradient or a wrong-shaped one for an input.
pub fn fused_jacobian(
    op: &dyn FusedOp<f64>,
    inputs: &[ArrayD<f64>],
    opts: &FdOptions,
) -> Result<Vec<Jacobian>> {
    let name = op.name().to_string();
    let err_name = format!("fused:{name}");
    let mut fresh = op.clone_op();
    let refs: Vec<&ArrayD<f64>> = inputs.iter().collect();
    let outs = fresh.forward(&refs)?;
    let n_out: usize = outs.iter().map(ArrayD::len).sum();
    let n_in: usize = inputs.iter().map(ArrayD::len).sum();
    if n_out
        .checked_mul(n_in)
        .is_none_or(|e| e > MAX_JACOBIAN_ENTRIES)
    {
        return Err(TapeError::new(
            err_name,
            format!(
                "the full Jacobian has {n_out} output × {n_in} input elements, more than \
                 {MAX_JACOBIAN_ENTRIES} entries; use audit_fused with seeded directions"
            ),
        ));
    }
    let out_refs: Vec<&ArrayD<f64>> = outs.iter().collect();
    let need = vec![true; inputs.len()];
    // analytic[m][i] row-major [len(y_m), len(x_i)]
    let mut analytic: Vec<Vec<Vec<f64>>> = outs
        .iter()
        .map(|y| {
            inputs
                .iter()
                .map(|x| vec![0.0; y.len() * x.len()])
                .collect()
        })
        .collect();
    for (m, y) in outs.iter().enumerate() {
        for r in 0..y.len() {
            let mut e = ArrayD::zeros(y.raw_dim());
            e.as_slice_mut().expect("fresh array")[r] = 1.0;
            let d_out: Vec<Option<&ArrayD<f64>>> =
                (0..outs.len()).map(|k| (k == m).then_some(&e)).collect();
            let grads = fresh.backward(&refs, &out_refs, &d_out, &need)?;
            for (i, x) in inputs.iter().enumerate() {
                let g = match grads.get(i) {
                    Some(Some(g)) if g.shape() == x.shape() => g,
                    _ => {
                        return Err(TapeError::new(
                            err_name,
                            format!(
                                "backward gave no gradient of shape {:?} for input {i}",
                                x.shape()
                            ),
                        ))
                    }
                };
                let row = &mut analytic[m][i][r * x.len()..(r + 1) * x.len()];
                for (a, &v) in row.iter_mut().zip(g.iter()) {
                    *a = v;
                }
            }
        }
    }
    let mut blocks: Vec<Vec<Option<Jacobian>>> = outs
        .iter()
        .map(|_| inputs.iter().map(|_| None).collect())
        .collect();
    for (i, x) in inputs.iter().enumerate() {
        let err = RefCell::new(None);
        let mut f = |v: &[f64]| -> Vec<f64> {
            let mut xs = inputs.to_vec();
            xs[i] = ArrayD::from_shape_vec(IxDyn(x.shape()), v.to_vec()).expect("sizes");
            let refs: Vec<&ArrayD<f64>> = xs.iter().collect();
            match op.clone_op().forward(&refs) {
                Ok(ys) => ys.iter().flat_map(|y| y.iter().copied()).collect(),
                Err(e) => {
                    err.borrow_mut().get_or_insert(e);
                    vec![f64::NAN; n_out]
                }
            }
        };
        let x0: Vec<f64> = x.iter().copied().collect();
        let num = numeric_jacobian(&mut f, &x0, opts); // [n_out, len(x)]
        if let Some(e) = err.into_inner() {
            return Err(e);
        }
        let mut row0 = 0;
        for (m, y) in outs.iter().enumerate() {
            let rows = y.len() * x.len();
            let numeric = if x.is_empty() {
                Vec::new()
            } else {
                num[row0 * x.len()..row0 * x.len() + rows].to_vec()
            };
            row0 += y.len();
            blocks[m][i] = Some(Jacobian {
                output: format!("{name} output {m}"),
                input: input_name(&name, i),
                out_shape: y.shape().to_vec(),
                in_shape: x.shape().to_vec(),
                analytic: std::mem::take(&mut analytic[m][i]),
                numeric,
            });
        }
    }
    Ok(blocks.into_iter().flatten().flatten().collect())
}
