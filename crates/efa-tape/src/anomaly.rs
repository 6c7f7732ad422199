//! Opt-in anomaly mode: every value an op writes (forward) and every gradient contribution it
//! passes to an input (backward) is scanned for NaN/±∞; the first one found becomes an error
//! naming the op, its node id, its input nodes and the named parameters upstream of it.
//!
//! Off by default (the scan costs one pass over every value); switch it on with
//! [`Tape::set_detect_anomaly`]. A forward anomaly is recorded (ops keep returning `Var`s, so
//! the API is unchanged) and reported by [`Tape::anomaly`] and by every later
//! [`Tape::backward`]/[`Tape::backward_with`] call.

use crate::error::{Result, TapeError};
use crate::op::Op;
use crate::tape::Tape;
use efa_num::Real;
use ndarray::ArrayD;

impl<T: Real> Tape<T> {
    /// Turns anomaly detection on or off for the ops recorded from now on and for backward.
    pub fn set_detect_anomaly(&mut self, on: bool) {
        self.detect_anomaly = on;
    }

    /// Whether anomaly detection is on.
    pub fn detect_anomaly(&self) -> bool {
        self.detect_anomaly
    }

    /// The first non-finite forward value seen in anomaly mode, as an error naming the op,
    /// node id, inputs and parameters involved.
    pub fn anomaly(&self) -> Option<&TapeError> {
        self.anomaly.as_ref()
    }

    /// Names of the parameters node `i` depends on (itself included), in creation order.
    pub fn params_upstream(&self, i: usize) -> Vec<String> {
        if i >= self.nodes.len() {
            return Vec::new();
        }
        let mut seen = vec![false; i + 1];
        seen[i] = true;
        // Creation order is topological: one downward pass marks every ancestor.
        for k in (0..=i).rev() {
            if seen[k] {
                for &j in &self.nodes[k].inputs {
                    seen[j] = true;
                }
            }
        }
        self.params
            .iter()
            .filter(|(_, idx)| *idx <= i && seen[*idx])
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Op name of node `i`, reporting a fused output under its fused op's name.
    fn anomaly_op_name(&self, i: usize) -> String {
        let node = &self.nodes[i];
        match (&node.op, &node.name) {
            (Op::FusedOutput, _) => self.nodes[node.inputs[0]].op.name(),
            (_, Some(name)) => format!("{} '{name}'", node.op.name()),
            _ => node.op.name(),
        }
    }
}

/// First non-finite element of `a`: (flat index, value).
fn first_non_finite<T: Real>(a: &ArrayD<T>) -> Option<(usize, f64)> {
    a.iter()
        .enumerate()
        .find(|(_, v)| !v.to_f64().is_finite())
        .map(|(k, v)| (k, v.to_f64()))
}

fn params_text(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// Checks the value just written at node `i`.
pub(crate) fn check_forward<T: Real>(tape: &Tape<T>, i: usize) -> Option<TapeError> {
    let node = &tape.nodes[i];
    let (k, v) = first_non_finite(&node.value)?;
    Some(TapeError::new(
        tape.anomaly_op_name(i),
        format!(
            "anomaly in forward: node {i} (shape {:?}, inputs {:?}) produced {v} at flat index {k}; parameters involved: {}",
            node.value.shape(),
            node.inputs,
            params_text(&tape.params_upstream(i))
        ),
    ))
}

/// The first node `0..=last` (creation order) holding a non-finite value, as the same error
/// anomaly mode would have raised there.
pub(crate) fn first_non_finite_node<T: Real>(tape: &Tape<T>, last: usize) -> Option<TapeError> {
    (0..=last.min(tape.nodes.len().saturating_sub(1)))
        .take(tape.nodes.len())
        .find_map(|i| check_forward(tape, i))
}

/// Checks the gradient contribution `c` that node `i` passes to its input node `j`.
pub(crate) fn check_backward<T: Real>(
    tape: &Tape<T>,
    i: usize,
    j: usize,
    c: &ArrayD<T>,
) -> Result<()> {
    let Some((k, v)) = first_non_finite(c) else {
        return Ok(());
    };
    Err(TapeError::new(
        tape.anomaly_op_name(i),
        format!(
            "anomaly in backward: node {i} passed {v} at flat index {k} to the gradient of its input node {j} (shape {:?}); parameters involved: {}",
            c.shape(),
            params_text(&tape.params_upstream(j))
        ),
    ))
}
