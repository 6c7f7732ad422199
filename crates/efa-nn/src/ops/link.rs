//! The natural-parameter link as one tape node: `η = link(z)` column by column, with the
//! link table of `efa_expfam::link` (identity, or `sign·softplus(±z) + shift` for the
//! families whose natural parameters live in a subset of ℝᵈ).
//!
//! Forward: `η[b, j] = stepⱼ(z[b, j])`. Backward: `dz[b, j] = dη[b, j]·stepⱼ'(z[b, j])`, with
//! `stepⱼ'` = 1 or `±σ(±z)` (`efa_expfam::link::LinkStep::derivative`).

use efa_expfam::link::{steps, LinkStep};
use efa_expfam::Family;
use efa_num::Real;
use efa_tape::{FusedOp, Tape, TapeError, Var};
use ndarray::{ArrayD, Axis, Ix2};

#[derive(Clone)]
struct LinkOp {
    family: Family,
    steps: Vec<LinkStep>,
}

impl LinkOp {
    fn name(&self) -> String {
        format!("fused:link[{}]", self.family.name())
    }

    fn check<T: Real>(&self, z: &ArrayD<T>) -> Result<(), TapeError> {
        if z.ndim() != 2 || z.shape()[1] != self.steps.len() {
            return Err(TapeError::new(
                self.name(),
                format!(
                    "model output must be [B, {}], got {:?}",
                    self.steps.len(),
                    z.shape()
                ),
            ));
        }
        Ok(())
    }
}

impl<T: Real> FusedOp<T> for LinkOp {
    fn name(&self) -> &str {
        "link"
    }

    fn forward(&mut self, inputs: &[&ArrayD<T>]) -> Result<Vec<ArrayD<T>>, TapeError> {
        let z = inputs[0];
        self.check(z)?;
        let mut eta = z.clone();
        for (j, step) in self.steps.iter().enumerate() {
            eta.index_axis_mut(Axis(1), j)
                .mapv_inplace(|v| step.apply(v));
        }
        Ok(vec![eta])
    }

    fn backward(
        &self,
        inputs: &[&ArrayD<T>],
        _outputs: &[&ArrayD<T>],
        d_outputs: &[Option<&ArrayD<T>>],
        needs_grad: &[bool],
    ) -> Result<Vec<Option<ArrayD<T>>>, TapeError> {
        if !needs_grad[0] {
            return Ok(vec![None]);
        }
        let z = inputs[0];
        let Some(d) = d_outputs[0] else {
            return Ok(vec![Some(ArrayD::zeros(z.raw_dim()))]);
        };
        // forward computed η[b, j] = stepⱼ(z[b, j]), so dz[b, j] = dη[b, j]·stepⱼ'(z[b, j]).
        let z2 = z.view().into_dimensionality::<Ix2>().expect("checked");
        let mut dz = d.clone();
        {
            let mut dz2 = dz.view_mut().into_dimensionality::<Ix2>().expect("checked");
            for ((b, j), g) in dz2.indexed_iter_mut() {
                *g *= self.steps[j].derivative(z2[[b, j]]);
            }
        }
        Ok(vec![Some(dz)])
    }
}

/// Records [`TapeNn::natural`](crate::TapeNn::natural) (documented there).
pub(crate) fn natural<T: Real>(
    tape: &mut Tape<T>,
    family: &Family,
    z: Var,
) -> Result<Var, TapeError> {
    let op = LinkOp {
        family: *family,
        steps: steps(family),
    };
    op.check(tape.try_value(z)?)?;
    if op.steps.iter().all(|s| *s == LinkStep::Identity) {
        return Ok(z);
    }
    Ok(tape.fused(Box::new(op), &[z])?[0])
}
