//! The row kernels of `gather_sum` (see `gather.rs`), on the `efa_num::simd` dispatch:
//! [`gather_rows`] adds picked table rows (and a bias) into output rows, [`sum_rows`] sums
//! picked rows of a cotangent into one table row. Both add element by element in the order a
//! plain loop would (parts in order, then the bias; picked rows in the order given), so every
//! variant gives the bits of that loop: a vector lane is one element's running sum.

use super::gather::NONE;
use efa_num::simd::{Isa, SimdVec};
use efa_num::{simd_by_kind, simd_variants, Real};

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

#[derive(Clone, Copy)]
struct RawSource<E> {
    table: *const E,
    f: usize,
    ids: *const usize,
    segs: *const (usize, usize, usize, usize),
    nsegs: usize,
}

/// `dst[..n] += src[..n]`, whole vectors then scalars.
#[inline(always)]
unsafe fn add_row<V: SimdVec>(dst: *mut V::Elem, src: *const V::Elem, n: usize) {
    unsafe {
        let w = V::LANES;
        let mut i = 0;
        while i + w <= n {
            V::load(dst.add(i))
                .add(V::load(src.add(i)))
                .store(dst.add(i));
            i += w;
        }
        while i < n {
            *dst.add(i) = *dst.add(i) + *src.add(i);
            i += 1;
        }
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn gather_body<V: SimdVec>(
    rows: usize,
    cw: usize,
    outs: *const *mut V::Elem,
    chunks: usize,
    srcs: *const RawSource<V::Elem>,
    nsrc: usize,
    bias: *const V::Elem,
) {
    unsafe {
        for r in 0..rows {
            for p in 0..nsrc {
                let s = *srcs.add(p);
                let id = *s.ids.add(r);
                if id == NONE {
                    continue;
                }
                let row = s.table.add(id * s.f);
                for q in 0..s.nsegs {
                    let (c, lo, hi, off) = *s.segs.add(q);
                    add_row::<V>((*outs.add(c)).add(r * cw + lo), row.add(off), hi - lo);
                }
            }
            if !bias.is_null() {
                for c in 0..chunks {
                    add_row::<V>((*outs.add(c)).add(r * cw), bias.add(c * cw), cw);
                }
            }
        }
    }
}
simd_variants!(gather_body, gather_d, (rows: usize, cw: usize, outs: *const *mut E, chunks: usize,
    srcs: *const RawSource<E>, nsrc: usize, bias: *const E) -> ());

/// For every output row `r` in order: each source in order adds its table row `ids[r]` (if
/// not [`NONE`]) into its column segments of the chunks `outs` (`rows × cw` each), then the
/// bias (`chunks · cw`, chunk `c` from `bias[c·cw..]`) is added to every chunk.
///
/// # Panics
/// If a chunk, an index, a segment or the bias does not fit (internal invariants: the op
/// checks user inputs before calling).
#[track_caller]
pub(crate) fn gather_rows<T: Real>(
    isa: Isa,
    outs: &mut [Vec<T>],
    rows: usize,
    cw: usize,
    srcs: &[Source<'_, T>],
    bias: Option<&[T]>,
) {
    let chunks = outs.len();
    assert!(
        outs.iter().all(|o| o.len() == rows * cw),
        "gather_rows: chunks"
    );
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
    let ptrs: Vec<*mut T> = outs.iter_mut().map(|o| o.as_mut_ptr()).collect();
    let raw: Vec<RawSource<T>> = srcs
        .iter()
        .map(|s| RawSource {
            table: s.table.as_ptr(),
            f: s.f,
            ids: s.ids.as_ptr(),
            segs: s.segs.as_ptr(),
            nsegs: s.segs.len(),
        })
        .collect();
    let bias = bias.map_or(std::ptr::null(), |b| b.as_ptr());
    // SAFETY: the asserts keep every row, segment and bias read inside its slice and every
    // write inside its chunk; the chunks are distinct vectors, not aliasing the inputs.
    simd_by_kind!(T, E => unsafe {
        gather_d::<E>(isa, rows, cw, ptrs.as_ptr().cast(), chunks, raw.as_ptr().cast(),
            raw.len(), bias.cast())
    })
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
    unsafe {
        let lanes = V::LANES;
        let zero = V::splat(V::Elem::ZERO);
        let mut j = 0;
        while j + 2 * lanes <= w {
            let (mut a0, mut a1) = (zero, zero);
            for k in 0..n {
                let row = src.add(*picked.add(k) * stride + j);
                a0 = a0.add(V::load(row));
                a1 = a1.add(V::load(row.add(lanes)));
            }
            a0.store(dst.add(j));
            a1.store(dst.add(j + lanes));
            j += 2 * lanes;
        }
        while j + lanes <= w {
            let mut a0 = zero;
            for k in 0..n {
                a0 = a0.add(V::load(src.add(*picked.add(k) * stride + j)));
            }
            a0.store(dst.add(j));
            j += lanes;
        }
        while j < w {
            let mut a = V::Elem::ZERO;
            for k in 0..n {
                a += *src.add(*picked.add(k) * stride + j);
            }
            *dst.add(j) = a;
            j += 1;
        }
    }
}
simd_variants!(sum_body, sum_d, (dst: *mut E, w: usize, src: *const E, picked: *const usize,
    n: usize, stride: usize) -> ());

/// `dst[j] = 0 + Σ_k src[picked[k]·stride + j]` for every column `j` of `dst`, summed in the
/// order of `picked`.
///
/// # Panics
/// If a picked row does not fit in `src` (an internal invariant).
#[track_caller]
pub(crate) fn sum_rows<T: Real>(
    isa: Isa,
    dst: &mut [T],
    src: &[T],
    picked: &[usize],
    stride: usize,
) {
    let w = dst.len();
    assert!(
        picked.iter().all(|&r| r * stride + w <= src.len()),
        "sum_rows: row"
    );
    // SAFETY: the assert keeps every read inside `src`; `dst` is a unique borrow.
    simd_by_kind!(T, E => unsafe {
        sum_d::<E>(isa, dst.as_mut_ptr().cast(), w, src.as_ptr().cast(), picked.as_ptr(),
            picked.len(), stride)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variants() -> Vec<Isa> {
        [Isa::Scalar, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter(|i| i.is_supported())
            .collect()
    }

    fn val(k: usize) -> f32 {
        ((k as f32 * 0.618).sin() * 4.0).exp() - 2.0
    }

    /// Every variant against the plain loops, bitwise: three sources with repeated and NONE
    /// rows over segments that start mid-chunk and end in a partial vector, and a bias.
    #[test]
    fn gather_rows_every_variant_is_the_plain_loop() {
        let (rows, cw, chunks) = (13, 37, 3);
        let tables: Vec<Vec<f32>> = [(5, 111), (4, 50), (7, 9)]
            .iter()
            .map(|&(r, f)| (0..r * f).map(|k| val(k + 31 * f)).collect())
            .collect();
        let fs = [111, 50, 9];
        let segs: Vec<Vec<(usize, usize, usize, usize)>> = vec![
            vec![(0, 0, 37, 0), (1, 0, 37, 37), (2, 0, 37, 74)],
            vec![(0, 20, 37, 0), (1, 0, 33, 17)],
            vec![(2, 3, 12, 0)],
        ];
        let ids: Vec<Vec<usize>> = (0..3)
            .map(|p| {
                (0..rows)
                    .map(|r| match (r * (p + 2) + p) % 9 {
                        8 => NONE,
                        k => k % (tables[p].len() / fs[p]),
                    })
                    .collect()
            })
            .collect();
        let bias: Vec<f32> = (0..chunks * cw).map(|k| val(k + 7000)).collect();
        let mut want = vec![vec![0.0f32; rows * cw]; chunks];
        for r in 0..rows {
            for p in 0..3 {
                if ids[p][r] == NONE {
                    continue;
                }
                for &(c, lo, hi, off) in &segs[p] {
                    for j in lo..hi {
                        want[c][r * cw + j] += tables[p][ids[p][r] * fs[p] + off + j - lo];
                    }
                }
            }
            for c in 0..chunks {
                for j in 0..cw {
                    want[c][r * cw + j] += bias[c * cw + j];
                }
            }
        }
        for isa in variants() {
            let srcs: Vec<Source<f32>> = (0..3)
                .map(|p| Source {
                    table: &tables[p],
                    f: fs[p],
                    ids: &ids[p],
                    segs: &segs[p],
                })
                .collect();
            let mut outs = vec![vec![0.0f32; rows * cw]; chunks];
            gather_rows(isa, &mut outs, rows, cw, &srcs, Some(&bias));
            for (o, w) in outs.iter().flatten().zip(want.iter().flatten()) {
                assert_eq!(o.to_bits(), w.to_bits(), "{isa:?}");
            }
        }
    }

    /// Every variant against a plain loop, bitwise, in f32 and f64, for widths around the
    /// vector blocks and repeated rows in a non-sorted order.
    #[test]
    fn sum_rows_every_variant_is_the_plain_loop() {
        let stride = 70;
        let src32: Vec<f32> = (0..stride * 9).map(val).collect();
        let src64: Vec<f64> = (0..stride * 9).map(|k| val(k) as f64 * 1.1).collect();
        let picked = [3, 0, 8, 3, 5, 1, 3, 7];
        for isa in variants() {
            for w in [0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 70] {
                let mut got = vec![f32::NAN; w];
                sum_rows(isa, &mut got, &src32, &picked, stride);
                let mut got64 = vec![f64::NAN; w];
                sum_rows(isa, &mut got64, &src64, &picked[..5], stride);
                for j in 0..w {
                    let mut s = 0.0f32;
                    for &r in &picked {
                        s += src32[r * stride + j];
                    }
                    assert_eq!(got[j].to_bits(), s.to_bits(), "{isa:?} w {w}");
                    let mut s = 0.0f64;
                    for &r in &picked[..5] {
                        s += src64[r * stride + j];
                    }
                    assert_eq!(got64[j].to_bits(), s.to_bits(), "{isa:?} w {w}");
                }
            }
        }
    }
}
