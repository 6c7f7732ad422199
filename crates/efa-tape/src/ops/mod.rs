//! Primitive operations, one family per module, the [`fused`] mechanism behind
//! [`crate::FusedOp`], and the backward dispatch.

pub mod elementwise;
pub mod fused;
pub mod index;
pub mod layer_norm;
pub mod loss;
pub mod matmul;
pub mod reduce;
pub mod shape;
pub mod softmax;
pub mod unary;

use crate::broadcast::sum_to_shape;
use crate::op::{Op, UnaryKind};
use crate::tape::Tape;
use efa_num::Real;
use ndarray::ArrayD;

/// Vector-Jacobian products of node `i` for cotangent `g`: one entry per input (`None` = no
/// contribution). `need[k]` says whether input `k` needs a gradient.
pub(crate) fn vjp<T: Real>(
    tape: &Tape<T>,
    i: usize,
    g: &ArrayD<T>,
    need: &[bool],
) -> Vec<Option<ArrayD<T>>> {
    let node = &tape.nodes[i];
    let x = |k: usize| tape.val(node.inputs[k]);
    let y = &node.value;
    match &node.op {
        Op::Leaf(_) | Op::FusedOutput => vec![None; node.inputs.len()],
        Op::FusedHead { .. } => unreachable!("fused heads are handled by the sweep"),
        Op::Binary(k) => elementwise::backward(*k, x(0), x(1), g, need),
        Op::Unary(k) => match (k, tape.relu_kink_band) {
            (UnaryKind::Relu, Some(band)) => {
                vec![Some(unary::relu_backward_flipped(x(0), g, band))]
            }
            _ => vec![Some(unary::backward(*k, x(0), y, g))],
        },
        Op::Matmul { trans_a, trans_b } => {
            matmul::backward(x(0), x(1), *trans_a, *trans_b, g, need)
        }
        Op::Sum { keep_shape, scale } => {
            vec![Some(reduce::backward(x(0).shape(), keep_shape, *scale, g))]
        }
        Op::BroadcastTo => vec![Some(sum_to_shape(
            efa_num::pool::map(g.view(), |&v| v),
            x(0).shape(),
        ))],
        Op::Reshape => vec![Some(shape::reshape_backward(g, x(0).shape()))],
        Op::Permute { axes } => vec![Some(shape::permute_backward(g, axes))],
        Op::Concat { axis } => {
            let shapes: Vec<&[usize]> = (0..node.inputs.len()).map(|k| x(k).shape()).collect();
            shape::concat_backward(g, *axis, &shapes)
        }
        Op::Slice { axis, start } => {
            vec![Some(shape::slice_backward(g, x(0).shape(), *axis, *start))]
        }
        Op::Embedding { ids } => vec![Some(index::embedding_backward(g, ids, x(0).shape()))],
        Op::GatherPositions { pos } => vec![Some(index::gather_backward(g, pos, x(0).shape()))],
        Op::MaskedFill { mask } => vec![Some(index::masked_fill_backward(g, mask))],
        Op::LayerNorm { xhat, rstd } => layer_norm::backward(g, xhat, rstd, x(1), need),
        Op::Softmax => vec![Some(softmax::softmax_backward(y, g))],
        Op::LogSoftmax => vec![Some(softmax::log_softmax_backward(y, g))],
        Op::SoftmaxCrossEntropy { probs, targets } => {
            vec![Some(loss::cross_entropy_backward(g, probs, targets))]
        }
        Op::Mse { diff } => vec![Some(loss::mse_backward(g, diff))],
    }
}
