//! `bag_sum`: rows of one table summed per batch row (an embedding bag), as one tape node.

use super::{add_into, NONE};
use efa_num::Real;
use efa_tape::{FusedOp, Tape, TapeError, Var};
use ndarray::{Array2, ArrayD, IxDyn};

/// `bag_sum`: `out[b] = Σ_j w[b, j]·T[ids[b, j]]` over the entries that are not [`NONE`]
/// (`w = 1` without weights), `[B, F]`, as one node: the context sum of the factor models
/// (an embedding bag). Backward: `dT[ids[b, j]] += w[b, j]·dOut[b]` in row-major order; the
/// weights are constants.
#[derive(Clone)]
struct BagSumOp<T> {
    ids: Array2<usize>,
    weights: Option<Array2<T>>,
}

const BAG: &str = "fused:bag_sum";

impl<T: Real> FusedOp<T> for BagSumOp<T> {
    fn name(&self) -> &str {
        "bag_sum"
    }

    fn forward(&mut self, inputs: &[&ArrayD<T>]) -> Result<Vec<ArrayD<T>>, TapeError> {
        let t = inputs[0];
        if t.ndim() != 2 {
            return Err(TapeError::new(
                BAG,
                format!("table must be 2-D, got {:?}", t.shape()),
            ));
        }
        let (r_max, f) = (t.shape()[0], t.shape()[1]);
        let t = t.as_standard_layout();
        let t = t.as_slice().expect("standard layout");
        let (b, n) = self.ids.dim();
        let mut out = efa_num::pool::filled(b * f, T::ZERO);
        for bi in 0..b {
            let dst = &mut out[bi * f..(bi + 1) * f];
            for j in 0..n {
                let id = self.ids[[bi, j]];
                if id == NONE {
                    continue;
                }
                if id >= r_max {
                    return Err(TapeError::new(
                        BAG,
                        format!("index {id} at [{bi}, {j}] outside 0..{r_max}"),
                    ));
                }
                let src = &t[id * f..(id + 1) * f];
                match &self.weights {
                    None => add_into(dst, src),
                    Some(w) => {
                        let w = w[[bi, j]];
                        for (d, &s) in dst.iter_mut().zip(src) {
                            *d += w * s;
                        }
                    }
                }
            }
        }
        Ok(vec![
            ArrayD::from_shape_vec(IxDyn(&[b, f]), out).expect("sizes match")
        ])
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
        let (r_max, f) = (inputs[0].shape()[0], inputs[0].shape()[1]);
        let mut g = efa_num::pool::filled(r_max * f, T::ZERO);
        if let Some(d) = d_outputs[0] {
            let d = d.as_standard_layout();
            let d = d.as_slice().expect("standard layout");
            for ((bi, j), &id) in self.ids.indexed_iter() {
                if id == NONE {
                    continue;
                }
                let src = &d[bi * f..(bi + 1) * f];
                let dst = &mut g[id * f..(id + 1) * f];
                match &self.weights {
                    None => add_into(dst, src),
                    Some(w) => {
                        let w = w[[bi, j]];
                        for (a, &s) in dst.iter_mut().zip(src) {
                            *a += w * s;
                        }
                    }
                }
            }
        }
        Ok(vec![Some(
            ArrayD::from_shape_vec(IxDyn(&[r_max, f]), g).expect("sizes match"),
        )])
    }
}

/// Records [`TapeNn::bag_sum`](crate::TapeNn::bag_sum) (documented there).
pub(crate) fn bag_sum<T: Real>(
    tape: &mut Tape<T>,
    table: Var,
    ids: Array2<usize>,
    weights: Option<Array2<T>>,
) -> Result<Var, TapeError> {
    if weights.as_ref().is_some_and(|w| w.dim() != ids.dim()) {
        return Err(TapeError::new(BAG, "weights must have the shape of ids"));
    }
    Ok(tape.fused(Box::new(BagSumOp { ids, weights }), &[table])?[0])
}
