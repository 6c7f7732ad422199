//! The softmax and its backward down the columns of transposed score blocks (one query per
//! vector lane): the row kernels' operations in their order, per column, without horizontal
//! reductions.

use crate::micro::PAD;
use efa_num::simd::bodies::SIDE;
use efa_num::simd::{Isa, SimdVec};
use efa_num::{simd_by_kind, simd_variants, Real};

/// Most lanes of any variant's vector (f32 on AVX-512).
const LANES_MAX: usize = 16;

/// The pairwise halving of [`SimdVec::reduce_max`] (`MAX`) or [`SimdVec::reduce_sum`] over
/// `w` lane positions, each position a vector (one lane per row):
/// `a[i] ← op(a[i], a[i + w/2])`, … (No closure for the operation: a closure is compiled
/// without the caller's instruction set and may be left out of line.)
#[inline(always)]
unsafe fn halve<V: SimdVec, const MAX: bool>(mut a: [V; LANES_MAX], w: usize) -> V {
    // SAFETY: register arithmetic only; the callers run with `V`'s instruction set enabled.
    unsafe {
        let mut w = w;
        while w > 1 {
            w /= 2;
            for i in 0..w {
                a[i] = if MAX {
                    a[i].max(a[i + w])
                } else {
                    a[i].add(a[i + w])
                };
            }
        }
        a[0]
    }
}

/// [`halve`] of each of `G` blocks' lane positions.
#[inline(always)]
unsafe fn halve_each<V: SimdVec, const MAX: bool, const G: usize>(
    t: &[[V; LANES_MAX]; G],
    w: usize,
) -> [V; G] {
    // SAFETY: register arithmetic only; the callers run with `V`'s instruction set enabled.
    unsafe {
        let mut out = [t[0][0]; G];
        for (o, t) in out.iter_mut().zip(t) {
            *o = halve::<V, MAX>(*t, w);
        }
        out
    }
}

/// [`softmax_cols`] on `G` adjacent blocks of `V::LANES` columns at `x` (rows at stride `ld`,
/// the first `n` visible; block `b` has `valid[b]` real columns). Each column `c` is row `c` of
/// the row-wise kernel, with that kernel's vector width `w = V::LANES`: the operations of
/// `max_body`, `exp_sub_sum_body` and `scale_body` on a row of `n` are done here on lane
/// positions `l < w` (each one vector down the columns), so every lane sees the same
/// operations on the same operands in the same order. The `G` blocks are independent; their
/// steps are interleaved so that one block's dependency chains (the halvings, the tail's
/// sequential sum, the divisions) overlap the others' work.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn softmax_cols_block<V: SimdVec, const G: usize>(
    x: *mut V::Elem,
    ld: usize,
    n: usize,
    valid: [usize; G],
    stats: *mut V::Elem,
) {
    // SAFETY: the caller (`softmax_cols_body`) runs this only with `V`'s instruction set
    // enabled, on `G` blocks of `w` columns that end within the row stride `ld`, with rows
    // `0..n` inside `x` and, when `stats` is not null, `2·ld` elements at `stats` from the
    // block's first column. Every access here is a whole vector at row `j < n` (the chunk loops
    // read rows `i + l`, `i + w + l` only while `i + 2w ≤ n` or `i + w ≤ n`, the tail only while
    // `i + l < n`, later loops run `j < n`) and block `b < G`, or a store of `w ≤ LANES_MAX`
    // lanes into the local `r`, or of block `b`'s `w` lanes at `stats[b·w]`, `stats[ld + b·w]`.
    unsafe {
        let w = V::LANES;
        let at = |b: usize, j: usize| x.add(b * w + j * ld);
        // max_body: m0 takes chunks 0, 2, 4, … (and a last odd one and the tail), m1 chunks 1,
        // 3, …; then m0.max(m1) and the halving. Tail lanes past `n` load −∞ there, and
        // `max(−∞, m)` is `m`, so they are skipped.
        let ninf = V::splat(V::Elem::NEG_INFINITY);
        let mut t = [[ninf; LANES_MAX]; G];
        let mut tail = 0;
        for l in 0..w {
            let (mut m0, mut m1) = ([ninf; G], [ninf; G]);
            let mut i = 0;
            while i + 2 * w <= n {
                for b in 0..G {
                    m0[b] = V::load(at(b, i + l)).max(m0[b]);
                    m1[b] = V::load(at(b, i + w + l)).max(m1[b]);
                }
                i += 2 * w;
            }
            if i + w <= n {
                for b in 0..G {
                    m0[b] = V::load(at(b, i + l)).max(m0[b]);
                }
                i += w;
            }
            tail = i;
            for b in 0..G {
                if i + l < n {
                    m0[b] = V::load(at(b, i + l)).max(m0[b]);
                }
                t[b][l] = m0[b].max(m1[b]);
            }
        }
        let m: [V; G] = halve_each::<V, true, G>(&t, w);
        // exp_sub_sum_body: the same chunks into s0 and s1, s0 + s1, the halving, then the
        // tail's exponentials added one by one in index order.
        let zero = V::splat(V::Elem::ZERO);
        let mut t = [[zero; LANES_MAX]; G];
        for l in 0..w {
            let (mut s0, mut s1) = ([zero; G], [zero; G]);
            let mut i = 0;
            while i + 2 * w <= n {
                // The blocks' exponentials side by side (the same bits as one at a time).
                let (mut v0, mut v1) = (m, m);
                for b in 0..G {
                    v0[b] = V::load(at(b, i + l)).sub(m[b]);
                    v1[b] = V::load(at(b, i + w + l)).sub(m[b]);
                }
                let (e0, e1) = (V::exp_each(v0), V::exp_each(v1));
                for b in 0..G {
                    e0[b].store(at(b, i + l));
                    e1[b].store(at(b, i + w + l));
                    s0[b] = s0[b].add(e0[b]);
                    s1[b] = s1[b].add(e1[b]);
                }
                i += 2 * w;
            }
            if i + w <= n {
                for b in 0..G {
                    let p0 = at(b, i + l);
                    let e0 = V::load(p0).sub(m[b]).exp();
                    e0.store(p0);
                    s0[b] = s0[b].add(e0);
                }
            }
            for b in 0..G {
                t[b][l] = s0[b].add(s1[b]);
            }
        }
        let mut s: [V; G] = halve_each::<V, false, G>(&t, w);
        for j in tail..n {
            for b in 0..G {
                let e = V::load(at(b, j)).sub(m[b]).exp();
                e.store(at(b, j));
                s[b] = s[b].add(e);
            }
        }
        // scale_body with 1/z per lane (a scalar division each, as the row kernel's); columns
        // past a block's last valid one are scaled by 0 instead.
        let mut r = [zero; G];
        for b in 0..G {
            let mut lanes = [V::Elem::ZERO; LANES_MAX];
            s[b].store(lanes.as_mut_ptr());
            for (l, x) in lanes.iter_mut().enumerate().take(w) {
                *x = if l < valid[b] {
                    V::Elem::ONE / *x
                } else {
                    V::Elem::ZERO
                };
            }
            r[b] = V::load(lanes.as_ptr());
        }
        for j in 0..n {
            for b in 0..G {
                V::load(at(b, j)).mul(r[b]).store(at(b, j));
            }
        }
        // The maxima and the scales, for `softmax_cols_again`.
        if !stats.is_null() {
            for b in 0..G {
                m[b].store(stats.add(b * w));
                r[b].store(stats.add(ld + b * w));
            }
        }
    }
}

#[inline(always)]
unsafe fn softmax_cols_body<V: SimdVec>(
    x: *mut V::Elem,
    ld: usize,
    n: usize,
    cols: usize,
    stats: *mut V::Elem,
) {
    // SAFETY: the dispatcher's caller (`softmax_cols`, `softmax_cols_keep`) guarantees `V`'s
    // instruction set, `n` rows of stride `ld` at `x` with `cols ≤ ld` and `ld` a multiple of
    // PAD, which `w` divides, and `2·ld` elements at `stats` unless null. Blocks start at
    // multiples `c` of `w` and are called only while `c + 2w < cols` (three blocks), `c + w <
    // cols` (two) or `c < cols` (one), so the last block ends at the first multiple of `w` at
    // or past `cols`, which is at most `ld`: each block call gets what it requires.
    unsafe {
        let w = V::LANES;
        let left = |c: usize| cols.saturating_sub(c);
        let at = |c: usize| {
            if stats.is_null() {
                stats
            } else {
                stats.add(c)
            }
        };
        let mut c = 0;
        // Three blocks at a time (44 queries of f32 on AVX-512), then two, then one.
        while c + 2 * w < cols {
            let v = [left(c), left(c + w), left(c + 2 * w)];
            softmax_cols_block::<V, 3>(x.add(c), ld, n, v, at(c));
            c += 3 * w;
        }
        if c + w < cols {
            softmax_cols_block::<V, 2>(x.add(c), ld, n, [left(c), left(c + w)], at(c));
        } else if c < cols {
            softmax_cols_block::<V, 1>(x.add(c), ld, n, [left(c)], at(c));
        }
    }
}
simd_variants!(softmax_cols_body, softmax_cols_d, (x: *mut E, ld: usize, n: usize, cols: usize,
    stats: *mut E) -> ());

/// The last two steps of [`softmax_cols_body`] from its kept maxima `m` and scales `r`: every
/// element `exp(x − m)·r`, the operations those steps apply to it (the exponential stored, then
/// multiplied by the column's scale), so the same bits without the reductions.
#[inline(always)]
unsafe fn softmax_cols_again_body<V: SimdVec>(
    x: *mut V::Elem,
    ld: usize,
    n: usize,
    cols: usize,
    stats: *const V::Elem,
) {
    // SAFETY: the dispatcher's caller (`softmax_cols_again`) guarantees `V`'s instruction set,
    // `n` rows of stride `ld` at `x` and `2·ld` elements at `stats`, with `cols ≤ ld` and `ld`
    // a multiple of PAD, which `w` divides. Each `c < cols` is a multiple of `w`, so
    // `c + w ≤ ld`: the vectors at `stats[c]`, `stats[ld + c]` and `x[j·ld + c]` (`j < n`)
    // are inside the buffers.
    unsafe {
        let w = V::LANES;
        let mut c = 0;
        while c < cols {
            let (m, r) = (V::load(stats.add(c)), V::load(stats.add(ld + c)));
            let mut j = 0;
            while j + SIDE <= n {
                let mut v = [m; SIDE];
                for (t, v) in v.iter_mut().enumerate() {
                    *v = V::load(x.add((j + t) * ld + c)).sub(m);
                }
                for (t, e) in V::exp_each(v).into_iter().enumerate() {
                    e.mul(r).store(x.add((j + t) * ld + c));
                }
                j += SIDE;
            }
            for j in j..n {
                let p = x.add(j * ld + c);
                V::load(p).sub(m).exp().mul(r).store(p);
            }
            c += w;
        }
    }
}
simd_variants!(softmax_cols_again_body, softmax_cols_again_d, (x: *mut E, ld: usize, n: usize,
    cols: usize, stats: *const E) -> ());

/// [`softmax_rows`](super::softmax_rows) on the transpose: in place softmax down each of the first
/// `cols` columns of `x` over its first `n` rows (row stride `ld`, a multiple of [`PAD`]), bit for
/// bit what [`softmax_rows`](super::softmax_rows)`(isa, ·, ·, cols, n)` gives on the transposed
/// block (the row kernel's partial sums, halvings and tail order, per column, with one lane per
/// column instead of per-row horizontal reductions). Columns up to the next multiple of the vector
/// width (at most `ld`) are read as well and set to 0 in the first `n` rows (they must be finite);
/// rows from `n` on are not touched.
///
/// # Panics
/// If `ld` is not a multiple of [`PAD`], `cols > ld`, or `x` holds fewer than `n·ld` elements.
#[track_caller]
pub fn softmax_cols<T: Real>(isa: Isa, x: &mut [T], ld: usize, n: usize, cols: usize) {
    if !checked("softmax_cols", x.len(), ld, n, cols, None) {
        return;
    }
    let isa = isa.or_scalar();
    // SAFETY: every variant's lane count divides PAD, so the blocks covering `cols` end within
    // `ld`, and `checked` keeps the `n` rows inside `x`; `isa` is supported.
    simd_by_kind!(T, E => unsafe {
        softmax_cols_d::<E>(isa, x.as_mut_ptr().cast(), ld, n, cols, std::ptr::null_mut())
    })
}

/// Whether a column kernel has work (`n` rows and `cols` columns, both nonzero), after
/// asserting that `ld` is a multiple of [`PAD`] at least `cols`, that `x` holds the `n` rows
/// and that the kept maxima and scales, when given, hold `2·ld` elements.
#[track_caller]
fn checked(what: &str, x: usize, ld: usize, n: usize, cols: usize, kept: Option<usize>) -> bool {
    if n == 0 || cols == 0 {
        return false;
    }
    assert!(
        ld.is_multiple_of(PAD) && cols <= ld && n * ld <= x && kept.is_none_or(|k| 2 * ld <= k),
        "{what}: {n} rows of {cols} at stride {ld} in {x} elements, {kept:?} kept"
    );
    true
}

/// [`softmax_cols`], keeping each column's maximum in `stats[c]` and its scale (`1/Σ`, or 0
/// on a padding column) in `stats[ld + c]` for every column `c` of the vector blocks covering
/// `cols`, for [`softmax_cols_again`].
///
/// # Panics
/// As [`softmax_cols`], or if `stats` holds fewer than `2·ld` elements.
#[track_caller]
pub fn softmax_cols_keep<T: Real>(
    isa: Isa,
    x: &mut [T],
    ld: usize,
    n: usize,
    cols: usize,
    stats: &mut [T],
) {
    if !checked("softmax_cols_keep", x.len(), ld, n, cols, Some(stats.len())) {
        return;
    }
    let isa = isa.or_scalar();
    // SAFETY: as `softmax_cols`; the blocks' columns end within `ld`, so their maxima and
    // scales within `stats[..2·ld]`.
    simd_by_kind!(T, E => unsafe {
        softmax_cols_d::<E>(isa, x.as_mut_ptr().cast(), ld, n, cols, stats.as_mut_ptr().cast())
    })
}

/// The probabilities of [`softmax_cols`] formed again from the same scores `x` and what
/// [`softmax_cols_keep`] kept for them: bit for bit the block that call wrote (every element
/// `exp(x − m)·r`, the operations that call applies to it), without the maxima, the sums or
/// the divisions.
///
/// # Panics
/// As [`softmax_cols_keep`].
#[track_caller]
pub fn softmax_cols_again<T: Real>(
    isa: Isa,
    x: &mut [T],
    ld: usize,
    n: usize,
    cols: usize,
    stats: &[T],
) {
    if !checked(
        "softmax_cols_again",
        x.len(),
        ld,
        n,
        cols,
        Some(stats.len()),
    ) {
        return;
    }
    let isa = isa.or_scalar();
    // SAFETY: every variant's lane count divides PAD, so the blocks covering `cols` end within
    // `ld` (rows of `x`, and both halves of `stats`); `checked` keeps them inside the slices.
    simd_by_kind!(T, E => unsafe {
        softmax_cols_again_d::<E>(isa, x.as_mut_ptr().cast(), ld, n, cols, stats.as_ptr().cast())
    })
}

/// [`ds_cols`] on `G` adjacent blocks of `V::LANES` columns: per column the operations of
/// `dot_body` (four chunk accumulators, their sums `(s0 + s1) + (s2 + s3)`, the halving, the
/// tail's fused multiply-adds in index order) and of `ds_body`, as in [`softmax_cols_block`]
/// (blocks interleaved the same way).
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn ds_cols_block<V: SimdVec, const G: usize>(
    p: *const V::Elem,
    dp: *mut V::Elem,
    ld: usize,
    n: usize,
) {
    // SAFETY: the caller (`ds_cols_body`) runs this only with `V`'s instruction set enabled, on
    // `G` blocks of `w` columns ending within the row stride `ld`, rows `0..n` of `p` and `dp`
    // inside the buffers. Every access is a whole vector of block `b < G` at row `i + l`,
    // `i + w + l`, … only while the chunk (`i + 4w ≤ n` or `i + w ≤ n`) lies below `n`, or at
    // a row `j < n` (the tail and the final loop).
    unsafe {
        let w = V::LANES;
        let pa = |b: usize, j: usize| p.add(b * w + j * ld);
        let da = |b: usize, j: usize| dp.add(b * w + j * ld);
        let zero = V::splat(V::Elem::ZERO);
        let mut t = [[zero; LANES_MAX]; G];
        let mut tail = 0;
        for l in 0..w {
            let (mut s0, mut s1, mut s2, mut s3) = ([zero; G], [zero; G], [zero; G], [zero; G]);
            let mut i = 0;
            while i + 4 * w <= n {
                for b in 0..G {
                    s0[b] = V::load(pa(b, i + l)).fma(V::load(da(b, i + l)), s0[b]);
                    s1[b] = V::load(pa(b, i + w + l)).fma(V::load(da(b, i + w + l)), s1[b]);
                    let (j2, j3) = (i + 2 * w + l, i + 3 * w + l);
                    s2[b] = V::load(pa(b, j2)).fma(V::load(da(b, j2)), s2[b]);
                    s3[b] = V::load(pa(b, j3)).fma(V::load(da(b, j3)), s3[b]);
                }
                i += 4 * w;
            }
            while i + w <= n {
                for b in 0..G {
                    s0[b] = V::load(pa(b, i + l)).fma(V::load(da(b, i + l)), s0[b]);
                }
                i += w;
            }
            tail = i;
            for b in 0..G {
                t[b][l] = s0[b].add(s1[b]).add(s2[b].add(s3[b]));
            }
        }
        let mut d: [V; G] = halve_each::<V, false, G>(&t, w);
        for j in tail..n {
            for b in 0..G {
                d[b] = V::load(pa(b, j)).fma(V::load(da(b, j)), d[b]);
            }
        }
        for j in 0..n {
            for b in 0..G {
                let x = da(b, j);
                V::load(pa(b, j)).mul(V::load(x).sub(d[b])).store(x);
            }
        }
    }
}

#[inline(always)]
unsafe fn ds_cols_body<V: SimdVec>(
    p: *const V::Elem,
    dp: *mut V::Elem,
    ld: usize,
    n: usize,
    cols: usize,
) {
    // SAFETY: the dispatcher's caller (`ds_cols`) guarantees `V`'s instruction set and `n` rows
    // of stride `ld` in both `p` and `dp` with `cols ≤ ld` and `ld` a multiple of PAD, which `w`
    // divides. As in `softmax_cols_body`, the blocks start at multiples of `w` below `cols`, so
    // the last one ends at most at `ld`: each block call gets what it requires.
    unsafe {
        let w = V::LANES;
        let mut c = 0;
        while c + 2 * w < cols {
            ds_cols_block::<V, 3>(p.add(c), dp.add(c), ld, n);
            c += 3 * w;
        }
        if c + w < cols {
            ds_cols_block::<V, 2>(p.add(c), dp.add(c), ld, n);
        } else if c < cols {
            ds_cols_block::<V, 1>(p.add(c), dp.add(c), ld, n);
        }
    }
}
simd_variants!(ds_cols_body, ds_cols_d, (p: *const E, dp: *mut E, ld: usize, n: usize, cols: usize) -> ());

/// [`ds_rows`](super::ds_rows) on the transpose: in place `dS = P ∘ (dP − D)` down each of the
/// first `cols` columns over their first `n` rows (row stride `ld`, a multiple of [`PAD`]), with `D
/// = Σ P·dP` per column: bit for bit what [`ds_rows`](super::ds_rows)`(isa, ·, ·, ·, cols, n)`
/// gives on the transposed blocks. Columns up to the next multiple of the vector width (at most
/// `ld`) are computed as well; rows from `n` on are not touched.
///
/// # Panics
/// If `ld` is not a multiple of [`PAD`], `cols > ld`, or a slice holds fewer than `n·ld`
/// elements.
#[track_caller]
pub fn ds_cols<T: Real>(isa: Isa, p: &[T], dp: &mut [T], ld: usize, n: usize, cols: usize) {
    if n == 0 || cols == 0 {
        return;
    }
    assert!(
        ld.is_multiple_of(PAD) && cols <= ld && n * ld <= p.len() && n * ld <= dp.len(),
        "ds_cols: {n} rows of {cols} at stride {ld} in {} and {} elements",
        p.len(),
        dp.len()
    );
    let isa = isa.or_scalar();
    // SAFETY: as in `softmax_cols`; the slices are distinct borrows.
    simd_by_kind!(T, E => unsafe {
        ds_cols_d::<E>(isa, p.as_ptr().cast(), dp.as_mut_ptr().cast(), ld, n, cols)
    })
}
