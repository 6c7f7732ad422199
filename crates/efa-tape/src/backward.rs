//! The reverse sweep and the gradient store.
//!
//! Backward is one pass over the arena from the output down to node 0: each node that needs a
//! gradient and has received one passes vector-Jacobian products to its inputs, which are
//! accumulated with `+=` (never overwritten). No hashing, no topological sort: creation order
//! is already topological.

use crate::error::{Result, TapeError};
use crate::op::Op;
use crate::ops;
use crate::tape::{Tape, Var};
use efa_num::Real;
use ndarray::ArrayD;

/// Gradients from one backward pass: one per node that needs a gradient and is reached from
/// the output (retain-all).
///
/// A named parameter that does not reach the output has **no** gradient, and asking for it
/// with [`Grads::param`] or [`Grads::params`] is an error naming the parameter: a zero there
/// would hide a disconnected parameter, and a finite-difference audit cannot see it either
/// (its numeric derivative is zero too). Callers for whom an unused parameter is expected opt
/// in explicitly, as with `torch.autograd.grad(allow_unused=True)`: [`Grads::param_if_used`]
/// gives `None` for it, and [`Grads::unused_params`] lists them.
pub struct Grads<T: Real> {
    tape: u64,
    grads: Vec<Option<ArrayD<T>>>,
    params: Vec<(String, usize)>,
}

/// The gradients' buffers go back to the thread's cache ([`efa_num::pool`]).
impl<T: Real> Drop for Grads<T> {
    fn drop(&mut self) {
        for g in self.grads.drain(..).flatten() {
            efa_num::pool::give_array(g);
        }
    }
}

impl<T: Real> Grads<T> {
    /// `∂out/∂v` contracted with the cotangent, for any node `v` (intermediates included);
    /// `None` if `v` needs no gradient, does not influence the output, or is from another tape.
    pub fn wrt(&self, v: Var) -> Option<&ArrayD<T>> {
        if v.tape != self.tape {
            return None;
        }
        self.grads.get(v.idx).and_then(|g| g.as_ref())
    }

    fn find(&self, name: &str) -> Result<usize> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, idx)| idx)
            .ok_or_else(|| {
                TapeError::new("grads", format!("no parameter named `{name}` on this tape"))
            })
    }

    /// Gradient of the named parameter. An error if no parameter has that name, or if the
    /// parameter does not reach the output (see [`Grads::param_if_used`] to allow that).
    pub fn param(&self, name: &str) -> Result<&ArrayD<T>> {
        self.param_if_used(name)?.ok_or_else(|| {
            TapeError::new(
                "grads",
                format!(
                    "parameter `{name}` does not reach the output, so it has no gradient \
                     (use Grads::param_if_used to allow unused parameters)"
                ),
            )
        })
    }

    /// Gradient of the named parameter, or `None` if it does not reach the output (the
    /// explicit opt-in for unused parameters). An error if no parameter has that name.
    pub fn param_if_used(&self, name: &str) -> Result<Option<&ArrayD<T>>> {
        let idx = self.find(name)?;
        Ok(self.grads[idx].as_ref())
    }

    /// Every named parameter with its gradient, in creation order; an error naming the first
    /// parameter that does not reach the output.
    pub fn params(&self) -> Result<Vec<(&str, &ArrayD<T>)>> {
        self.params
            .iter()
            .map(|(n, _)| Ok((n.as_str(), self.param(n)?)))
            .collect()
    }

    /// Names of the parameters that do not reach the output, in creation order.
    pub fn unused_params(&self) -> Vec<&str> {
        self.params
            .iter()
            .filter(|&&(_, idx)| self.grads[idx].is_none())
            .map(|(n, _)| n.as_str())
            .collect()
    }
}

impl<T: Real> Tape<T> {
    /// Gradients of a one-element output `out` (any shape with exactly one element), seeded
    /// with cotangent 1.
    pub fn backward(&self, out: Var) -> Result<Grads<T>> {
        let i = self.check(out, "backward")?;
        let shape = self.val(i).shape();
        if self.val(i).len() != 1 {
            return Err(TapeError::new(
                "backward",
                format!(
                    "output must have exactly one element, got shape {shape:?}; use backward_with"
                ),
            ));
        }
        self.backward_with(out, ArrayD::from_elem(shape, T::ONE))
    }

    /// Vector-Jacobian product: gradients of `⟨cotangent, out⟩` with respect to every node.
    /// `cotangent` must have `out`'s shape.
    pub fn backward_with(&self, out: Var, cotangent: ArrayD<T>) -> Result<Grads<T>> {
        let o = self.check(out, "backward_with")?;
        if cotangent.shape() != self.val(o).shape() {
            return Err(TapeError::new(
                "backward_with",
                format!(
                    "cotangent shape {:?} differs from output shape {:?}",
                    cotangent.shape(),
                    self.val(o).shape()
                ),
            ));
        }
        if let Some(e) = &self.anomaly {
            return Err(e.clone());
        }
        let mut grads: Vec<Option<ArrayD<T>>> = (0..self.nodes.len()).map(|_| None).collect();
        grads[o] = Some(if cotangent.is_standard_layout() {
            cotangent
        } else {
            cotangent.as_standard_layout().into_owned()
        });
        for i in (0..=o).rev() {
            let node = &self.nodes[i];
            if !node.needs_grad {
                continue;
            }
            let need: Vec<bool> = node
                .inputs
                .iter()
                .map(|&j| self.nodes[j].needs_grad)
                .collect();
            let contribs = match &node.op {
                Op::FusedHead { op, outputs } => {
                    let d_out: Vec<Option<&ArrayD<T>>> =
                        outputs.iter().map(|&k| grads[k].as_ref()).collect();
                    if d_out.iter().all(|d| d.is_none()) {
                        continue;
                    }
                    ops::fused::backward(self, i, op.as_ref(), outputs, &d_out, &need)?
                }
                _ => match grads[i].as_ref() {
                    Some(g) => ops::vjp(self, i, g, &need),
                    None => continue,
                },
            };
            debug_assert!(contribs.len() == node.inputs.len() || contribs.is_empty());
            for (&j, c) in node.inputs.iter().zip(contribs) {
                let Some(c) = c else { continue };
                if !self.nodes[j].needs_grad {
                    continue;
                }
                if self.detect_anomaly {
                    crate::anomaly::check_backward(self, i, j, &c)?;
                }
                assert_eq!(
                    c.shape(),
                    self.val(j).shape(),
                    "backward: {} gave a wrong-shaped gradient",
                    node.op.name()
                );
                match grads[j].as_mut() {
                    Some(acc) => {
                        *acc += &c;
                        efa_num::pool::give_array(c);
                    }
                    None => grads[j] = Some(c),
                }
            }
        }
        Ok(Grads {
            tape: self.id,
            grads,
            params: self.params.clone(),
        })
    }
}
