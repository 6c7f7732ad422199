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
use efa_num::sum::ById;
use efa_num::{simd, Real};
use efa_tape::{FusedOp, Tape, TapeError, Var};
use ndarray::{Array2, ArrayD, IxDyn};
use rayon::prelude::*;

mod bag;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_precision;

pub(crate) use bag::bag_sum;

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

/// The index arrays go back to the thread's cache ([`efa_num::pool`]).
impl Drop for GatherSumOp {
    fn drop(&mut self) {
        for p in self.parts.drain(..) {
            efa_num::pool::give_array(p.ids);
        }
    }
}

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
            let mut g = efa_num::pool::filled(r_max * f, T::ZERO);
            let segs = self.segments(part.col, f);
            let ids = part.ids.as_standard_layout();
            let ids = ids.as_slice().expect("standard layout");
            let by_id = ById::new(ids.len(), r_max, |k| (ids[k] != NONE).then_some(ids[k]));
            // Table row `id` sums the positions that picked it in increasing order: the order
            // of a scatter-add over the positions, kept in registers per column block. Rows
            // are independent, so they run on the pool (each row's sums unchanged).
            let sum_row = |(id, dst): (usize, &mut [T])| {
                let picked = by_id.group(id);
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
            if by_id.len() >= PARALLEL_PICKS {
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
                    let rows = dc.len() / cw.max(1);
                    let all = efa_num::pool::collect(rows, 0..rows);
                    sum_rows(isa, &mut g[c * cw..(c + 1) * cw], dc, &all, cw);
                    efa_num::pool::give(all);
                }
            }
            grads.push(Some(
                ArrayD::from_shape_vec(IxDyn(&[self.width]), g).expect("sizes match"),
            ));
        }
        Ok(grads)
    }
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
