//! The reverse sweep and the gradient store.
//!
//! Backward is one pass over the arena from the output down to node 0: each node that needs a
//! gradient and has received one passes vector-Jacobian products to its inputs, which are
//! accumulated with `+=` (never overwritten). No hashing, no topological sort: creation order
//! is already topological.

use crate::error::{Result, TapeError};
use crate::ops;
use crate::tape::{Op, Tape, Var};
use efa_num::Real;
use ndarray::ArrayD;

/// Gradients from one backward pass: one per node that needs a gradient and is reached from
/// the output (retain-all), plus zeros for named parameters that did not influence it.
pub struct Grads<T: Real> {
    tape: u64,
    grads: Vec<Option<ArrayD<T>>>,
    params: Vec<(String, usize)>,
    zeros: Vec<Option<ArrayD<T>>>,
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

    /// Gradient of the named parameter (zeros if it did not influence the output), `None` if
    /// no parameter has that name.
    pub fn param(&self, name: &str) -> Option<&ArrayD<T>> {
        let k = self.params.iter().position(|(n, _)| n == name)?;
        Some(self.param_at(k))
    }

    fn param_at(&self, k: usize) -> &ArrayD<T> {
        let idx = self.params[k].1;
        match (&self.grads[idx], &self.zeros[k]) {
            (Some(g), _) | (None, Some(g)) => g,
            (None, None) => unreachable!("Grads: parameter without gradient or zeros"),
        }
    }

    /// Every named parameter with its gradient, in creation order (zeros for parameters that
    /// did not influence the output).
    pub fn params(&self) -> Vec<(&str, &ArrayD<T>)> {
        (0..self.params.len())
            .map(|k| (self.params[k].0.as_str(), self.param_at(k)))
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
                    Some(acc) => *acc += &c,
                    None => grads[j] = Some(c),
                }
            }
        }
        let zeros = self
            .params
            .iter()
            .map(|&(_, idx)| {
                grads[idx]
                    .is_none()
                    .then(|| ArrayD::zeros(self.val(idx).shape()))
            })
            .collect();
        Ok(Grads {
            tape: self.id,
            grads,
            params: self.params.clone(),
            zeros,
        })
    }
}
