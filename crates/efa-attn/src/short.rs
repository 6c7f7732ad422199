//! Short sequences: at most [`BLOCK_Q`] queries and [`MAX_KEYS`] keys with every query row of
//! a batch row seeing the same keys (no mask, or key lengths), or [`MAX_CAUSAL_KEYS`] keys
//! under a causal mask (with or without key lengths). The tile kernel spends most of its time
//! there on per-head setup and on vectors that are mostly padding (5 keys in a 16-wide score
//! row) or, causal, on the triangle its 16-query blocks cover only coarsely. This path
//! instead puts [`GROUP`] heads that see the same keys row by row side by side in the lanes of
//! its vectors (`body`), so every multiply-add, max and exponential works on whole vectors of
//! visible pairs, and the heads' inputs are packed once per group.
//!
//! **Same bits as the tile kernel.** For each head, every output element is computed by the
//! operations the tile kernel applies to it, in the same order: scores as one fused
//! multiply-add chain over the head width from zero, then the scale; the running max, the
//! shift clamped at `−MAX`, `exp(s − shift)` and the sum over keys in key order from the empty
//! online-softmax state; `P·V`, `dV`, `dK`, `dQ`, `dP` as chains in the tile kernel's index
//! order; `D` by the same dot product; the same division, logarithm and scaling on output.
//! Under a causal mask the chains run over the visible pairs only, where the tile kernel
//! also adds the zero terms `0·x` of hidden pairs inside its 16-query groups. With finite
//! inputs those leave every sum unchanged (up to the sign of a sum that is exactly −0, which
//! takes an underflow), so the bits are the same. With an infinite or NaN value, key or query
//! the tile kernel's `0·x` can carry NaN to rows of the group that do not see that key; this
//! path never reads a hidden pair, so a non-finite input reaches exactly the outputs whose
//! visible pairs read it. The tests compare the two paths bit for bit on every SIMD variant,
//! f32 and f64, and check that NaN pattern.

mod body;
mod scratch;
#[cfg(test)]
mod tests;

use crate::backward::d_rows;
use crate::micro::PAD;
use crate::problem::{head3_each, run_tasks_min, uninit3, uninit4, Problem};
use crate::{AttnGrads, AttnOut, BLOCK_Q, FUSED_MAX_LEN, FUSED_MIN_HEADS};
use efa_num::{simd, simd_by_kind, Real};
use ndarray::{ArrayView3, ArrayView4};
use scratch::{Reused, Scratch};
use std::mem::MaybeUninit;

/// Heads per group: the lanes of the widest vector in f32 (narrower vectors take several
/// steps per group).
pub(crate) const GROUP: usize = PAD;
// The AVX-512 pack and unpack move 16×16 blocks: one group's lanes.
const _: () = assert!(GROUP == 16);
// The path needs at least GROUP heads and at most BLOCK_Q queries, so the tile kernel it
// replaces always runs its one-pass backward (hidden keys' gradients written as +0).
const _: () = assert!(GROUP >= FUSED_MIN_HEADS && BLOCK_Q <= FUSED_MAX_LEN);

/// Most keys a problem with the same keys for every query row may have to take this path.
pub(crate) const MAX_KEYS: usize = 16;

/// Most keys a causal problem may have to take this path: one key tile of the tile kernel
/// (whose online softmax then runs from the empty state, as the bodies do).
pub(crate) const MAX_CAUSAL_KEYS: usize = 64;
const _: () = assert!(MAX_CAUSAL_KEYS <= crate::BLOCK_K);

#[cfg(test)]
thread_local! {
    /// Tests turn the path off to compare with the tile kernel.
    pub(crate) static DISABLED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether `p` takes this path: 1 to [`BLOCK_Q`] queries (one query tile: the scratch stays
/// small), at least [`GROUP`] heads in all (full groups), visibility given by key lengths and
/// a causal offset alone (prefixes of keys, no element-wise rule), and at most [`MAX_KEYS`]
/// keys, or [`MAX_CAUSAL_KEYS`] with a causal offset (rows see from 0 to all keys: a head's
/// work is a triangle, which the tile kernel's 16-query blocks cover only coarsely). Which
/// path runs never changes a result.
pub(crate) fn applies<T: Real>(p: &Problem<T>) -> bool {
    #[cfg(test)]
    if DISABLED.with(|d| d.get()) {
        return false;
    }
    let max_keys = if p.rules.uniform_rows() {
        MAX_KEYS
    } else {
        MAX_CAUSAL_KEYS
    };
    p.nk <= max_keys
        && (1..=BLOCK_Q).contains(&p.nq)
        && p.batch * p.heads >= GROUP
        && !p.rules.has_pointwise()
}

/// A group: up to [`GROUP`] flat head indices `b·H + h` (in `heads[start..start + n]`) whose
/// batch rows see the same keys row by row, `c` of them in the last (widest) row.
#[derive(Clone, Copy)]
struct Group {
    c: usize,
    start: usize,
    n: usize,
}

/// The heads ordered by the key count of their last row (then index), cut into groups;
/// depends only on the shapes, the causal offset and the key lengths. Visible counts are
/// `min(length, causal limit of the row)`, so two batch rows with the same last-row count see
/// the same keys in every row.
fn groups<T: Real>(p: &Problem<T>) -> (Vec<usize>, Vec<Group>) {
    let count = |bh: usize| p.rules.hi(bh / p.heads, p.nq - 1).min(p.nk);
    let mut heads: Vec<usize> = (0..p.batch * p.heads).collect();
    heads.sort_by_key(|&bh| count(bh));
    let mut out = Vec::with_capacity(heads.len().div_ceil(GROUP) + p.nk + 1);
    let mut start = 0;
    while start < heads.len() {
        let c = count(heads[start]);
        let mut n = 1;
        while n < GROUP && start + n < heads.len() && count(heads[start + n]) == c {
            n += 1;
        }
        out.push(Group { c, start, n });
        start += n;
    }
    (heads, out)
}

/// `dst[(r·cols + c)·GROUP + g] = x_g[r, c]` for `r < rows`, `c < cols` and the heads `x_g`
/// of `bhs` (lanes past them repeat the group's last head; what they compute is never
/// read). In f32 with contiguous rows, blocks are transposed in registers: 16×16 with AVX-512,
/// 8×8 with AVX2.
fn pack<T: Real>(p: &Problem<T>, x: &ArrayView4<T>, bhs: &[usize], rows: usize, dst: &mut [T]) {
    let cols = x.shape()[3];
    let s = x.strides();
    assert!(rows <= x.shape()[2] && dst.len() >= rows * cols * GROUP && !bhs.is_empty());
    let base: [*const T; GROUP] = std::array::from_fn(|g| {
        let bh = bhs[g.min(bhs.len() - 1)];
        let (b, h) = p.split(bh);
        x.as_ptr()
            .wrapping_offset(b as isize * s[0] + h as isize * s[1])
    });
    #[cfg(target_arch = "x86_64")]
    if matches!(p.isa, simd::Isa::Avx512 | simd::Isa::Avx2)
        && simd::elem_kind::<T>() == simd::ElemKind::F32
        && (s[3] == 1 || cols <= 1)
    {
        let dp = dst.as_mut_ptr();
        if p.isa == simd::Isa::Avx2 {
            let from: [*const f32; GROUP] = std::array::from_fn(|g| base[g].cast());
            // SAFETY: T is f32 and AVX2 is supported (Problem::new applies or_scalar); each
            // head's rows r < rows hold cols contiguous elements at r·s[2] (cols ≤ 1, or
            // s[3] = 1); dst holds rows·cols·GROUP elements (asserted above).
            unsafe {
                efa_num::simd::transpose8::pack16_f32(
                    &from,
                    s[2],
                    (rows, cols),
                    PREFETCH_ROWS,
                    dp.cast(),
                )
            };
            return;
        }
        for r in 0..rows {
            // The 16 heads are 16 streams: fetch their rows a few ahead (a prefetch never
            // faults, whatever the address).
            for b in base {
                let ahead = b.wrapping_offset((r + PREFETCH_ROWS) as isize * s[2]);
                simd::prefetch(ahead);
            }
            let src = |g: usize, cb: usize| {
                base[g]
                    .wrapping_offset(r as isize * s[2] + cb as isize)
                    .cast::<f32>()
            };
            let to =
                |k: usize, cb: usize| dp.wrapping_add((r * cols + cb + k) * GROUP).cast::<f32>();
            for cb in (0..cols).step_by(16) {
                let (from, into) = (
                    std::array::from_fn(|g| src(g, cb)),
                    std::array::from_fn(|k| to(k, cb)),
                );
                // SAFETY: T is f32 and AVX-512 is supported (Problem::new applies
                // or_scalar); each source row has cols − cb ≥ 1 contiguous elements of its
                // head's row r; the output rows (r·cols + cb + k)·16 for
                // k < min(16, cols − cb) lie inside dst (asserted above).
                unsafe {
                    efa_num::simd::transpose16::transpose16_at_f32(
                        &from,
                        GROUP,
                        (cols - cb).min(16),
                        &into,
                        GROUP,
                    )
                };
            }
        }
        return;
    }
    for r in 0..rows {
        for c in 0..cols {
            let at = (r * cols + c) * GROUP;
            for (g, &b) in base.iter().enumerate() {
                // SAFETY: r < rows ≤ the head's rows and c < cols address its elements.
                dst[at + g] = unsafe { *b.offset(r as isize * s[2] + c as isize * s[3]) };
            }
        }
    }
}

/// Rows ahead that [`pack`] prefetches in each head.
const PREFETCH_ROWS: usize = 4;

/// The inverse of [`pack`] for the first `outs.len()` lanes: row `r < rows` of head `g` gets
/// `src[(r·cols + c)·GROUP + g]` for `c < cols`, written at `outs[g] + r·cols + c` (each head's
/// rows contiguous).
///
/// # Safety
/// `outs[g]` valid for `rows·cols` writes, not aliasing `src` or each other.
unsafe fn unpack<T: Real>(isa: simd::Isa, src: &[T], rows: usize, cols: usize, outs: &[*mut T]) {
    let n = outs.len();
    assert!(n <= GROUP && src.len() >= rows * cols * GROUP);
    #[cfg(target_arch = "x86_64")]
    if isa == simd::Isa::Avx512 && simd::elem_kind::<T>() == simd::ElemKind::F32 && n > 0 {
        for r in 0..rows {
            for cb in (0..cols).step_by(16) {
                let w = (cols - cb).min(16);
                let from = std::array::from_fn(|k| {
                    src.as_ptr()
                        .wrapping_add((r * cols + cb + k) * GROUP)
                        .cast::<f32>()
                });
                let to = std::array::from_fn(|g| {
                    outs[g.min(n - 1)].wrapping_add(r * cols + cb).cast::<f32>()
                });
                // SAFETY: T is f32, AVX-512 supported; the w source rows of 16 lanes lie in
                // src (asserted); head g < n gets w elements of its row r (caller's contract).
                unsafe { efa_num::simd::transpose16::transpose16_at_f32(&from, w, n, &to, w) };
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == simd::Isa::Avx2 && simd::elem_kind::<T>() == simd::ElemKind::F32 && n > 0 {
        if n == GROUP {
            let to: [*mut f32; GROUP] = std::array::from_fn(|g| outs[g].cast());
            // SAFETY: T is f32, AVX2 supported; src holds rows·cols·GROUP elements (asserted);
            // each of the GROUP heads gets rows·cols elements (caller's contract).
            unsafe {
                efa_num::simd::transpose8::unpack16_f32(src.as_ptr().cast(), (rows, cols), &to)
            };
            return;
        }
        for r in 0..rows {
            for cb in (0..cols).step_by(8) {
                let w = (cols - cb).min(8);
                for hb in (0..n).step_by(8) {
                    let from = std::array::from_fn(|k| {
                        src.as_ptr()
                            .wrapping_add((r * cols + cb + k) * GROUP + hb)
                            .cast::<f32>()
                    });
                    let to = std::array::from_fn(|g| {
                        outs[(hb + g).min(n - 1)]
                            .wrapping_add(r * cols + cb)
                            .cast::<f32>()
                    });
                    let heads = (n - hb).min(8);
                    // SAFETY: T is f32, AVX2 supported; the w source rows of 8 lanes from lane
                    // hb lie in src (asserted); head hb + g < n gets w elements of its row r
                    // (caller's contract).
                    unsafe {
                        efa_num::simd::transpose8::transpose8_at_f32(&from, w, heads, &to, w)
                    };
                }
            }
        }
        return;
    }
    let _ = isa;
    for (g, &o) in outs.iter().enumerate() {
        for idx in 0..rows * cols {
            // SAFETY: idx < rows·cols (caller's contract).
            unsafe { o.add(idx).write(src[idx * GROUP + g]) };
        }
    }
}

/// Raw output pointer shared by the tasks; each task writes only the heads of its group.
#[derive(Clone, Copy)]
struct Out<T>(*mut MaybeUninit<T>);
// SAFETY: tasks write disjoint elements (the heads of distinct groups) and nothing reads them
// until every task has finished.
unsafe impl<T: Send> Send for Out<T> {}
// SAFETY: as for `Send`: a shared `Out` only hands out its pointer, through which the tasks
// write disjoint elements (each group's heads) and nothing reads until all have finished.
unsafe impl<T: Send> Sync for Out<T> {}

/// Forward (see [`crate::Attention::forward`]); the caller checked [`applies`].
pub(crate) fn forward<T: Real>(p: &Problem<T>) -> AttnOut<T> {
    let (nq, dv) = (p.nq, p.dv);
    let mut o = uninit4::<T>((p.batch, p.heads, nq, dv));
    let mut lse = uninit3::<T>((p.batch, p.heads, nq));
    let (heads, groups) = groups(p);
    let (op, lp) = (Out(o.as_mut_ptr()), Out(lse.as_mut_ptr()));
    // One group is 16 heads: a job of its own (the tile kernel's jobs take 4 heads).
    run_tasks_min(
        p.par,
        groups,
        1,
        || Reused::get(p, false),
        |sc, g| group_forward(p, sc, g, &heads[g.start..g.start + g.n], op, lp),
    );
    // SAFETY: the groups cover every head once and `group_forward` writes all its elements.
    unsafe {
        AttnOut {
            o: o.assume_init(),
            lse: lse.assume_init(),
        }
    }
}

/// One group's forward: pack, run the body, finish each head's rows as the tile kernel does
/// (`o = acc·(1/l)`, `lse = m + ln l`; `o = 0`, `lse = −∞` without a visible key; NaN when
/// `l` is NaN).
fn group_forward<T: Real>(
    p: &Problem<T>,
    sc: &mut Scratch<T>,
    g: Group,
    bhs: &[usize],
    o: Out<T>,
    lse: Out<T>,
) {
    let (nq, dv) = (p.nq, p.dv);
    if g.c > 0 {
        pack(p, &p.q, bhs, nq, &mut sc.qt);
        pack(p, &p.k, bhs, g.c, &mut sc.kt);
        pack(p, &p.v, bhs, g.c, &mut sc.vt);
        let x = sc.dims(p, g, bhs[0]);
        let () = simd_by_kind!(T, E => unsafe {
            // SAFETY: buffers hold nq·d, c·d, c·dv, nq·c, nq·dv, nq, nq lanes-wide rows; the
            // variant is supported (Problem::new applies or_scalar).
            body::forward_d::<E>(p.isa, x, *(&p.scale as *const T).cast::<E>(),
                (sc.qt.as_ptr().cast(), sc.kt.as_ptr().cast(), sc.vt.as_ptr().cast()),
                (sc.s.as_mut_ptr().cast(), sc.acc.as_mut_ptr().cast()),
                (sc.m.as_mut_ptr().cast(), sc.l.as_mut_ptr().cast()))
        });
    }
    // The body left o = acc·(1/l) on every lane; the lanes of rows without a positive sum
    // are replaced (rows without keys included: their l is 0).
    for (lane, &bh) in bhs.iter().enumerate() {
        for i in 0..nq {
            let l = if g.c > 0 && sc.cnt[i] > 0 {
                sc.l[i * GROUP + lane]
            } else {
                T::ZERO
            };
            let lse_i = if l > T::ZERO {
                sc.m[i * GROUP + lane] + l.ln()
            } else {
                let (o, ls) = if l.is_nan() {
                    (T::NAN, T::NAN)
                } else {
                    (T::ZERO, T::NEG_INFINITY)
                };
                for e in 0..dv {
                    sc.acc[(i * dv + e) * GROUP + lane] = o;
                }
                ls
            };
            // SAFETY: this group alone writes head bh's rows (see `Out`).
            unsafe { (*lse.0.add(bh * nq + i)).write(lse_i) };
        }
    }
    let outs: Vec<*mut T> = bhs
        .iter()
        .map(|&bh| o.0.wrapping_add(bh * nq * dv).cast::<T>())
        .collect();
    // SAFETY: head bh's nq·dv outputs are written by this group alone (see `Out`).
    unsafe { unpack(p.isa, &sc.acc, nq, dv, &outs) };
}

/// Backward (see [`crate::Attention::backward`]) from the forward's `o` and `lse`; the caller
/// checked [`applies`] and the shapes of `o`, `lse`, `d_o` and `d_lse`.
pub(crate) fn backward<'v, T: Real>(
    p: &Problem<'_, T>,
    (o, lse): (ArrayView4<'v, T>, ArrayView3<'v, T>),
    d_o: ArrayView4<'v, T>,
    d_lse: Option<ArrayView3<'v, T>>,
) -> AttnGrads<T> {
    let (nq, nk, d, dv) = (p.nq, p.nk, p.d, p.dv);
    let mut dq = uninit4::<T>((p.batch, p.heads, nq, d));
    let mut dk = uninit4::<T>((p.batch, p.heads, nk, d));
    let mut dvv = uninit4::<T>((p.batch, p.heads, nk, dv));
    let (heads, groups) = groups(p);
    let ptrs = [
        Out(dq.as_mut_ptr()),
        Out(dk.as_mut_ptr()),
        Out(dvv.as_mut_ptr()),
    ];
    let ctx = BackCtx {
        p,
        o,
        lse,
        d_o,
        d_lse,
    };
    // One group is 16 heads: a job of its own (the tile kernel's jobs take 4 heads).
    run_tasks_min(
        p.par,
        groups,
        1,
        || Reused::get(p, true),
        |sc, g| group_backward(&ctx, sc, g, &heads[g.start..g.start + g.n], ptrs),
    );
    // SAFETY: the groups cover every head once and `group_backward` writes all its elements.
    unsafe {
        AttnGrads {
            dq: dq.assume_init(),
            dk: dk.assume_init(),
            dv: dvv.assume_init(),
        }
    }
}

struct BackCtx<'c, 'a, 'v, T> {
    p: &'c Problem<'a, T>,
    o: ArrayView4<'v, T>,
    lse: ArrayView3<'v, T>,
    d_o: ArrayView4<'v, T>,
    d_lse: Option<ArrayView3<'v, T>>,
}

fn group_backward<T: Real>(
    cx: &BackCtx<'_, '_, '_, T>,
    sc: &mut Scratch<T>,
    g: Group,
    bhs: &[usize],
    [dq, dk, dvv]: [Out<T>; 3],
) {
    let p = cx.p;
    let (nq, nk, d, dv, c) = (p.nq, p.nk, p.d, p.dv, g.c);
    if c > 0 {
        pack(p, &p.q, bhs, nq, &mut sc.qt);
        pack(p, &p.k, bhs, c, &mut sc.kt);
        pack(p, &p.v, bhs, c, &mut sc.vt);
        pack(p, &cx.d_o, bhs, nq, &mut sc.dot);
        let (mut dd, mut lo) = ([T::ZERO; crate::BLOCK_Q], [T::ZERO; crate::BLOCK_Q]);
        let mut dead = [false; crate::BLOCK_Q];
        for g in 0..GROUP {
            let bh = bhs[g.min(bhs.len() - 1)];
            let (oh, gh) = (p.head(&cx.o, bh), p.head(&cx.d_o, bh));
            // D as the tile kernel forms it (nq ≤ BLOCK_Q rows: one query tile).
            d_rows(
                p,
                (&oh, &gh),
                cx.d_lse.as_ref(),
                bh,
                0,
                (&mut dd[..nq], &mut lo[..nq]),
            );
            let m = &mut sc.m;
            head3_each(&cx.lse, p.heads, bh, 0, nq, |i, x| {
                m[i * GROUP + g] = x;
                dead[i] |= x == T::NEG_INFINITY;
            });
            for (i, (&x, &y)) in dd[..nq].iter().zip(&lo[..nq]).enumerate() {
                sc.l[i * GROUP + g] = x;
                sc.dlo[i * GROUP + g] = y;
            }
        }
        let x = sc.dims(p, g, bhs[0]);
        let scale = p.scale;
        let [gq, gk, gv] = &mut sc.g;
        let () = simd_by_kind!(T, E => unsafe {
            // SAFETY: buffers sized by Scratch::fit for nq queries and c ≤ nk keys, `dead` for
            // nq rows; the three outputs are distinct buffers; the variant is supported.
            body::backward_d::<E>(p.isa, x, *(&scale as *const T).cast::<E>(),
                (sc.qt.as_ptr().cast(), sc.kt.as_ptr().cast(), sc.vt.as_ptr().cast(),
                    sc.dot.as_ptr().cast()),
                (sc.m.as_ptr().cast(), sc.l.as_ptr().cast(), sc.dlo.as_ptr().cast(), dead.as_ptr()),
                (sc.s.as_mut_ptr().cast(), sc.ds.as_mut_ptr().cast()),
                [gq.as_mut_ptr().cast(), gk.as_mut_ptr().cast(), gv.as_mut_ptr().cast()])
        });
    }
    // dQ = scale·acc, dK = scale·acc and dV = 1·acc on the keys the group sees (all zero
    // accumulators without any), the hidden keys' rows as the tile kernel writes them.
    let [gq, gk, gv] = &mut sc.g;
    let (gq, gk, gv) = (
        &mut gq[..nq * d * GROUP],
        &mut gk[..c * d * GROUP],
        &mut gv[..c * dv * GROUP],
    );
    if c == 0 {
        gq.fill(T::ZERO);
    }
    let scale = p.scale;
    for x in gq.iter_mut() {
        *x = scale * *x;
    }
    for x in gk.iter_mut() {
        *x = scale * *x;
    }
    for x in gv.iter_mut() {
        *x = T::ONE * *x;
    }
    let at = |ptr: Out<T>, bh: usize, len: usize| ptr.0.wrapping_add(bh * len).cast::<T>();
    let heads = |ptr: Out<T>, len: usize| -> Vec<*mut T> {
        bhs.iter().map(|&bh| at(ptr, bh, len)).collect()
    };
    // SAFETY: this group alone writes head bh's rows of the three gradients (see `Out`).
    unsafe {
        unpack(p.isa, gq, nq, d, &heads(dq, nq * d));
        unpack(p.isa, gk, c, d, &heads(dk, nk * d));
        unpack(p.isa, gv, c, dv, &heads(dvv, nk * dv));
        for &bh in bhs {
            for idx in c * d..nk * d {
                at(dk, bh, nk * d).add(idx).write(T::ZERO);
            }
            for idx in c * dv..nk * dv {
                at(dvv, bh, nk * dv).add(idx).write(T::ZERO);
            }
        }
    }
}
