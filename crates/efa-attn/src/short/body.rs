//! The vector bodies of the lane-batched path: every buffer holds [`GROUP`] heads side by
//! side (element `(r, c)` of head `g` of an `R × C` matrix at `(r·C + c)·GROUP + g`), so each
//! arithmetic step runs on whole vectors of heads. Each body repeats, head by head, the
//! operations of the tile kernel in the same order (see the parent module), with the
//! accumulators in registers instead of the tile scratch.

use super::GROUP;
use efa_num::simd::bodies::SIDE;
use efa_num::simd::SimdVec;
use efa_num::{simd_variants, Real};

/// Sizes of one group: `nq` query rows, `c` keys packed (the most any row sees), head widths
/// `d` (queries, keys) and `dv` (values); query row `i` sees keys `0..cnt[i]` and key `j < c`
/// is seen by rows `first[j]..nq` (`cnt` nondecreasing, `cnt[nq − 1] = c`; `nq` and `c`
/// entries).
#[derive(Clone, Copy)]
pub(super) struct Dims {
    pub nq: usize,
    pub c: usize,
    pub d: usize,
    pub dv: usize,
    pub cnt: *const usize,
    pub first: *const usize,
}

impl Dims {
    /// Keys row `i` sees.
    #[inline(always)]
    unsafe fn cnt(self, i: usize) -> usize {
        // SAFETY: `cnt` points to the `nq` counts of `Scratch::cnt` (see `Scratch::dims`), and
        // every caller passes a query row `i < nq`.
        unsafe { *self.cnt.add(i) }
    }

    /// First query row that sees key `j`.
    #[inline(always)]
    unsafe fn first(self, j: usize) -> usize {
        // SAFETY: `first` points to `Scratch::first`, whose first `c` entries `Scratch::dims`
        // filled, and every caller passes a key `j < c`.
        unsafe { *self.first.add(j) }
    }
}

/// A lane-major operand: element `(a, b)` of every head at `ptr + (a·sa + b·sb)·GROUP`.
#[derive(Clone, Copy)]
struct Op<T> {
    ptr: *const T,
    sa: usize,
    sb: usize,
}

/// The operand at `ptr` with strides `sa`, `sb` (in elements of one head).
#[inline(always)]
fn op<T>(ptr: *const T, sa: usize, sb: usize) -> Op<T> {
    Op { ptr, sa, sb }
}

impl<T> Op<T> {
    #[inline(always)]
    unsafe fn at(self, a: usize, b: usize, u: usize) -> *const T {
        // SAFETY: callers pass only `(a, b)` of the operand's matrix and a lane `u < GROUP`, so
        // the offset `(a·sa + b·sb)·GROUP + u` stays inside the buffer the operand addresses.
        unsafe { self.ptr.add((a * self.sa + b * self.sb) * GROUP + u) }
    }
}

/// One product `out = x·y` on the lanes at offset `u` (the bodies below take its rows and
/// column blocks).
#[derive(Clone, Copy)]
struct Prod<T> {
    x: Op<T>,
    y: Op<T>,
    out: Op<T>,
    u: usize,
    /// Each chain starts from `out`'s element instead of zero.
    from_out: bool,
}

/// The product of `x` and `y` into `out` on the lanes at offset `u`.
#[inline(always)]
fn prod<T>(x: Op<T>, y: Op<T>, out: Op<T>, u: usize) -> Prod<T> {
    Prod {
        x,
        y,
        out,
        u,
        from_out: false,
    }
}

/// Whether `V` is a 64-byte vector (AVX-512: 32 registers, room for 4×4 accumulator blocks).
#[inline(always)]
fn wide<V: SimdVec>() -> bool {
    std::mem::size_of::<V>() >= 64
}

/// One term of a chain: `s ← s + x·y` fused, or in f64 (`comp`) a compensated step gathering
/// its error in `e`.
#[inline(always)]
unsafe fn chain_step<V: SimdVec>(comp: bool, xv: V, yv: V, s: &mut V, e: &mut V) {
    // SAFETY: register arithmetic only; the caller (`chain_block`, `chain_row`) runs with
    // `V`'s instruction set enabled.
    unsafe {
        if comp {
            xv.dot2_step(yv, s, e)
        } else {
            *s = xv.fma(yv, *s)
        }
    }
}

/// The terms `k ∈ [k0, k1)` of row `a`'s chains for the output columns `b0 .. b0 + N`, on the
/// lanes at offset `u` (`row = (a, b0, u)`).
#[inline(always)]
unsafe fn chain_row<V: SimdVec, const N: usize>(
    (a, b0, u): (usize, usize, usize),
    (k0, k1): (usize, usize),
    (x, y): (Op<V::Elem>, Op<V::Elem>),
    (acc, err): (&mut [V; N], &mut [V; N]),
) {
    // SAFETY: the caller (`chain_block`) runs this with `V`'s instruction set enabled, with row
    // `a` of `x`, columns `b0 .. b0 + N` of `y` and `[k0, k1)` inside the row's `k` range, each
    // vector `LANES` lanes from lane `u` within one element's GROUP lanes.
    unsafe {
        let comp = efa_num::sum::compensated::<V::Elem>();
        for k in k0..k1 {
            let xv = V::load(x.at(a, k, u));
            for (t, (s, e)) in acc.iter_mut().zip(err.iter_mut()).enumerate() {
                chain_step(comp, xv, V::load(y.at(k, b0 + t, u)), s, e);
            }
        }
    }
}

/// Rows `a0 .. a0 + R`, output columns `b0 .. b0 + N`:
/// `out(a, b) = Σ_{k ∈ [lo[r], hi[r])} x(a, k)·y(k, b)` for row `a = a0 + r`, one fused
/// multiply-add chain per element from zero in `k` order, in registers. The part of `k` all
/// rows share runs as one loop over the block (each `x` and `y` load feeding several
/// chains); the ends only some rows have run row by row, before and after it, so every chain
/// still goes through its `k` in increasing order.
#[inline(always)]
unsafe fn chain_block<V: SimdVec, const R: usize, const N: usize>(
    (lo, hi): ([usize; R], [usize; R]),
    (a0, b0): (usize, usize),
    pr: Prod<V::Elem>,
) {
    let Prod {
        x,
        y,
        out,
        u,
        from_out,
    } = pr;
    // SAFETY: the caller (`row_block`) runs this with `V`'s instruction set enabled, on rows
    // `a0 .. a0 + R` of `x` and `out` and columns `b0 .. b0 + N` of `y` and `out` inside their
    // matrices, and with `[lo[r], hi[r])` inside row `a0 + r`'s `k` range of `x` and `y`;
    // each vector is `LANES` lanes from lane `u`, a multiple of `LANES` below GROUP (which
    // `LANES` divides), so it stays in one element's GROUP lanes. Every `k` read below lies in
    // `[lo[r], hi[r])` for the row it feeds (`[jl, jh)` is inside every row's range).
    unsafe {
        let zero = V::splat(V::Elem::ZERO);
        let mut acc = [[zero; N]; R];
        if from_out {
            for (r, acc) in acc.iter_mut().enumerate() {
                for (t, s) in acc.iter_mut().enumerate() {
                    *s = V::load(out.at(a0 + r, b0 + t, u));
                }
            }
        }
        // f64 sums are compensated, as the tile kernel's (`micro`): the errors gathered here.
        // (No closures here: a closure is compiled without the dispatcher's instruction set,
        // and one left out of line calls every intrinsic in it as a function.)
        let comp = efa_num::sum::compensated::<V::Elem>();
        let mut err = [[zero; N]; R];
        let jl = lo.iter().copied().max().unwrap_or(0);
        let jh = hi.iter().copied().min().unwrap_or(0).max(jl);
        for r in 0..R {
            let row = (a0 + r, b0, u);
            chain_row::<V, N>(
                row,
                (lo[r], hi[r].min(jl)),
                (x, y),
                (&mut acc[r], &mut err[r]),
            );
        }
        for k in jl..jh {
            let mut xv = [zero; R];
            for (r, v) in xv.iter_mut().enumerate() {
                *v = V::load(x.at(a0 + r, k, u));
            }
            let mut yv = [zero; N];
            for (t, v) in yv.iter_mut().enumerate() {
                *v = V::load(y.at(k, b0 + t, u));
            }
            for ((acc, err), &xv) in acc.iter_mut().zip(err.iter_mut()).zip(&xv) {
                for ((s, e), &yv) in acc.iter_mut().zip(err.iter_mut()).zip(&yv) {
                    chain_step(comp, xv, yv, s, e);
                }
            }
        }
        for r in 0..R {
            let row = (a0 + r, b0, u);
            chain_row::<V, N>(
                row,
                (jh.max(lo[r]), hi[r]),
                (x, y),
                (&mut acc[r], &mut err[r]),
            );
        }
        if comp {
            for (acc, err) in acc.iter_mut().zip(&err) {
                for (s, &e) in acc.iter_mut().zip(err) {
                    *s = s.add(e);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (t, s) in acc.iter().enumerate() {
                s.store(out.at(a0 + r, b0 + t, u).cast_mut());
            }
        }
    }
}

/// Rows `a0 .. a0 + R` of a product (chains as in [`chain_block`], `k ∈ kr(a)`), output
/// columns `0..nb`.
#[inline(always)]
unsafe fn row_block<V: SimdVec, const R: usize>(
    a0: usize,
    nb: usize,
    kr: impl Fn(usize) -> (usize, usize),
    pr: Prod<V::Elem>,
) {
    // SAFETY: the caller (`rows`) guarantees `V`'s instruction set, rows `a0 .. a0 + R` inside
    // the matrices and `kr(a)`, columns `0..nb` valid for them; the column blocks below stay
    // below `nb` (`b + N ≤ nb` for each block of `N` columns), as `chain_block` needs.
    unsafe {
        let lo = std::array::from_fn(|r| kr(a0 + r).0);
        let hi = std::array::from_fn(|r| kr(a0 + r).1);
        let mut b = 0;
        if R == 1 {
            while b + 8 <= nb {
                chain_block::<V, R, 8>((lo, hi), (a0, b), pr);
                b += 8;
            }
        }
        if R >= 4 && !wide::<V>() {
            // Four rows on 16 registers: twelve accumulators and the four row vectors.
            while b + 3 <= nb {
                chain_block::<V, R, 3>((lo, hi), (a0, b), pr);
                b += 3;
            }
        } else {
            while b + 4 <= nb {
                chain_block::<V, R, 4>((lo, hi), (a0, b), pr);
                b += 4;
            }
        }
        if b + 2 <= nb {
            chain_block::<V, R, 2>((lo, hi), (a0, b), pr);
            b += 2;
        }
        if b < nb {
            chain_block::<V, R, 1>((lo, hi), (a0, b), pr);
        }
    }
}

/// Rows `a0 .. a0 + rows` (`rows ≤ 4`) of a product: a block of four rows (by four columns on
/// 64-byte vectors, by three on 32-byte ones, whose 16 registers hold no more), then blocks of
/// two and single rows. Each column vector loaded then feeds four rows' chains: the operand
/// streamed for every block of rows (the keys, some tens of kilobytes per group, from the
/// second-level cache) is read half as often as by blocks of two rows.
#[inline(always)]
unsafe fn rows<V: SimdVec>(
    (a0, rows): (usize, usize),
    nb: usize,
    kr: impl Fn(usize) -> (usize, usize) + Copy,
    pr: Prod<V::Elem>,
) {
    // SAFETY: the caller guarantees `V`'s instruction set and that rows `a0 .. a0 + rows`, their
    // `k` ranges `kr(a)` and columns `0..nb` are inside `x`, `y` and `out`; each `row_block`
    // call takes rows below `end = a0 + rows` (`a + 4 ≤ end`, `a + 2 ≤ end`, `a < end`).
    unsafe {
        let mut a = a0;
        let end = a0 + rows;
        if a + 4 <= end {
            row_block::<V, 4>(a, nb, kr, pr);
            a += 4;
        }
        while a + 2 <= end {
            row_block::<V, 2>(a, nb, kr, pr);
            a += 2;
        }
        if a < end {
            row_block::<V, 1>(a, nb, kr, pr);
        }
    }
}

/// Query rows per block of the fused passes.
const ROWS: usize = 4;

/// `out(a, b) = Σ_{k ∈ kr(a)} x(a, k)·y(k, b)` for `a < na`, `b < nb(a)` (chains as in
/// [`chain_block`]; a block of rows computes the columns of its last row, `nb` nondecreasing),
/// on the lanes at offset `u`.
#[inline(always)]
unsafe fn product<V: SimdVec>(
    na: usize,
    nb: impl Fn(usize) -> usize,
    kr: impl Fn(usize) -> (usize, usize) + Copy,
    pr: Prod<V::Elem>,
) {
    // SAFETY: the caller guarantees `V`'s instruction set and that rows `a < na`, their `k`
    // ranges `kr(a)` and columns `b < nb(a)` are inside `x`, `y` and `out`; each block takes
    // rows `a0 .. a0 + n ≤ na` and the columns of its last row, the widest (`nb`
    // nondecreasing).
    unsafe {
        for a0 in (0..na).step_by(ROWS) {
            let n = ROWS.min(na - a0);
            rows::<V>((a0, n), nb(a0 + n - 1), kr, pr);
        }
    }
}

/// Rows `i0 .. i0 + n` of the unscaled scores `s = Q·Kᵀ` (row `i` on at least its `cnt[i]`
/// keys): the tile kernel's chains over the head width. The callers apply the scale when it
/// is not 1, as the tile kernel does, on their first pass over each row.
#[inline(always)]
unsafe fn scores<V: SimdVec>(
    x: Dims,
    i0: usize,
    n: usize,
    u: usize,
    qt: *const V::Elem,
    kt: *const V::Elem,
    s: *mut V::Elem,
) {
    // SAFETY: the caller guarantees `V`'s instruction set, rows `i0 .. i0 + n ≤ nq`, `qt`
    // holding `nq × d`, `kt` `c × d` and `s` `nq × c` lane-major elements. Row `a` reads Q's
    // row `a`, columns `k < d`, and K's keys `b < cnt(i0 + n − 1) ≤ c` (the block's widest
    // row), and writes `s(a, b)`: all inside.
    unsafe {
        let q = op(qt, x.d, 1);
        let k = op(kt, 1, x.d);
        let so = op(s.cast_const(), x.c, 1);
        rows::<V>((i0, n), x.cnt(i0 + n - 1), |_| (0, x.d), prod(q, k, so, u));
    }
}

/// `v·scale`, skipped when the scale is 1 (as the tile kernel skips it).
#[inline(always)]
unsafe fn scaled<V: SimdVec>(v: V, scale: V, one: bool) -> V {
    // SAFETY: register arithmetic only; the caller runs with `V`'s instruction set enabled.
    unsafe {
        if one {
            v
        } else {
            v.mul(scale)
        }
    }
}

/// Forward of one group, a block of query rows at a time: scores, the online-softmax update
/// from the empty state (running max −∞, sum 0; `s` becomes `exp(s − m)`), the unnormalised
/// output `P·V` and `acc` = that times `1/l`; `m` and `l` get the running max and sum per
/// row. The caller forms `lse` and fixes the rows whose sum is not positive.
#[inline(always)]
unsafe fn forward_body<V: SimdVec>(
    x: Dims,
    scale: V::Elem,
    (qt, kt, vt): (*const V::Elem, *const V::Elem, *const V::Elem),
    (s, acc): (*mut V::Elem, *mut V::Elem),
    (m, l): (*mut V::Elem, *mut V::Elem),
) {
    // SAFETY: the dispatcher's caller (`group_forward`) guarantees `V`'s instruction set and
    // the scratch of `Scratch::fit`: `qt` `nq × d`, `kt` `c × d`, `vt` `c × dv`, `s` at least
    // `nq × c`, `acc` `nq × dv`, `m` and `l` `nq` lane-major elements (GROUP lanes each), and
    // `x`'s counts with `cnt(i) ≤ c`. Below, rows are `i < nq`, keys `j < cnt(i) ≤ c`, value
    // columns `e < dv`, and vectors start at lane `u`, a multiple of `LANES` below GROUP.
    unsafe {
        let ninf = V::splat(V::Elem::NEG_INFINITY);
        let lowest = V::splat(-V::Elem::MAX);
        let (one, vs) = (scale == V::Elem::ONE, V::splat(scale));
        for u in (0..GROUP).step_by(V::LANES) {
            for i0 in (0..x.nq).step_by(ROWS) {
                let n = ROWS.min(x.nq - i0);
                scores::<V>(x, i0, n, u, qt, kt, s);
                for i in i0..i0 + n {
                    let row = s.add(i * x.c * GROUP + u);
                    let ci = x.cnt(i);
                    let mut mt = ninf;
                    for j in 0..ci {
                        let o = row.add(j * GROUP);
                        let v = scaled(V::load(o), vs, one);
                        v.store(o);
                        mt = v.max(mt);
                    }
                    let m_new = mt.max(ninf);
                    let shift = m_new.max(lowest);
                    let sum = efa_num::simd::bodies::exp_shift_strided::<V>(row, GROUP, ci, shift);
                    // The tile kernel's update from the empty state, `l = 0·e^{−∞ − shift} +
                    // sum`: `shift` is finite (`max` passes NaN scores over and the clamp
                    // lifts −∞), so the factor is exactly 0 and `l` is the sum itself.
                    sum.store(l.add(i * GROUP + u));
                    m_new.store(m.add(i * GROUP + u));
                }
                let p = op(s.cast_const(), x.c, 1);
                let v = op(vt, x.dv, 1);
                let o = op(acc.cast_const(), x.dv, 1);
                rows::<V>((i0, n), x.dv, |i| (0, x.cnt(i)), prod(p, v, o, u));
                // o = acc·(1/l) on every lane (the caller replaces the lanes whose sum is not
                // positive).
                for i in i0..i0 + n {
                    let inv = V::splat(V::Elem::ONE).div(V::load(l.add(i * GROUP + u)));
                    for e in 0..x.dv {
                        let at = acc.add((i * x.dv + e) * GROUP + u);
                        V::load(at).mul(inv).store(at);
                    }
                }
            }
        }
    }
}
simd_variants!(pub(super) forward_body, forward_d, (x: Dims, scale: E,
    ins: (*const E, *const E, *const E), out: (*mut E, *mut E), stats: (*mut E, *mut E)) -> ());

/// The backward of one group, a block of query rows at a time: `P = exp(s − lse)` (rows whose
/// `lse` is −∞ in some lane, flagged in `dead`, get `P = 0` in those lanes, as the tile kernel's
/// probabilities), `dP = dO·Vᵀ`, `dS = P ∘ (dP − D)` and `dQ = dS·K` (chains over the row's
/// keys); then `dV = Pᵀ·dO` and `dK = dSᵀ·Q` (chains over the query rows that see the key, in
/// order); each product from zero. The caller applies the scale to `dQ` and `dK`.
#[inline(always)]
unsafe fn backward_body<V: SimdVec>(
    x: Dims,
    scale: V::Elem,
    (qt, kt, vt, dot): (
        *const V::Elem,
        *const V::Elem,
        *const V::Elem,
        *const V::Elem,
    ),
    (lse, dd, dlo, dead): (*const V::Elem, *const V::Elem, *const V::Elem, *const bool),
    (p, ds): (*mut V::Elem, *mut V::Elem),
    g: [*mut V::Elem; 3],
) {
    // SAFETY: the dispatcher's caller (`group_backward`) guarantees `V`'s instruction set and
    // the scratch of `Scratch::fit`: `qt`, `dq` `nq × d`, `kt`, `dk` `c × d`, `vt`, `dv`
    // `c × dv`, `dot` `nq × dv`, `p` and `ds` at least `nq × c`, `lse` and `dd` `nq` lane-major
    // elements (GROUP lanes each), `dead` `nq` flags, and `x`'s counts with `cnt(i) ≤ c` and
    // `first(j) < nq`. Below, rows are `i < nq`, keys `j < cnt(i) ≤ c` (or `j < c` for the
    // key-side products, over rows `first(j) .. nq`), head columns `< d` or `< dv`; vectors
    // start at lane `u`, a multiple of `LANES` below GROUP, and scalar lanes are `u + lane`
    // with `lane < LANES`.
    unsafe {
        let [dq, dk, dvv] = g;
        let (nq, c, d, dv) = (x.nq, x.c, x.d, x.dv);
        let (one, vs) = (scale == V::Elem::ONE, V::splat(scale));
        for u in (0..GROUP).step_by(V::LANES) {
            let dor = op(dot, dv, 1);
            let vcol = op(vt, 1, dv);
            let dso = op(ds.cast_const(), c, 1);
            let krow = op(kt, d, 1);
            let dqo = op(dq.cast_const(), d, 1);
            // The row-wise work a block of query rows at a time (its P, dP and dS rows are
            // still in the first-level cache for the next step).
            for i0 in (0..nq).step_by(ROWS) {
                let n = ROWS.min(nq - i0);
                scores::<V>(x, i0, n, u, qt, kt, p);
                for i in i0..i0 + n {
                    let vl = V::load(lse.add(i * GROUP + u));
                    let row = p.add(i * c * GROUP + u);
                    let ci = x.cnt(i);
                    // SIDE exponentials side by side (the same bits as one at a time).
                    let mut j = 0;
                    while j + SIDE <= ci {
                        let mut v = [vl; SIDE];
                        for (t, v) in v.iter_mut().enumerate() {
                            *v = scaled(V::load(row.add((j + t) * GROUP)), vs, one).sub(vl);
                        }
                        for (t, e) in V::exp_each(v).into_iter().enumerate() {
                            e.store(row.add((j + t) * GROUP));
                        }
                        j += SIDE;
                    }
                    for j in j..ci {
                        let o = row.add(j * GROUP);
                        scaled(V::load(o), vs, one).sub(vl).exp().store(o);
                    }
                    if *dead.add(i) {
                        for lane in 0..V::LANES {
                            if *lse.add(i * GROUP + u + lane) == V::Elem::NEG_INFINITY {
                                for j in 0..x.cnt(i) {
                                    *row.add(j * GROUP + lane) = V::Elem::ZERO;
                                }
                            }
                        }
                    }
                }
                // In f64 (compensated sums) each dP chain starts from −D (rounded) and dS
                // subtracts the rest of D, as the tile kernel forms `dP − D`.
                let comp = efa_num::sum::compensated::<V::Elem>();
                let nb = x.cnt(i0 + n - 1);
                if comp {
                    for i in i0..i0 + n {
                        let neg = V::splat(V::Elem::ZERO).sub(V::load(dd.add(i * GROUP + u)));
                        for j in 0..nb {
                            neg.store(ds.add((i * c + j) * GROUP + u));
                        }
                    }
                }
                let dp = Prod {
                    from_out: comp,
                    ..prod(dor, vcol, dso, u)
                };
                rows::<V>((i0, n), nb, |_| (0, dv), dp);
                for i in i0..i0 + n {
                    let vd = V::load(if comp { dlo } else { dd }.add(i * GROUP + u));
                    for j in 0..x.cnt(i) {
                        let o = ds.add((i * c + j) * GROUP + u);
                        let pv = V::load(p.add((i * c + j) * GROUP + u));
                        pv.mul(V::load(o).sub(vd)).store(o);
                    }
                }
                rows::<V>((i0, n), d, |i| (0, x.cnt(i)), prod(dso, krow, dqo, u));
            }
            let seen = |j| (x.first(j), nq);
            let pt = op(p.cast_const(), 1, c);
            let out = op(dvv.cast_const(), dv, 1);
            product::<V>(c, |_| dv, seen, prod(pt, dor, out, u));
            let dst = op(ds.cast_const(), 1, c);
            let qrow = op(qt, d, 1);
            let out = op(dk.cast_const(), d, 1);
            product::<V>(c, |_| d, seen, prod(dst, qrow, out, u));
        }
    }
}
simd_variants!(pub(super) backward_body, backward_d, (x: Dims, scale: E,
    ins: (*const E, *const E, *const E, *const E),
    rows: (*const E, *const E, *const E, *const bool),
    work: (*mut E, *mut E), g: [*mut E; 3]) -> ());
