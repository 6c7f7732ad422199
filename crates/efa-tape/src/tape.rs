//! The tape: an arena of nodes in creation order, and the `Var` handles into it.

use crate::error::{Result, TapeError};
use crate::op::{LeafKind, Op};
use efa_num::Real;
use ndarray::ArrayD;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// Source of distinct tape ids, so a [`Var`] used on the wrong tape is detected.
static NEXT_TAPE_ID: AtomicU64 = AtomicU64::new(1);

/// A handle to one node of one [`Tape`]: node index plus the id of the owning tape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Var {
    pub(crate) idx: usize,
    pub(crate) tape: u64,
}

impl Var {
    /// Position of the node in its tape's creation order.
    pub fn index(&self) -> usize {
        self.idx
    }
}

/// One arena entry: value (always standard row-major layout), op, inputs, grad flag.
pub(crate) struct Node<T: Real> {
    pub(crate) value: ArrayD<T>,
    pub(crate) op: Op<T>,
    pub(crate) inputs: Vec<usize>,
    pub(crate) needs_grad: bool,
    pub(crate) name: Option<String>,
}

/// A reverse-mode autodiff tape over `T` (f32 or f64): an arena of nodes in creation order,
/// owned and dropped by the user. Ops append nodes; [`Tape::backward`] is one reverse sweep.
pub struct Tape<T: Real> {
    pub(crate) id: u64,
    pub(crate) nodes: Vec<Node<T>>,
    pub(crate) params: Vec<(String, usize)>,
    /// Opt-in anomaly mode (see [`Tape::set_detect_anomaly`]).
    pub(crate) detect_anomaly: bool,
    /// The first non-finite forward value recorded in anomaly mode.
    pub(crate) anomaly: Option<TapeError>,
    /// Whether recorded values are rounded to f64 or f32 (see
    /// [`Tape::set_round_values_to_f64`], [`Tape::set_round_values_to_f32`]).
    pub(crate) round_to: Option<Storage>,
    /// The band of [`Tape::set_relu_kink_flip`], if set.
    pub(crate) relu_kink_band: Option<f64>,
}

/// The precision recorded values are rounded to (see [`Tape::set_round_values_to_f64`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Storage {
    F64,
    F32,
}

/// The recorded values' buffers go back to the thread's cache ([`efa_num::pool`]), where the
/// next tape's ops take them: a training step that records the same shapes as the last one
/// allocates nothing large. So do the arrays the ops saved for the backward
/// (`Op::give_back`); fused ops' own state goes back as they drop.
impl<T: Real> Drop for Tape<T> {
    fn drop(&mut self) {
        for node in self.nodes.drain(..) {
            efa_num::pool::give_array(node.value);
            node.op.give_back();
        }
        efa_num::pool::give(std::mem::take(&mut self.nodes));
    }
}

impl<T: Real> Default for Tape<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Real> Tape<T> {
    /// An empty tape with a fresh id.
    pub fn new() -> Self {
        Tape {
            id: NEXT_TAPE_ID.fetch_add(1, Ordering::Relaxed),
            nodes: Vec::new(),
            params: Vec::new(),
            detect_anomaly: false,
            round_to: None,
            relu_kink_band: None,
            anomaly: None,
        }
    }

    /// Number of nodes recorded so far.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True iff no node has been recorded.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Checks that `v` belongs to this tape; returns its node index.
    pub(crate) fn check(&self, v: Var, op: &str) -> Result<usize> {
        if v.tape != self.id {
            return Err(TapeError::new(
                op,
                format!(
                    "Var #{} belongs to tape {} but was used on tape {}",
                    v.idx, v.tape, self.id
                ),
            ));
        }
        if v.idx >= self.nodes.len() {
            return Err(TapeError::new(
                op,
                format!(
                    "Var #{} out of range (tape has {})",
                    v.idx,
                    self.nodes.len()
                ),
            ));
        }
        Ok(v.idx)
    }

    /// Rounds every value recorded from now on (parameters, constants, op results, a fused
    /// op's outputs) to the nearest f64, the computation itself staying in `T`. For the
    /// double-double type this evaluates the definition with f64 storage and exact arithmetic:
    /// the error it leaves is the *f64 floor*, what no f64 evaluation that stores its forward
    /// values in f64 can avoid (a gradient's sensitivity to half an ulp in every stored value).
    /// A no-op for f32 and f64. State a fused op keeps inside itself is not rounded. Replaces
    /// an earlier setting of [`Tape::set_round_values_to_f32`]; `false` turns rounding off.
    pub fn set_round_values_to_f64(&mut self, on: bool) {
        self.round_to = on.then_some(Storage::F64);
    }

    /// [`Tape::set_round_values_to_f64`] with f32 storage: every value recorded from now on is
    /// rounded to the nearest f64 and then to the nearest f32. For the double-double type this
    /// evaluates the definition with f32 storage and exact arithmetic; its error is the *f32
    /// floor* of each gradient, its sensitivity to half an ulp of f32 in every stored value
    /// (where attention is sharp, large: no f32 evaluation of the same stored values gets
    /// below it except by luck). For f32 itself a no-op; for f64 it rounds. Replaces an
    /// earlier setting of either call; `false` turns rounding off.
    pub fn set_round_values_to_f32(&mut self, on: bool) {
        self.round_to = on.then_some(Storage::F32);
    }

    /// Inverts the ReLU derivative (`[x > 0]` becomes `[x ≤ 0]`) in every later backward for
    /// the inputs within `band` times the largest `|x|` of their `relu` node's input: the
    /// elements whose side of the kink a computation with relative error near `band` may get
    /// either way. The gradient then differs from the exact one by what those elements' sides
    /// are worth, which bounds how far a lower-precision evaluation can land from the exact
    /// gradient by rounding at the kinks alone (the precision audit's `f32-kinks` row). `None`
    /// (the default) restores the exact derivative. A fused op's internal ReLUs are not
    /// affected.
    pub fn set_relu_kink_flip(&mut self, band: Option<f64>) {
        self.relu_kink_band = band;
    }

    /// Value of node `i` (internal index, already checked).
    pub(crate) fn val(&self, i: usize) -> &ArrayD<T> {
        &self.nodes[i].value
    }

    /// Appends a node; it needs a gradient iff any input does.
    pub(crate) fn push(&mut self, op: Op<T>, inputs: Vec<usize>, value: ArrayD<T>) -> Var {
        let needs_grad = inputs.iter().any(|&i| self.nodes[i].needs_grad);
        self.push_node(op, inputs, value, needs_grad, None)
    }

    fn push_node(
        &mut self,
        op: Op<T>,
        inputs: Vec<usize>,
        value: ArrayD<T>,
        needs_grad: bool,
        name: Option<String>,
    ) -> Var {
        let mut value = if value.is_standard_layout() {
            value
        } else {
            value.as_standard_layout().into_owned()
        };
        match self.round_to {
            Some(Storage::F64) => value.mapv_inplace(|x| T::from_f64(x.to_f64())),
            Some(Storage::F32) => value.mapv_inplace(|x| T::from_f64(f64::from(x.to_f64() as f32))),
            None => {}
        }
        if self.nodes.len() == self.nodes.capacity() {
            // Grown from the cache, so the next tape of the same length finds its room there.
            let mut room = efa_num::pool::take(self.nodes.capacity().max(64) * 2);
            room.append(&mut self.nodes);
            efa_num::pool::give(std::mem::replace(&mut self.nodes, room));
        }
        self.nodes.push(Node {
            value,
            op,
            inputs,
            needs_grad,
            name,
        });
        if self.detect_anomaly && self.anomaly.is_none() {
            self.anomaly = crate::anomaly::check_forward(self, self.nodes.len() - 1);
        }
        Var {
            idx: self.nodes.len() - 1,
            tape: self.id,
        }
    }

    /// A named trainable parameter (needs a gradient); [`crate::Grads::param`] finds its
    /// gradient by `name`. A duplicate name is an error.
    pub fn param(&mut self, name: &str, value: ArrayD<T>) -> Result<Var> {
        if self.params.iter().any(|(n, _)| n == name) {
            return Err(TapeError::new(
                "param",
                format!(
                    "duplicate parameter name '{name}' (shape {:?})",
                    value.shape()
                ),
            ));
        }
        let v = self.push_node(
            Op::Leaf(LeafKind::Param),
            vec![],
            value,
            true,
            Some(name.to_string()),
        );
        self.params.push((name.to_string(), v.idx));
        Ok(v)
    }

    /// An unnamed leaf that needs a gradient (for audits and VJPs).
    pub fn input(&mut self, value: ArrayD<T>) -> Var {
        self.push_node(Op::Leaf(LeafKind::Input), vec![], value, true, None)
    }

    /// A leaf that needs no gradient.
    pub fn constant(&mut self, value: ArrayD<T>) -> Var {
        self.push_node(Op::Leaf(LeafKind::Constant), vec![], value, false, None)
    }

    /// The value of `v`, or an error if `v` belongs to another tape.
    pub fn try_value(&self, v: Var) -> Result<&ArrayD<T>> {
        Ok(self.val(self.check(v, "value")?))
    }

    /// The value of `v`.
    ///
    /// # Panics
    /// If `v` belongs to another tape (use [`Tape::try_value`] to get an error instead).
    #[track_caller]
    pub fn value(&self, v: Var) -> &ArrayD<T> {
        match self.try_value(v) {
            Ok(x) => x,
            Err(e) => panic!("{e}"),
        }
    }

    /// The shape of `v`.
    ///
    /// # Panics
    /// If `v` belongs to another tape (see [`Tape::try_value`]).
    #[track_caller]
    pub fn shape(&self, v: Var) -> &[usize] {
        self.value(v).shape()
    }

    /// Whether `v` needs a gradient (it is a param/input or depends on one).
    pub fn needs_grad(&self, v: Var) -> Result<bool> {
        Ok(self.nodes[self.check(v, "needs_grad")?].needs_grad)
    }

    /// Bytes the backward pass of node `i` reads beyond the op's shape bookkeeping: saved
    /// tensors plus the input/output values it needs from the arena.
    pub(crate) fn saved_bytes(&self, i: usize) -> usize {
        let node = &self.nodes[i];
        let b = |a: &ArrayD<T>| a.len() * T::BYTES;
        let inp = |k: usize| b(self.val(node.inputs[k]));
        match &node.op {
            Op::Binary(k) => k.saved(inp),
            Op::Unary(k) => k.saved(inp(0), b(&node.value)),
            Op::Matmul { .. } => inp(0) + inp(1),
            Op::Embedding { ids } => ids.len() * std::mem::size_of::<usize>(),
            Op::GatherPositions { pos } => pos.len() * std::mem::size_of::<usize>(),
            Op::MaskedFill { mask } => mask.len(),
            Op::LayerNorm { xhat, rstd } => b(xhat) + rstd.len() * T::BYTES + inp(1),
            Op::Softmax | Op::LogSoftmax => b(&node.value),
            Op::SoftmaxCrossEntropy { probs, targets } => {
                b(probs) + targets.len() * std::mem::size_of::<usize>()
            }
            Op::Mse { diff } => b(diff),
            Op::FusedHead { op, outputs } => {
                op.saved_bytes()
                    + (0..node.inputs.len()).map(inp).sum::<usize>()
                    + outputs.iter().map(|&o| b(self.val(o))).sum::<usize>()
            }
            _ => 0,
        }
    }

    /// A table of every node: id, op, input ids, shape, bytes saved for backward, and
    /// whether it needs a gradient; a total line at the end.
    pub fn dump(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:>5}  {:<32} {:<16} {:<20} {:>12}  grad",
            "id", "op", "inputs", "shape", "saved bytes"
        );
        let mut total = 0;
        for (i, n) in self.nodes.iter().enumerate() {
            let saved = self.saved_bytes(i);
            total += saved;
            let op = match &n.name {
                Some(name) => format!("{} '{}'", n.op.name(), name),
                None => n.op.name(),
            };
            let _ = writeln!(
                s,
                "{:>5}  {:<32} {:<16} {:<20} {:>12}  {}",
                i,
                op,
                format!("{:?}", n.inputs),
                format!("{:?}", n.value.shape()),
                saved,
                if n.needs_grad { "yes" } else { "no" }
            );
        }
        let _ = writeln!(
            s,
            "{} nodes, {} bytes saved for backward",
            self.nodes.len(),
            total
        );
        s
    }
}
