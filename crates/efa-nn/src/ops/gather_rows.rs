//! The row kernels of `gather_sum` (see `gather.rs`), on the `efa_num::simd` dispatch:
//! [`gather_rows`] sums picked table rows (and a bias) into output rows, [`sum_rows`] sums
//! picked rows of a cotangent into one table row. Both add element by element in the order a
//! plain loop would (parts in order, then the bias; picked rows in the order given), so every
//! variant gives the bits of that loop: a vector lane is one element's running sum.

use super::gather::NONE;
use efa_num::simd::{prefetch, Isa, SimdVec};
use efa_num::{simd_by_kind, simd_variants, sum, Real};
use rayon::prelude::*;

/// Output rows per task of [`gather_rows`].
const GATHER_ROWS: usize = 2048;

/// One table's contribution to [`gather_rows`]: `table` is `[rows, f]` row-major, `ids` one
/// row per output row ([`NONE`] for none), `segs` the `(chunk, lo, hi, offset)` column
/// segments: table columns `offset..offset + hi − lo` go to columns `lo..hi` of output chunk
/// `chunk`.
pub(crate) struct Source<'a, T> {
    pub table: &'a [T],
    pub f: usize,
    pub ids: &'a [usize],
    pub segs: &'a [(usize, usize, usize, usize)],
}

/// A column interval `lo..hi` of output chunk `chunk` and the table columns summed into it:
/// `terms[t0..t1]` as `(source, table column at lo)`, in source order.
#[derive(Clone, Copy)]
struct Piece {
    chunk: usize,
    lo: usize,
    hi: usize,
    t0: usize,
    t1: usize,
}

/// The output chunk pointers, the sources and the bias of one [`gather_rows`] call, shared by
/// the pool's tasks (each writes its own rows).
struct Shared<T> {
    outs: *const *mut T,
    srcs: *const RawSource<T>,
    bias: *const T,
}

impl<T> Shared<T> {
    /// The same pointers with elements of type `E` (`T` itself, named through the kernels'
    /// element parameter).
    fn cast<E>(&self) -> Shared<E> {
        Shared {
            outs: self.outs.cast(),
            srcs: self.srcs.cast(),
            bias: self.bias.cast(),
        }
    }
}

// SAFETY: the tasks only read through `srcs` and `bias` and write disjoint row ranges of the
// chunks behind `outs`, all of which outlive the parallel loop in `gather_rows`.
unsafe impl<T: Sync> Sync for Shared<T> {}

#[derive(Clone, Copy)]
struct RawSource<E> {
    table: *const E,
    f: usize,
    ids: *const usize,
}

/// The pieces that tile every chunk `0..cw` (cut wherever a source's segment starts or ends)
/// and their terms.
fn pieces<T>(
    srcs: &[Source<'_, T>],
    chunks: usize,
    cw: usize,
) -> (Vec<Piece>, Vec<(usize, usize)>) {
    let (mut out, mut terms) = (Vec::new(), Vec::new());
    for c in 0..chunks {
        let mut cuts = vec![0, cw];
        for s in srcs {
            for &(_, lo, hi, _) in s.segs.iter().filter(|g| g.0 == c) {
                cuts.extend([lo, hi]);
            }
        }
        cuts.sort_unstable();
        cuts.dedup();
        for w in cuts.windows(2) {
            let (lo, hi) = (w[0], w[1]);
            let t0 = terms.len();
            for (p, s) in srcs.iter().enumerate() {
                let seg = s.segs.iter().find(|g| g.0 == c && g.1 <= lo && hi <= g.2);
                if let Some(&(_, slo, _, off)) = seg {
                    terms.push((p, off + lo - slo));
                }
            }
            out.push(Piece {
                chunk: c,
                lo,
                hi,
                t0,
                t1: terms.len(),
            });
        }
    }
    (out, terms)
}

/// Rows `r0..r1` of every output chunk (`cw` columns each): the `npieces` pieces at `pieces`
/// with their terms, summed from the sources and the bias of `sh` (see [`gather_rows`]).
#[inline(always)]
unsafe fn gather_body<V: SimdVec>(
    (r0, r1): (usize, usize),
    cw: usize,
    (pieces, npieces): (*const Piece, usize),
    terms: *const (usize, usize),
    sh: Shared<V::Elem>,
) {
    let Shared { outs, srcs, bias } = sh;
    // SAFETY: the dispatcher's caller (`gather_rows`) guarantees `V`'s instruction set, rows
    // `r0..r1` within `rows`, `npieces` pieces and their terms, one output pointer per chunk
    // with capacity for `rows·cw` elements, and the sources and bias it asserted. So piece `q`
    // (`< npieces`) has `chunk < chunks` and `lo ≤ hi ≤ cw`: the writes `r·cw + lo + j` with
    // `j < hi − lo` stay inside row `r` of the chunk, the bias reads inside `chunks·cw`; each
    // term `(p, col)` names a source and a column with `col + (hi − lo) ≤ f` (its segment
    // covers the piece), so the table reads `id·f + col + j` stay inside row `id` (asserted
    // to fit) and `ids[r]` inside the `rows` ids. Vector accesses cover `j .. j + lanes` only
    // while that is `≤ n = hi − lo`.
    unsafe {
        let lanes = V::LANES;
        let zero = V::splat(V::Elem::ZERO);
        for r in r0..r1 {
            for q in 0..npieces {
                let pc = *pieces.add(q);
                let dst = (*outs.add(pc.chunk)).add(r * cw + pc.lo);
                let b = if bias.is_null() {
                    bias
                } else {
                    bias.add(pc.chunk * cw + pc.lo)
                };
                let n = pc.hi - pc.lo;
                // The sum starts at zero, takes the sources in order, then the bias: the
                // additions of zeroed outputs that each source, then the bias, is added into.
                let mut j = 0;
                // Four independent vectors at a time (the adds of one are a dependency chain).
                while j + 4 * lanes <= n {
                    let mut acc = [zero; 4];
                    for t in pc.t0..pc.t1 {
                        let (p, col) = *terms.add(t);
                        let s = *srcs.add(p);
                        let id = *s.ids.add(r);
                        if id != NONE {
                            let row = s.table.add(id * s.f + col + j);
                            for (k, a) in acc.iter_mut().enumerate() {
                                *a = a.add(V::load(row.add(k * lanes)));
                            }
                        }
                    }
                    for (k, a) in acc.iter_mut().enumerate() {
                        if !b.is_null() {
                            *a = a.add(V::load(b.add(j + k * lanes)));
                        }
                        a.store(dst.add(j + k * lanes));
                    }
                    j += 4 * lanes;
                }
                while j + lanes <= n {
                    let mut acc = zero;
                    for t in pc.t0..pc.t1 {
                        let (p, col) = *terms.add(t);
                        let s = *srcs.add(p);
                        let id = *s.ids.add(r);
                        if id != NONE {
                            acc = acc.add(V::load(s.table.add(id * s.f + col + j)));
                        }
                    }
                    if !b.is_null() {
                        acc = acc.add(V::load(b.add(j)));
                    }
                    acc.store(dst.add(j));
                    j += lanes;
                }
                while j < n {
                    let mut acc = V::Elem::ZERO;
                    for t in pc.t0..pc.t1 {
                        let (p, col) = *terms.add(t);
                        let s = *srcs.add(p);
                        let id = *s.ids.add(r);
                        if id != NONE {
                            acc += *s.table.add(id * s.f + col + j);
                        }
                    }
                    if !b.is_null() {
                        acc += *b.add(j);
                    }
                    *dst.add(j) = acc;
                    j += 1;
                }
            }
        }
    }
}
simd_variants!(gather_body, gather_d, (rows: (usize, usize), cw: usize,
    pieces: (*const Piece, usize), terms: *const (usize, usize), sh: Shared<E>) -> ());

/// The output chunks (`rows × cw` each) of the sources and the bias: element `(r, j)` of
/// chunk `c` is `0`, plus in source order each source's table row `ids[r]` (if not [`NONE`])
/// at the columns its segments map to `j`, plus `bias[c·cw + j]`. The same additions in
/// the same order as adding each source into zeroed chunks, then the bias; every element is
/// written once.
///
/// # Panics
/// If an index, a segment or the bias does not fit (internal invariants: the op checks user
/// inputs before calling).
#[track_caller]
fn gather_rows_kernel<T: Real>(
    isa: Isa,
    chunks: usize,
    rows: usize,
    cw: usize,
    srcs: &[Source<'_, T>],
    bias: Option<&[T]>,
) -> Vec<Vec<T>> {
    for s in srcs {
        assert!(s.ids.len() == rows, "gather_rows: ids");
        assert!(
            s.ids
                .iter()
                .all(|&id| id == NONE || (id + 1) * s.f <= s.table.len()),
            "gather_rows: index"
        );
        assert!(
            s.segs.iter().all(|&(c, lo, hi, off)| c < chunks
                && lo <= hi
                && hi <= cw
                && off + hi - lo <= s.f),
            "gather_rows: segment"
        );
    }
    if let Some(b) = bias {
        assert!(b.len() == chunks * cw, "gather_rows: bias");
    }
    let (pcs, terms) = pieces(srcs, chunks, cw);
    let mut outs: Vec<Vec<T>> = (0..chunks)
        .map(|_| efa_num::pool::take(rows * cw))
        .collect();
    let ptrs: Vec<*mut T> = outs.iter_mut().map(|o| o.as_mut_ptr()).collect();
    let raw: Vec<RawSource<T>> = srcs
        .iter()
        .map(|s| RawSource {
            table: s.table.as_ptr(),
            f: s.f,
            ids: s.ids.as_ptr(),
        })
        .collect();
    let bias = bias.map_or(std::ptr::null(), |b| b.as_ptr());
    // Rows are independent: blocks of them run on the pool (each row's sums unchanged).
    let shared = Shared {
        outs: ptrs.as_ptr(),
        srcs: raw.as_ptr(),
        bias,
    };
    let (pcs, terms) = (&pcs, &terms);
    let run = |t: usize| {
        let sh = &shared;
        let r0 = t * GATHER_ROWS;
        let r1 = (r0 + GATHER_ROWS).min(rows);
        // SAFETY: the asserts keep every table row, segment and bias read inside its
        // slice; the pieces of each chunk tile `0..cw`, so every row writes all `cw`
        // columns of every chunk inside its capacity; the chunks are distinct allocations
        // and the tasks write disjoint row ranges; `ptrs`, `raw` and the bias outlive the
        // loop.
        let () = simd_by_kind!(T, E => unsafe {
            gather_d::<E>(isa, (r0, r1), cw, (pcs.as_ptr(), pcs.len()), terms.as_ptr(),
                sh.cast())
        });
    };
    let tasks = rows.div_ceil(GATHER_ROWS);
    if tasks > 1 {
        (0..tasks).into_par_iter().for_each(run);
    } else {
        (0..tasks).for_each(run);
    }
    for o in &mut outs {
        // SAFETY: every element was written above.
        unsafe { o.set_len(rows * cw) };
    }
    outs
}

/// Rows ahead whose lines [`sum_block`] prefetches (the picked rows are scattered over the
/// cotangent, so each is a likely cache miss).
const AHEAD: usize = 8;

/// Columns `[j, j + (NV − 1)·lanes + last)` of `dst`: `NV` running sums over the picked rows
/// (the last `last ≤ lanes` wide), in one pass over the rows.
#[inline(always)]
unsafe fn sum_block<V: SimdVec, const NV: usize>(
    dst: *mut V::Elem,
    src: *const V::Elem,
    picked: *const usize,
    n: usize,
    stride: usize,
    j: usize,
    last: usize,
) {
    // SAFETY: the caller (`sum_body`) runs this with `V`'s instruction set enabled, `n` picked
    // rows, every `picked[k]·stride + w ≤ src.len()`, `dst` holding `w` elements, and columns
    // `j .. j + width ≤ w` (`width = (NV − 1)·lanes + last`, `1 ≤ last ≤ lanes`). So each row
    // read (whole vectors, and `load_first` with `last < lanes` elements for a partial last
    // one), each prefetch address (the row ahead, `c < width`) and each store to `dst` stays
    // inside its buffer; `picked` is read at `k < n` and `k + AHEAD < n`.
    unsafe {
        let lanes = V::LANES;
        let zero = V::splat(V::Elem::ZERO);
        let width = (NV - 1) * lanes + last;
        let line = (64 / std::mem::size_of::<V::Elem>()).max(1);
        let mut acc = [zero; NV];
        for k in 0..n {
            if k + AHEAD < n {
                let ahead = src.add(*picked.add(k + AHEAD) * stride + j);
                let mut c = 0;
                while c < width {
                    prefetch(ahead.add(c));
                    c += line;
                }
            }
            let row = src.add(*picked.add(k) * stride + j);
            for (i, a) in acc.iter_mut().enumerate() {
                let x = if i + 1 < NV || last == lanes {
                    V::load(row.add(i * lanes))
                } else {
                    V::load_first(row.add(i * lanes), last, V::Elem::ZERO)
                };
                *a = a.add(x);
            }
        }
        for (i, a) in acc.iter().enumerate() {
            if i + 1 < NV || last == lanes {
                a.store(dst.add(j + i * lanes));
            } else {
                a.store_first(dst.add(j + i * lanes), last);
            }
        }
    }
}

#[inline(always)]
unsafe fn sum_body<V: SimdVec>(
    dst: *mut V::Elem,
    w: usize,
    src: *const V::Elem,
    picked: *const usize,
    n: usize,
    stride: usize,
) {
    // SAFETY: the dispatcher's caller (`sum_rows`) guarantees `V`'s instruction set, `dst`
    // holding `w` elements, `n` picked rows with `picked[k]·stride + w ≤ src.len()`. Each pass
    // takes `rem = w − j ≥ 1` columns, `nv = min(⌈rem / lanes⌉, 4)` vectors with
    // `last = min(rem − (nv − 1)·lanes, lanes) ≥ 1`, so its width `(nv − 1)·lanes + last` is at
    // most `rem`: the block's columns end at or before `w`, as `sum_block` needs.
    unsafe {
        let lanes = V::LANES;
        // Up to four vectors of columns per pass over the picked rows (four independent
        // running sums; a row's columns are read together, with the rows ahead prefetched).
        let mut j = 0;
        while j < w {
            let rem = w - j;
            let nv = rem.div_ceil(lanes).min(4);
            let last = (rem - (nv - 1) * lanes).min(lanes);
            match nv {
                1 => sum_block::<V, 1>(dst, src, picked, n, stride, j, last),
                2 => sum_block::<V, 2>(dst, src, picked, n, stride, j, last),
                3 => sum_block::<V, 3>(dst, src, picked, n, stride, j, last),
                _ => sum_block::<V, 4>(dst, src, picked, n, stride, j, last),
            }
            j += (nv - 1) * lanes + last;
        }
    }
}
simd_variants!(sum_body, sum_d, (dst: *mut E, w: usize, src: *const E, picked: *const usize,
    n: usize, stride: usize) -> ());

/// `dst[j] = Σ_k src[picked[k]·stride + j]` for every column `j` of `dst`, the picked rows in
/// the order of [`efa_num::sum`]: blocks of `sum::BLOCK` picks summed from zero in the order
/// of `picked` (in registers), then the block sums' pairwise tree. The tape's `embedding`
/// backward and `linear`'s bias sum in the same order, so the plans agree bit for bit.
///
/// # Panics
/// If a picked row does not fit in `src` (an internal invariant).
#[track_caller]
fn sum_rows_kernel<T: Real>(isa: Isa, dst: &mut [T], src: &[T], picked: &[usize], stride: usize) {
    let w = dst.len();
    assert!(
        picked.iter().all(|&r| r * stride + w <= src.len()),
        "sum_rows: row"
    );
    let block = |dst: &mut [T], picked: &[usize]| {
        // SAFETY: the assert keeps every read inside `src`; `dst` is a unique borrow of `w`.
        let done: () = simd_by_kind!(T, E => unsafe {
            sum_d::<E>(isa, dst.as_mut_ptr().cast(), w, src.as_ptr().cast(), picked.as_ptr(),
                picked.len(), stride)
        });
        done
    };
    if picked.len() <= sum::BLOCK || w == 0 {
        block(dst, picked);
        return;
    }
    let nb = sum::blocks(picked.len());
    let mut buf = efa_num::pool::filled(nb * w, T::ZERO);
    for (acc, picks) in buf.chunks_exact_mut(w).zip(picked.chunks(sum::BLOCK)) {
        block(acc, picks);
    }
    sum::tree(&mut buf, w, nb);
    dst.copy_from_slice(&buf[..w]);
    efa_num::pool::give(buf);
}

efa_num::concrete! {
    /// [`gather_rows_kernel`], compiled in this crate for each element type.
    pub(crate) fn gather_rows<'a, 'b, 'c, T>(
        isa: Isa,
        chunks: usize,
        rows: usize,
        cw: usize,
        srcs: &'a [Source<'b, T>],
        bias: Option<&'c [T]>,
    ) -> Vec<Vec<T>> = gather_rows_kernel;
}

efa_num::concrete! {
    /// [`sum_rows_kernel`], compiled in this crate for each element type.
    pub(crate) fn sum_rows<'a, 'b, 'c, T>(
        isa: Isa,
        dst: &'a mut [T],
        src: &'b [T],
        picked: &'c [usize],
        stride: usize,
    ) = sum_rows_kernel;
}

#[cfg(test)]
mod tests;
