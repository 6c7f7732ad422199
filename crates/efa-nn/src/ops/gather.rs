//! `gather_sum`: rows of several tables, picked per position by index, summed into column
//! ranges of one `[B, N, width]` output (plus an optional bias), as one tape node.
//!
//! This is the input layer of the EFA models (item ‖ value embeddings plus positions, with
//! padding rows left out) and, on projected tables, the first block's shared projections
//! (see `EfaConfig::forward`). One node replaces a chain of embedding, masked-fill, concat,
//! broadcast and add nodes and their intermediate `[B, N, ·]` arrays.
//!
//! Forward: `out[b, n, col_p .. col_p + F_p] += T_p[ids_p[b, n]]` for every part `p` whose
//! index is not [`NONE`], then `+ bias`; the output is split into `chunks` equal column blocks.
//! Backward: `dT_p[r] = Σ_{(b, n): ids_p[b, n] = r} dOut[b, n, col_p ..]` (scatter-add in
//! row-major order) and `dbias = Σ_{b, n} dOut[b, n]`.

use super::gather_rows::{gather_rows, sum_rows, Source};
use efa_num::{simd, Real};
use efa_tape::{FusedOp, Tape, TapeError, Var};
use ndarray::{Array2, ArrayD, IxDyn};
use rayon::prelude::*;

/// Picked rows from which a table gradient is summed on the pool.
const PARALLEL_PICKS: usize = 4096;

/// An index that contributes nothing at its position (e.g. padding).
pub const NONE: usize = usize::MAX;

/// One table's contribution (a table is `[rows, F]`, or any standard-layout array whose
/// leading axes are flattened into rows): its row index at every position (`[B, N]`, [`NONE`] for none) and
/// the first output column it is added to.
#[derive(Clone, Debug)]
pub struct Part {
    /// Row per position.
    pub ids: Array2<usize>,
    /// First output column.
    pub col: usize,
}

#[derive(Clone)]
struct GatherSumOp {
    parts: Vec<Part>,
    width: usize,
    chunks: usize,
    bias: bool,
}

const NAME: &str = "fused:gather_sum";

impl GatherSumOp {
    /// Table `p` as `[rows, F]`: a 2-D input, or any input with its leading axes flattened.
    fn table<'a, T: Real>(
        &self,
        inputs: &[&'a ArrayD<T>],
        p: usize,
    ) -> Result<ndarray::ArrayView2<'a, T>, TapeError> {
        let x = inputs[p];
        let f = *x.shape().last().unwrap_or(&0);
        if x.ndim() < 2 || !x.is_standard_layout() {
            return Err(TapeError::new(
                NAME,
                format!("table {p} must be at least 2-D, got {:?}", x.shape()),
            ));
        }
        x.view()
            .into_shape_with_order((x.len() / f.max(1), f))
            .map_err(|e| TapeError::new(NAME, format!("table {p}: {e}")))
    }

    /// The output chunks that columns `col..col + width` overlap, as `(chunk, lo, hi,
    /// offset)`: chunk-local columns `lo..hi`, starting at `offset` within the part's row.
    fn segments(&self, col: usize, width: usize) -> Vec<(usize, usize, usize, usize)> {
        let cw = self.width / self.chunks;
        let (start, end) = (col, col + width);
        (start / cw..end.div_ceil(cw).min(self.chunks))
            .filter_map(|c| {
                let (c0, c1) = (c * cw, (c + 1) * cw);
                let (lo, hi) = (start.max(c0), end.min(c1));
                (lo < hi).then(|| (c, lo - c0, hi - c0, lo - start))
            })
            .collect()
    }
}

/// `dst += src` elementwise (equal lengths).
#[inline]
fn add_into<T: Real>(dst: &mut [T], src: &[T]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}

impl<T: Real> FusedOp<T> for GatherSumOp {
    fn name(&self) -> &str {
        "gather_sum"
    }

    fn forward(&mut self, inputs: &[&ArrayD<T>]) -> Result<Vec<ArrayD<T>>, TapeError> {
        let (b, n) = self.parts[0].ids.dim();
        let rows = b * n;
        let cw = self.width / self.chunks;
        // Every part is checked first (the first bad part, then its first bad index).
        let mut parts = Vec::with_capacity(self.parts.len());
        for (p, part) in self.parts.iter().enumerate() {
            let t = self.table(inputs, p)?;
            let (r_max, f) = t.dim();
            if part.ids.dim() != (b, n) || part.col + f > self.width {
                return Err(TapeError::new(
                    NAME,
                    format!(
                        "part {p}: ids {:?} and columns {}..{} do not fit [{b}, {n}, {}]",
                        part.ids.shape(),
                        part.col,
                        part.col + f,
                        self.width
                    ),
                ));
            }
            let ids = part.ids.as_standard_layout();
            let bad = ids.iter().position(|&id| id != NONE && id >= r_max);
            if let Some(r) = bad {
                return Err(TapeError::new(
                    NAME,
                    format!(
                        "table {p}: index {} at [{}, {}] outside 0..{r_max}",
                        ids.as_slice().expect("standard layout")[r],
                        r / n.max(1),
                        r % n.max(1)
                    ),
                ));
            }
            parts.push((t, ids, self.segments(part.col, f), f));
        }
        let bias = if self.bias {
            let bias = inputs[self.parts.len()];
            if bias.shape() != [self.width] {
                return Err(TapeError::new(
                    NAME,
                    format!("bias must be [{}], got {:?}", self.width, bias.shape()),
                ));
            }
            Some(bias.as_slice().expect("1-D standard layout"))
        } else {
            None
        };
        // Row by row: every part in order, then the bias, summed in registers. Each element
        // gets the same sums in the same order as part by part over all rows.
        let srcs: Vec<Source<T>> = parts
            .iter()
            .map(|(t, ids, segs, f)| Source {
                table: t.to_slice().expect("standard layout"),
                f: *f,
                ids: ids.as_slice().expect("standard layout"),
                segs,
            })
            .collect();
        let outs = gather_rows(simd::active(), self.chunks, rows, cw, &srcs, bias);
        Ok(outs
            .into_iter()
            .map(|o| ArrayD::from_shape_vec(IxDyn(&[b, n, cw]), o).expect("sizes match"))
            .collect())
    }

    fn backward(
        &self,
        inputs: &[&ArrayD<T>],
        _outputs: &[&ArrayD<T>],
        d_outputs: &[Option<&ArrayD<T>>],
        needs_grad: &[bool],
    ) -> Result<Vec<Option<ArrayD<T>>>, TapeError> {
        let cw = self.width / self.chunks;
        let d: Vec<Option<ndarray::CowArray<T, IxDyn>>> = d_outputs
            .iter()
            .map(|d| d.map(|d| d.as_standard_layout()))
            .collect();
        let d: Vec<Option<&[T]>> = d
            .iter()
            .map(|d| d.as_ref().map(|d| d.as_slice().expect("standard layout")))
            .collect();
        let mut grads = Vec::with_capacity(inputs.len());
        let isa = simd::active();
        for (p, part) in self.parts.iter().enumerate() {
            if !needs_grad[p] {
                grads.push(None);
                continue;
            }
            let (r_max, f) = self.table(inputs, p)?.dim();
            let mut g = vec![T::ZERO; r_max * f];
            let segs = self.segments(part.col, f);
            let ids = part.ids.as_standard_layout();
            let (start, order) = rows_by_id(ids.as_slice().expect("standard layout"), r_max);
            // Table row `id` sums the positions that picked it in increasing order: the order
            // of a scatter-add over the positions, kept in registers per column block. Rows
            // are independent, so they run on the pool (each row's sums unchanged).
            let sum_row = |(id, dst): (usize, &mut [T])| {
                let picked = &order[start[id]..start[id + 1]];
                if picked.is_empty() {
                    return;
                }
                for &(c, lo, hi, off) in &segs {
                    if let Some(dc) = d[c] {
                        sum_rows(isa, &mut dst[off..off + (hi - lo)], &dc[lo..], picked, cw);
                    }
                }
            };
            // Small gathers stay on the calling thread (the pool's hand-off would cost more).
            if order.len() >= PARALLEL_PICKS {
                g.par_chunks_mut(f.max(1)).enumerate().for_each(sum_row);
            } else {
                g.chunks_mut(f.max(1)).enumerate().for_each(sum_row);
            }
            grads.push(Some(
                ArrayD::from_shape_vec(inputs[p].raw_dim(), g).expect("sizes match"),
            ));
        }
        if self.bias {
            let mut g = vec![T::ZERO; self.width];
            for (c, dc) in d.iter().enumerate() {
                if let Some(dc) = dc {
                    let all: Vec<usize> = (0..dc.len() / cw.max(1)).collect();
                    sum_rows(isa, &mut g[c * cw..(c + 1) * cw], dc, &all, cw);
                }
            }
            grads.push(Some(
                ArrayD::from_shape_vec(IxDyn(&[self.width]), g).expect("sizes match"),
            ));
        }
        Ok(grads)
    }
}

/// The positions of `ids` grouped by table row, each group in increasing order (a stable
/// counting sort; [`NONE`] left out): row `id`'s positions are `order[start[id]..start[id + 1]]`.
fn rows_by_id(ids: &[usize], r_max: usize) -> (Vec<usize>, Vec<usize>) {
    let mut start = vec![0usize; r_max + 1];
    for &id in ids.iter().filter(|&&id| id != NONE) {
        start[id + 1] += 1;
    }
    for i in 0..r_max {
        start[i + 1] += start[i];
    }
    let mut next = start.clone();
    let mut order = vec![0usize; start[r_max]];
    for (r, &id) in ids.iter().enumerate().filter(|&(_, &id)| id != NONE) {
        order[next[id]] = r;
        next[id] += 1;
    }
    (start, order)
}

/// Records [`TapeNn::gather_sum`](crate::TapeNn::gather_sum) (documented there).
pub(crate) fn gather_sum<T: Real>(
    tape: &mut Tape<T>,
    tables: &[Var],
    parts: Vec<Part>,
    bias: Option<Var>,
    width: usize,
    chunks: usize,
) -> Result<Vec<Var>, TapeError> {
    if parts.is_empty()
        || parts.len() != tables.len()
        || chunks == 0
        || !width.is_multiple_of(chunks)
    {
        return Err(TapeError::new(
            NAME,
            format!(
                "{} tables for {} parts, width {width} in {chunks} chunks",
                tables.len(),
                parts.len()
            ),
        ));
    }
    let mut inputs = tables.to_vec();
    inputs.extend(bias);
    tape.fused(
        Box::new(GatherSumOp {
            parts,
            width,
            chunks,
            bias: bias.is_some(),
        }),
        &inputs,
    )
}

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
        let mut out = vec![T::ZERO; b * f];
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
        let mut g = vec![T::ZERO; r_max * f];
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TapeNn;

    fn table(r: usize, f: usize, seed: f64) -> ArrayD<f64> {
        ArrayD::from_shape_fn(IxDyn(&[r, f]), |ix| {
            ((ix[0] * 7 + ix[1] * 3) as f64 * 0.37 + seed).sin()
        })
    }

    #[test]
    fn gather_sum_matches_a_direct_sum_and_passes_the_audit() {
        // Two 2-D parts at different columns, one with NONE entries and repeated rows, a bias,
        // and three output chunks.
        let ids_a = Array2::from_shape_vec((2, 3), vec![1, 0, 1, NONE, 2, 1]).unwrap();
        let ids_b = Array2::from_shape_vec((2, 3), vec![0, 1, 2, 0, NONE, 0]).unwrap();
        let ta = table(3, 4, 0.1);
        let tb = table(3, 6, 0.7);
        let bias = ArrayD::from_shape_fn(IxDyn(&[6]), |ix| ix[0] as f64 * 0.1 - 0.2);
        let parts = vec![
            Part {
                ids: ids_a.clone(),
                col: 2,
            },
            Part {
                ids: ids_b.clone(),
                col: 0,
            },
        ];
        let mut tape = Tape::<f64>::new();
        let a = tape.param("a", ta.clone()).unwrap();
        let b = tape.param("b", tb.clone()).unwrap();
        let c = tape.param("bias", bias.clone()).unwrap();
        let outs = tape
            .gather_sum(&[a, b], parts.clone(), Some(c), 6, 3)
            .unwrap();
        for (k, &o) in outs.iter().enumerate() {
            let v = tape.value(o);
            assert_eq!(v.shape(), [2, 3, 2]);
            for bi in 0..2 {
                for ni in 0..3 {
                    for j in 0..2 {
                        let col = k * 2 + j;
                        let mut want = bias[[col]];
                        if ids_b[[bi, ni]] != NONE {
                            want += tb[[ids_b[[bi, ni]], col]];
                        }
                        if col >= 2 && ids_a[[bi, ni]] != NONE {
                            want += ta[[ids_a[[bi, ni]], col - 2]];
                        }
                        assert!((v[[bi, ni, j]] - want).abs() < 1e-15);
                    }
                }
            }
        }
        efa_testkit::tape::assert_audit(&[("a", ta), ("b", tb), ("bias", bias)], |tape, vars| {
            let outs = tape.gather_sum(&vars[..2], parts.clone(), Some(vars[2]), 6, 3)?;
            // A loss that weights every output element differently.
            let s0 = tape.square(outs[0])?;
            let s1 = tape.scale(outs[1], 1.7)?;
            let s2 = tape.exp(outs[2])?;
            let a = tape.sum_all(s0)?;
            let b = tape.sum_all(s1)?;
            let c = tape.sum_all(s2)?;
            let ab = tape.add(a, b)?;
            tape.add(ab, c)
        });
    }

    /// The op's forward and backward against the plain loops they reorganise (part by part
    /// over all positions, then the bias; a scatter-add in position order): bitwise equal in
    /// f32, with repeated rows, NONE entries, and widths that end in partial vectors.
    #[test]
    fn gather_sum_is_bitwise_the_part_by_part_sum() {
        // More positions than `PARALLEL_PICKS` and than one block of rows (the parallel paths).
        let (b, n, width, chunks) = (70, 80, 90, 3);
        let cw = width / chunks;
        let val = |k: usize| ((k as f32 * 0.618).sin() * 3.0).exp() - 1.5;
        let tab = |r: usize, f: usize, s: usize| {
            ArrayD::from_shape_fn(IxDyn(&[r, f]), |ix| val(ix[0] * f + ix[1] + s))
        };
        let tables = [tab(4, 90, 11), tab(9, 70, 500), tab(3, 20, 900)];
        let cols = [0, 20, 61];
        let parts: Vec<Part> = (0..3)
            .map(|p| Part {
                ids: Array2::from_shape_fn((b, n), |(i, j)| {
                    let k = (i * n + j) * (p + 3) + p;
                    if k % 11 == 4 {
                        NONE
                    } else {
                        k % (tables[p].shape()[0] - usize::from(p == 1))
                    }
                }),
                col: cols[p],
            })
            .collect();
        let bias = ArrayD::from_shape_fn(IxDyn(&[width]), |ix| val(ix[0] + 2000));
        let mut op = GatherSumOp {
            parts: parts.clone(),
            width,
            chunks,
            bias: true,
        };
        let inputs = [&tables[0], &tables[1], &tables[2], &bias];
        let outs = FusedOp::<f32>::forward(&mut op, &inputs).unwrap();
        // Reference forward.
        let mut want = vec![0.0f32; b * n * width];
        for (p, part) in parts.iter().enumerate() {
            let f = tables[p].shape()[1];
            for (r, &id) in part.ids.iter().enumerate() {
                if id != NONE {
                    for c in 0..f {
                        want[r * width + part.col + c] += tables[p][[id, c]];
                    }
                }
            }
        }
        for row in want.chunks_mut(width) {
            for (x, &v) in row.iter_mut().zip(bias.iter()) {
                *x += v;
            }
        }
        for (c, o) in outs.iter().enumerate() {
            for (r, row) in o.as_slice().unwrap().chunks(cw).enumerate() {
                for (j, &x) in row.iter().enumerate() {
                    assert_eq!(x.to_bits(), want[r * width + c * cw + j].to_bits());
                }
            }
        }
        // Reference backward (chunk 1 without a cotangent).
        let d: Vec<ArrayD<f32>> = (0..chunks)
            .map(|c| {
                ArrayD::from_shape_fn(IxDyn(&[b, n, cw]), |ix| {
                    val(ix[1] * 31 + ix[2] + ix[0] * 977 + c * 7)
                })
            })
            .collect();
        let d_out = [Some(&d[0]), None, Some(&d[2])];
        let outs_ref: Vec<&ArrayD<f32>> = outs.iter().collect();
        let g = FusedOp::<f32>::backward(&op, &inputs, &outs_ref, &d_out, &[true; 4]).unwrap();
        let dfull = |r: usize, col: usize| {
            d_out[col / cw].map(|d| d.as_slice().unwrap()[r * cw + col % cw])
        };
        for (p, part) in parts.iter().enumerate() {
            let f = tables[p].shape()[1];
            let mut want = vec![0.0f32; tables[p].len()];
            for (r, &id) in part.ids.iter().enumerate() {
                if id != NONE {
                    for c in 0..f {
                        if let Some(x) = dfull(r, part.col + c) {
                            want[id * f + c] += x;
                        }
                    }
                }
            }
            let got = g[p].as_ref().unwrap();
            for (x, w) in got.iter().zip(&want) {
                assert_eq!(x.to_bits(), w.to_bits(), "part {p}");
            }
        }
        let mut want = vec![0.0f32; width];
        for r in 0..b * n {
            for (col, w) in want.iter_mut().enumerate() {
                if let Some(x) = dfull(r, col) {
                    *w += x;
                }
            }
        }
        for (x, w) in g[3].as_ref().unwrap().iter().zip(&want) {
            assert_eq!(x.to_bits(), w.to_bits(), "bias");
        }
    }

    #[test]
    fn out_of_range_rows_are_errors_naming_the_position() {
        let mut tape = Tape::<f64>::new();
        let a = tape.param("a", table(3, 2, 0.0)).unwrap();
        let ids = Array2::from_shape_vec((1, 2), vec![0, 3]).unwrap();
        let e = tape
            .gather_sum(&[a], vec![Part { ids, col: 0 }], None, 2, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("index 3 at [0, 1] outside 0..3"), "{e}");
        // A 1-D table, a bias of the wrong width, and a part that overflows the output.
        let v = tape.param("v", ArrayD::zeros(IxDyn(&[3]))).unwrap();
        let one = Array2::from_shape_vec((1, 1), vec![0]).unwrap();
        let part = |col| {
            vec![Part {
                ids: one.clone(),
                col,
            }]
        };
        let e = tape
            .gather_sum(&[v], part(0), None, 1, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("table 0 must be at least 2-D, got [3]"), "{e}");
        let bias = tape.param("bias", ArrayD::zeros(IxDyn(&[3]))).unwrap();
        let e = tape
            .gather_sum(&[a], part(0), Some(bias), 2, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bias must be [2], got [3]"), "{e}");
        let e = tape
            .gather_sum(&[a], part(1), None, 2, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("columns 1..3 do not fit [1, 1, 2]"), "{e}");
        // bag_sum: an out-of-range row and weights of the wrong shape.
        let ids = Array2::from_shape_vec((1, 2), vec![1, 5]).unwrap();
        let e = tape.bag_sum(a, ids.clone(), None).unwrap_err().to_string();
        assert!(e.contains("index 5 at [0, 1] outside 0..3"), "{e}");
        let e = tape
            .bag_sum(a, ids, Some(Array2::zeros((2, 2))))
            .unwrap_err()
            .to_string();
        assert!(e.contains("weights must have the shape of ids"), "{e}");
    }

    #[test]
    fn bag_sum_matches_a_direct_sum_and_passes_the_audit() {
        let ids =
            Array2::from_shape_vec((3, 3), vec![1, 2, 1, NONE, 0, NONE, NONE, NONE, NONE]).unwrap();
        let w = Array2::from_shape_fn((3, 3), |(i, j)| (i * 3 + j) as f64 * 0.3 - 0.5);
        let t = table(3, 4, 0.3);
        for weights in [None, Some(w.clone())] {
            let mut tape = Tape::<f64>::new();
            let tv = tape.param("t", t.clone()).unwrap();
            let out = tape.bag_sum(tv, ids.clone(), weights.clone()).unwrap();
            let v = tape.value(out);
            assert_eq!(v.shape(), [3, 4]);
            for b in 0..3 {
                for c in 0..4 {
                    let want: f64 = (0..3)
                        .filter(|&j| ids[[b, j]] != NONE)
                        .map(|j| weights.as_ref().map_or(1.0, |w| w[[b, j]]) * t[[ids[[b, j]], c]])
                        .sum();
                    assert!((v[[b, c]] - want).abs() < 1e-15);
                }
            }
            efa_testkit::tape::assert_audit(&[("t", t.clone())], |tape, v| {
                let o = tape.bag_sum(v[0], ids.clone(), weights.clone())?;
                let o = tape.square(o)?;
                tape.sum_all(o)
            });
        }
    }
}
