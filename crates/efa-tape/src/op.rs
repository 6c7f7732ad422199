//! The closed set of primitive operations ([`Op`], with [`BinaryKind`] and [`UnaryKind`]) and
//! the [`FusedOp`] trait: what a tape node records, in a leaf module that imports neither the
//! tape nor the op implementations (they import it).
//!
//! Each op family's forward, backward and tests live in its module under `ops/`; the tape
//! (`tape.rs`) stores an [`Op`] per node and the reverse sweep dispatches on it.

use crate::error::{Result, TapeError};
use efa_num::Real;
use ndarray::ArrayD;

/// Which binary op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinaryKind {
    Add,
    Sub,
    Mul,
    Div,
}

/// Which unary op (with its constant, for scale and shift).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum UnaryKind<T> {
    Neg,
    Exp,
    Log,
    Log1p,
    Softplus,
    Sigmoid,
    Tanh,
    Relu,
    Gelu,
    Sqrt,
    Square,
    Scale(T),
    Shift(T),
}

/// What kind of leaf a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeafKind {
    Param,
    Input,
    Constant,
}

/// The closed set of primitive operations; each variant stores what its backward needs
/// beyond the input/output values held by the arena.
pub(crate) enum Op<T: Real> {
    Leaf(LeafKind),
    Binary(BinaryKind),
    Unary(UnaryKind<T>),
    Matmul {
        trans_a: bool,
        trans_b: bool,
    },
    /// Sum over `axes` times `scale` (1 for sum, 1/count for mean); `keep_shape` is the
    /// output shape with the reduced axes kept as 1.
    Sum {
        keep_shape: Vec<usize>,
        scale: T,
    },
    BroadcastTo,
    Reshape,
    Permute {
        axes: Vec<usize>,
    },
    Concat {
        axis: usize,
    },
    Slice {
        axis: usize,
        start: usize,
    },
    Embedding {
        ids: ArrayD<usize>,
    },
    GatherPositions {
        pos: Vec<usize>,
    },
    MaskedFill {
        mask: ArrayD<bool>,
    },
    LayerNorm {
        xhat: ArrayD<T>,
        rstd: Vec<T>,
    },
    Softmax,
    LogSoftmax,
    SoftmaxCrossEntropy {
        probs: ArrayD<T>,
        targets: Vec<usize>,
    },
    Mse {
        diff: ArrayD<T>,
    },
    FusedHead {
        op: Box<dyn FusedOp<T>>,
        outputs: Vec<usize>,
    },
    FusedOutput,
}

impl<T: Real> Op<T> {
    /// Gives the arrays the op saved for its backward back to the engine's cache
    /// ([`efa_num::pool`]), as the tape does with its nodes' values (a fused op gives back its
    /// own state when it drops).
    pub(crate) fn give_back(self) {
        use efa_num::pool::{give, give_array};
        match self {
            Op::Embedding { ids } => give_array(ids),
            Op::GatherPositions { pos } => give(pos),
            Op::MaskedFill { mask } => give_array(mask),
            Op::LayerNorm { xhat, rstd } => {
                give_array(xhat);
                give(rstd);
            }
            Op::SoftmaxCrossEntropy { probs, targets } => {
                give_array(probs);
                give(targets);
            }
            Op::Mse { diff } => give_array(diff),
            _ => {}
        }
    }

    /// Short name for dumps and errors.
    pub(crate) fn name(&self) -> String {
        match self {
            Op::Leaf(LeafKind::Param) => "param".into(),
            Op::Leaf(LeafKind::Input) => "input".into(),
            Op::Leaf(LeafKind::Constant) => "constant".into(),
            Op::Binary(k) => k.name().into(),
            Op::Unary(k) => k.name().into(),
            Op::Matmul { trans_a, trans_b } => format!("matmul(tA={trans_a},tB={trans_b})"),
            Op::Sum { .. } => "sum".into(),
            Op::BroadcastTo => "broadcast_to".into(),
            Op::Reshape => "reshape".into(),
            Op::Permute { axes } => format!("permute{axes:?}"),
            Op::Concat { axis } => format!("concat(axis={axis})"),
            Op::Slice { axis, start } => format!("slice(axis={axis},start={start})"),
            Op::Embedding { .. } => "embedding".into(),
            Op::GatherPositions { .. } => "gather_positions".into(),
            Op::MaskedFill { .. } => "masked_fill".into(),
            Op::LayerNorm { .. } => "layer_norm".into(),
            Op::Softmax => "softmax".into(),
            Op::LogSoftmax => "log_softmax".into(),
            Op::SoftmaxCrossEntropy { .. } => "softmax_cross_entropy".into(),
            Op::Mse { .. } => "mse".into(),
            Op::FusedHead { op, .. } => format!("fused:{}", op.name()),
            Op::FusedOutput => "fused_output".into(),
        }
    }
}

/// A fresh boxed copy of a fused op, so that an audit can re-run its forward at perturbed
/// inputs without touching the copy recorded on the tape. Implemented for every
/// `Clone + 'static` [`FusedOp`] by a blanket impl: derive `Clone` on the op's struct.
pub trait CloneFusedOp<T: Real> {
    /// A boxed clone of `self` (with whatever state its last forward saved).
    fn clone_op(&self) -> Box<dyn FusedOp<T>>;
}

impl<T: Real, O: FusedOp<T> + Clone + 'static> CloneFusedOp<T> for O {
    fn clone_op(&self) -> Box<dyn FusedOp<T>> {
        Box::new(self.clone())
    }
}

/// A fused operation (attention, exponential-family nll, …): forward from input values to one
/// or more outputs, and the vector-Jacobian product back to its inputs.
///
/// For outputs `yₘ = Fₘ(x₀, …)` and cotangents `cₘ`, backward returns
/// `∂/∂xᵢ Σₘ ⟨cₘ, Fₘ(x)⟩` for every input `i` that needs it. Ops must be `Clone` (through
/// [`CloneFusedOp`]) so that [`crate::audit::audit_fused`] can check that backward against
/// finite differences of forward.
pub trait FusedOp<T: Real>: Send + Sync + CloneFusedOp<T> {
    /// Name used in errors and dumps.
    fn name(&self) -> &str;

    /// Computes the outputs from the input values (called once by
    /// [`Tape::fused`](crate::Tape::fused)).
    fn forward(&mut self, inputs: &[&ArrayD<T>]) -> Result<Vec<ArrayD<T>>, TapeError>;

    /// Given input values, output values and the cotangent of each output (`None` = that
    /// output unused, i.e. zero), returns one gradient per input, of that input's shape;
    /// `needs_grad[i]` says which inputs need one. Returning `None` for an input that needs a
    /// gradient is an error at backward time (never a silent drop).
    fn backward(
        &self,
        inputs: &[&ArrayD<T>],
        outputs: &[&ArrayD<T>],
        d_outputs: &[Option<&ArrayD<T>>],
        needs_grad: &[bool],
    ) -> Result<Vec<Option<ArrayD<T>>>, TapeError>;

    /// Bytes the op keeps for backward beyond its inputs and outputs (for
    /// [`Tape::dump`](crate::Tape::dump)).
    fn saved_bytes(&self) -> usize {
        0
    }

    /// Floating-point operations of one forward (`backward == false`) or one backward call
    /// on these input values, added to [`crate::stats::flops`] by the tape after each call.
    /// The default counts nothing (elementwise-like ops are not counted).
    fn flops(&self, inputs: &[&ArrayD<T>], backward: bool) -> u64 {
        let _ = (inputs, backward);
        0
    }
}
