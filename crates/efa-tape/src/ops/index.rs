//! Indexing ops: `embedding` (row lookup), `gather_positions` (one position per batch row)
//! and `masked_fill`. Backward scatters (adds) the cotangent back to the rows it was read from.

use crate::error::{Result, TapeError};
use crate::op::Op;
use crate::tape::{Tape, Var};
use efa_num::Real;
use ndarray::{ArrayD, Dimension, IxDyn};

impl<T: Real> Tape<T> {
    /// `y[s, :] = table[ids[s], :]` for a table `[V, D]` and ids of any shape `S`; output
    /// `S ++ [D]`. An id `≥ V` is an error naming its position and value.
    pub fn embedding(&mut self, table: Var, ids: &ArrayD<usize>) -> Result<Var> {
        let it = self.check(table, "embedding")?;
        let tab = self.val(it);
        if tab.ndim() != 2 {
            return Err(TapeError::new(
                "embedding",
                format!("table must be [V, D], got {:?}", tab.shape()),
            ));
        }
        let (v, d) = (tab.shape()[0], tab.shape()[1]);
        if let Some((pos, &id)) = ids.indexed_iter().find(|(_, &id)| id >= v) {
            return Err(TapeError::new(
                "embedding",
                format!(
                    "id {id} at position {:?} of ids {:?} is out of range for table {:?}",
                    pos.slice(),
                    ids.shape(),
                    tab.shape()
                ),
            ));
        }
        let mut shape = ids.shape().to_vec();
        shape.push(d);
        let mut y = efa_num::pool::full(IxDyn(&shape), T::ZERO);
        for (k, &id) in ids.iter().enumerate() {
            let row = &tab.as_slice().expect("standard layout")[id * d..(id + 1) * d];
            y.as_slice_mut().expect("fresh array")[k * d..(k + 1) * d].copy_from_slice(row);
        }
        let ids = ids.as_standard_layout().into_owned();
        Ok(self.push(Op::Embedding { ids }, vec![it], y))
    }

    /// `y[b, :] = x[b, pos[b], :]` for `x` of shape `[B, N, D]` and `pos.len() = B`, each
    /// `pos[b] < N`; output `[B, D]`.
    pub fn gather_positions(&mut self, x: Var, pos: &[usize]) -> Result<Var> {
        let ix = self.check(x, "gather_positions")?;
        let xv = self.val(ix);
        if xv.ndim() != 3 || xv.shape()[0] != pos.len() {
            return Err(TapeError::new(
                "gather_positions",
                format!(
                    "x must be [B, N, D] with B = {} positions, got {:?}",
                    pos.len(),
                    xv.shape()
                ),
            ));
        }
        let n = xv.shape()[1];
        if let Some((b, &p)) = pos.iter().enumerate().find(|(_, &p)| p >= n) {
            return Err(TapeError::new(
                "gather_positions",
                format!(
                    "pos[{b}] = {p} is out of range for x {:?} (N = {n})",
                    xv.shape()
                ),
            ));
        }
        // Whole rows copied from the standard layout, written in output order.
        let d = xv.shape()[2];
        let src = xv.as_standard_layout();
        let src = src.as_slice().expect("standard layout");
        let mut out = Vec::with_capacity(pos.len() * d);
        for (b, &p) in pos.iter().enumerate() {
            let from = (b * n + p) * d;
            out.extend_from_slice(&src[from..from + d]);
        }
        let y = ArrayD::from_shape_vec(IxDyn(&[pos.len(), d]), out).expect("B·D values");
        Ok(self.push(Op::GatherPositions { pos: pos.to_vec() }, vec![ix], y))
    }

    /// `y = value` where `mask` (broadcast to `a`'s shape) is true, `a` elsewhere.
    pub fn masked_fill(&mut self, a: Var, mask: &ArrayD<bool>, value: T) -> Result<Var> {
        let ia = self.check(a, "masked_fill")?;
        let x = self.val(ia);
        let Some(m) = mask.broadcast(x.raw_dim()) else {
            return Err(TapeError::new(
                "masked_fill",
                format!(
                    "mask {:?} does not broadcast to {:?}",
                    mask.shape(),
                    x.shape()
                ),
            ));
        };
        let y = efa_num::pool::zip_map(x.view(), m.view(), |&x, &m| if m { value } else { x });
        let mask = m.to_owned();
        Ok(self.push(Op::MaskedFill { mask }, vec![ia], y))
    }
}

/// forward read `table[ids[s]]` into output row `s`, so `∂/∂table[v]` is the sum of `g`'s
/// rows over every `s` with `ids[s] = v` (repeated ids accumulate), in increasing `s` and
/// the order of [`efa_num::sum`] (blocks of positions from zero, then a pairwise tree).
pub(crate) fn embedding_backward<T: Real>(
    g: &ArrayD<T>,
    ids: &ArrayD<usize>,
    table_shape: &[usize],
) -> ArrayD<T> {
    let (rows, d) = (table_shape[0], table_shape[1]);
    let g = g.as_standard_layout();
    let gs = g.as_slice().expect("standard layout");
    let mut gt = efa_num::pool::full(IxDyn(table_shape), T::ZERO);
    let gts = gt.as_slice_mut().expect("fresh array");
    // The positions of each id in increasing order (pool buffers: a batch's ids can be
    // large, and training steps reuse them).
    let ids = ids.as_standard_layout();
    let ids = ids.as_slice().expect("standard layout");
    let by_id = efa_num::sum::ById::new(ids.len(), rows, |k| Some(ids[k]));
    if d > 0 {
        for (id, dst) in gts.chunks_exact_mut(d).enumerate() {
            let picked = by_id.group(id);
            efa_num::sum::terms_into(dst, picked.len(), |i, acc| {
                let k = picked[i];
                for (a, &v) in acc.iter_mut().zip(&gs[k * d..(k + 1) * d]) {
                    *a += v;
                }
            });
        }
    }
    gt
}

/// forward read `x[b, pos[b], :]`, so `∂/∂x[b, pos[b], :] = g[b, :]` and 0 elsewhere.
pub(crate) fn gather_backward<T: Real>(
    g: &ArrayD<T>,
    pos: &[usize],
    x_shape: &[usize],
) -> ArrayD<T> {
    let (n, d) = (x_shape[1], x_shape[2]);
    let mut gx = efa_num::pool::full(IxDyn(x_shape), T::ZERO);
    let dst = gx.as_slice_mut().expect("fresh array");
    let g = g.as_standard_layout();
    let g = g.as_slice().expect("standard layout");
    for (b, &p) in pos.iter().enumerate() {
        let to = (b * n + p) * d;
        dst[to..to + d].copy_from_slice(&g[b * d..(b + 1) * d]);
    }
    gx
}

/// forward replaced masked entries by a constant, so they get zero gradient; others get `g`.
pub(crate) fn masked_fill_backward<T: Real>(g: &ArrayD<T>, mask: &ArrayD<bool>) -> ArrayD<T> {
    efa_num::pool::zip_map(g.view(), mask.view(), |&g, &m| if m { T::ZERO } else { g })
}

#[cfg(test)]
mod tests {
    use crate::testutil::{assert_audit, rand_array};
    use crate::Tape;
    use ndarray::{array, ArrayD, IxDyn};

    #[test]
    fn embedding_forward_and_repeated_ids_accumulate() {
        let mut t = Tape::<f64>::new();
        let tab = t
            .param("tab", array![[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]].into_dyn())
            .unwrap();
        let ids = array![[2, 0], [2, 2]].into_dyn();
        let e = t.embedding(tab, &ids).unwrap();
        assert_eq!(t.shape(e), &[2, 2, 2]);
        assert_eq!(t.value(e)[[1, 0, 1]], 6.0);
        assert_eq!(t.value(e)[[0, 1, 0]], 1.0);
        let w = t.constant(array![1.0, 10.0].into_dyn());
        let p = t.mul(e, w).unwrap();
        let s = t.sum_all(p).unwrap();
        let g = t.backward(s).unwrap();
        // id 2 appears 3 times, id 0 once, id 1 never.
        assert_eq!(
            g.param("tab").unwrap(),
            &array![[1.0, 10.0], [0.0, 0.0], [3.0, 30.0]].into_dyn()
        );
    }

    #[test]
    fn audits() {
        let tab = rand_array(&[5, 3], 1, -1.0, 1.0);
        let ids = array![[4, 1, 4], [0, 4, 2]].into_dyn();
        assert_audit(&[("tab", tab.clone())], move |t, v| {
            let e = t.embedding(v[0], &ids)?;
            let s = t.square(e)?;
            let s = t.mul(s, e)?;
            t.sum_all(s)
        });
        let empty_ids = ArrayD::<usize>::zeros(IxDyn(&[0, 2]));
        assert_audit(&[("tab", tab)], move |t, v| {
            let e = t.embedding(v[0], &empty_ids)?;
            let s = t.sum_all(e)?;
            let w = t.square(v[0])?;
            let w = t.sum_all(w)?;
            t.add(s, w)
        });
        let x = rand_array(&[3, 4, 2], 2, -1.0, 1.0);
        assert_audit(&[("x", x)], |t, v| {
            let y = t.gather_positions(v[0], &[3, 0, 3])?;
            let y = t.tanh(y)?;
            let y = t.square(y)?;
            t.sum_all(y)
        });
        let x = rand_array(&[2, 3], 3, -1.0, 1.0);
        let mask = array![[true, false, false]].into_dyn();
        assert_audit(&[("x", x)], move |t, v| {
            let y = t.masked_fill(v[0], &mask, -5.0)?;
            let y = t.softmax(y)?;
            let y = t.square(y)?;
            t.sum_all(y)
        });
    }

    #[test]
    fn masked_fill_values_and_zero_grad() {
        let mut t = Tape::<f64>::new();
        let x = t.input(array![[1.0, 2.0], [3.0, 4.0]].into_dyn());
        let m = array![false, true].into_dyn();
        let y = t.masked_fill(x, &m, f64::NEG_INFINITY).unwrap();
        assert_eq!(
            t.value(y),
            &array![[1.0, f64::NEG_INFINITY], [3.0, f64::NEG_INFINITY]].into_dyn()
        );
        let z = t.masked_fill(x, &m, 0.0).unwrap();
        let s = t.sum_all(z).unwrap();
        let g = t.backward(s).unwrap();
        assert_eq!(
            g.wrt(x).unwrap(),
            &array![[1.0, 0.0], [1.0, 0.0]].into_dyn()
        );
        let bad = array![true, false, true].into_dyn();
        assert!(t
            .masked_fill(x, &bad, 0.0)
            .unwrap_err()
            .to_string()
            .contains("[3]"));
    }

    /// Values and gradients element by element from the definition, with an input and a
    /// cotangent that are not in standard layout (transposed), repeated positions, the last
    /// position and rows of width 0.
    #[test]
    fn gather_positions_matches_the_definition_on_any_layout() {
        for (b, n, d) in [(3, 4, 5), (2, 1, 3), (2, 3, 0)] {
            let pos: Vec<usize> = (0..b).map(|i| (i * 7 + 3) % n).collect();
            // x[i, j, k] stored as the transpose of a [D, N, B] array.
            let src = rand_array(&[d, n, b], 11, -2.0, 2.0);
            let x = src.clone().reversed_axes();
            assert!(d == 0 || !x.is_standard_layout());
            let mut t = Tape::<f64>::new();
            let xv = t.param("x", x.clone()).unwrap();
            let y = t.gather_positions(xv, &pos).unwrap();
            assert_eq!(t.value(y).shape(), &[b, d]);
            for i in 0..b {
                for k in 0..d {
                    assert_eq!(t.value(y)[[i, k]], x[[i, pos[i], k]], "y[{i}, {k}]");
                }
            }
            // Cotangent [B, D] given as the transpose of a [D, B] array.
            let cot = rand_array(&[d, b], 12, -1.0, 1.0).reversed_axes();
            let g = t.backward_with(y, cot.clone()).unwrap();
            let gx = g.wrt(xv).unwrap();
            for i in 0..b {
                for j in 0..n {
                    for k in 0..d {
                        let want = if pos[i] == j { cot[[i, k]] } else { 0.0 };
                        assert_eq!(gx[[i, j, k]], want, "gx[{i}, {j}, {k}]");
                    }
                }
            }
        }
    }

    #[test]
    fn out_of_range_ids_and_positions_are_errors_with_index() {
        let mut t = Tape::<f64>::new();
        let tab = t.constant(ArrayD::zeros(IxDyn(&[4, 2])));
        let e = t
            .embedding(tab, &array![[0, 1], [7, 2]].into_dyn())
            .unwrap_err();
        assert!(e.to_string().contains("id 7 at position [1, 0]"), "{e}");
        let x = t.constant(ArrayD::zeros(IxDyn(&[2, 3, 1])));
        let e = t.gather_positions(x, &[0, 3]).unwrap_err();
        assert!(e.to_string().contains("pos[1] = 3"), "{e}");
        assert!(t.gather_positions(x, &[0]).is_err());
        assert!(t.embedding(x, &array![0].into_dyn()).is_err());
    }
}
