//! Forward pass: online softmax over key tiles per (batch, head, query tile).

use crate::micro::{gemm, online_softmax_t, padded, PAD};
use crate::problem::{
    a_operand, b_operand, pack_cols, prefetch_small, run_tasks, split_lens, tiles, uninit3,
    uninit4, zeros, AccRows, Problem,
};
use crate::{reference, Attention, AttnError, AttnOut, BLOCK_K, BLOCK_Q};
use efa_num::{MatMut, MatRef, Real};
use ndarray::{ArrayView2, ArrayView4};
use std::mem::MaybeUninit;

/// Per-job scratch: the transposed query tile `Qᵀ`, the transposed score tile `Sᵀ` (keys ×
/// queries, so the softmax statistics are vectorised across queries), the accumulator (`accᵀ`,
/// dv × queries, or row-major `acc`, queries × padded dv — see [`row_major`]), the running max /
/// sum per query, the rescaling factors of a row-major accumulator, a padded `V` tile when `V`
/// cannot be read in place, and the visible key counts per query with the column groups of
/// equal visible row count.
struct Scratch<T> {
    qt: Vec<T>,
    st: Vec<T>,
    acc: Vec<T>,
    m: Vec<T>,
    l: Vec<T>,
    alpha: Vec<T>,
    vb: Vec<T>,
    cnt: Vec<usize>,
    groups: Vec<(usize, usize, usize)>,
}

impl<T: Real> Scratch<T> {
    fn new(p: &Problem<T>) -> Self {
        let bq = BLOCK_Q.min(p.nq).max(1);
        let bk = BLOCK_K.min(p.nk).max(1);
        let mqp = padded(bq);
        let dvp = padded(p.dv);
        Scratch {
            qt: zeros(p.d * mqp),
            st: zeros(bk * mqp),
            acc: zeros((p.dv * mqp).max(bq * dvp)),
            m: zeros(mqp),
            l: zeros(mqp),
            alpha: zeros(mqp),
            vb: Vec::new(),
            cnt: vec![0; bq],
            groups: Vec::with_capacity(mqp / PAD),
        }
    }
}

/// Whether a tile of `mq` queries keeps its output accumulator row-major (`mq` × padded `dv`,
/// updated by `acc += P·V` with `V` rows as vectors) rather than transposed (`dv` × padded
/// `mq`, `accᵀ += Vᵀ·Pᵀ`): whichever pads less. Short sequences with small heads (`mq = 50`,
/// `dv = 16`) waste a fifth of the transposed products on padding queries; tiles of 64
/// queries keep the transposed layout. Depends only on the shapes.
fn row_major(mq: usize, dv: usize) -> bool {
    mq * padded(dv) < dv * padded(mq)
}

/// Query rows per `acc += P·V` call of the row-major layout, each call summing only over the
/// keys its last (widest) row sees.
const ROW_GROUP: usize = 8;

impl<'a, T: Real> Attention<ArrayView4<'a, T>> {
    /// Attention forward (the kernel): `o` `[B, H, Nq, Dv]` and `lse` `[B, H, Nq]` with
    /// `lseᵢ = ln Σ_{j∈V(i)} exp(scale·⟨qᵢ, kⱼ⟩)` and
    /// `oᵢ = Σ_{j∈V(i)} exp(scale·⟨qᵢ, kⱼ⟩ − lseᵢ)·vⱼ` over the keys `V(i)` the mask shows
    /// query `i` (`oᵢ = 0`, `lseᵢ = −∞` for rows with no visible key).
    ///
    /// `q` is `[B, H, Nq, D]`, `k` `[B, H, Nk, D]`, `v` `[B, H, Nk, Dv]` (see the
    /// [layout table](crate#layouts)); views may have any strides and are read in place.
    ///
    /// # Errors
    /// Shape mismatches (naming the tensor and its shape), a mask that does not fit (naming
    /// the field and index), or a scale that is not finite in `T`.
    pub fn forward(&self) -> Result<AttnOut<T>, AttnError> {
        forward_here(self)
    }

    /// Useful floating-point operations of one forward pass, `2·(D + Dv)` per visible
    /// (batch, head, query, key) quadruple (`QKᵀ` and `PV`; exponentials not counted), i.e.
    /// `4·B·H·Nq·Nk·D` without a mask and `4·B·H·Nq(Nq+1)/2·D` causal when `Nq = Nk`,
    /// `Dv = D`. Backward is counted as 2.5× this (the FlashAttention papers' convention).
    ///
    /// # Errors
    /// A mask that does not fit ([`Mask::check`](crate::Mask::check)).
    pub fn forward_flops(&self) -> Result<u64, AttnError> {
        let s = self.q.shape();
        let pairs = self
            .mask
            .visible_pairs(s[0], s[1], s[2], self.k.shape()[2])?;
        Ok(pairs.saturating_mul(2 * (s[3] + self.v.shape()[3]) as u64))
    }
}

efa_num::concrete! {
    /// [`forward_kernel`], compiled in this crate for each element type.
    fn forward_here<'a, 'b, T>(a: &'b Attention<ArrayView4<'a, T>>) -> Result<AttnOut<T>, AttnError>
        = forward_kernel;
}

/// The kernel behind [`Attention::forward`].
fn forward_kernel<T: Real>(a: &Attention<ArrayView4<'_, T>>) -> Result<AttnOut<T>, AttnError> {
    if reference::<T>() {
        // The double-double reference type has no SIMD kernel: the naive definition,
        // computed in it.
        return crate::naive::forward_in::<T, T>(a);
    }
    let p = Problem::new(a)?;
    if crate::short::applies(&p) {
        return Ok(crate::short::forward(&p));
    }
    // Every element is written exactly once by the tasks below (no zero-fill pass).
    let mut o = uninit4::<T>((p.batch, p.heads, p.nq, p.dv));
    let mut lse = uninit3::<T>((p.batch, p.heads, p.nq));
    let bh_count = p.batch * p.heads;
    let per_head = tiles(p.nq, BLOCK_Q).count();
    let o_parts = split_lens(
        o.as_slice_mut().expect("fresh array is contiguous"),
        (0..bh_count).flat_map(|_| tiles(p.nq, BLOCK_Q).map(|(_, n)| n * p.dv)),
    );
    let l_parts = split_lens(
        lse.as_slice_mut().expect("fresh array is contiguous"),
        (0..bh_count).flat_map(|_| tiles(p.nq, BLOCK_Q).map(|(_, n)| n)),
    );
    let tasks: Vec<_> = o_parts
        .into_iter()
        .zip(l_parts)
        .enumerate()
        .map(|(t, (o, l))| (t / per_head.max(1), (t % per_head.max(1)) * BLOCK_Q, o, l))
        .collect();
    run_tasks(
        p.par,
        tasks,
        || Scratch::new(&p),
        |sc, (bh, i0, o, l)| tile(&p, sc, bh, i0, o, l),
    );
    // SAFETY: the tasks cover every (b, h, row) once and `tile` writes every element of its
    // rows of `o` and `lse`.
    Ok(unsafe {
        AttnOut {
            o: o.assume_init(),
            lse: lse.assume_init(),
        }
    })
}

/// The query side of a forward task: rows `i0 .. i0 + mq` of head `(b, h)`, `mqp` their
/// padded count (the stride of `Qᵀ` and `Sᵀ`, and the length of `m`, `l`), and the output
/// accumulator: row-major (`mq` rows of `dv`) when `rm` (see [`row_major`]), else transposed
/// (`dv` rows of `mq`).
#[derive(Clone, Copy)]
struct Queries {
    b: usize,
    h: usize,
    i0: usize,
    mq: usize,
    mqp: usize,
    rm: bool,
    acc: AccRows,
}

impl Queries {
    fn new(b: usize, h: usize, i0: usize, mq: usize, dv: usize) -> Self {
        let rm = row_major(mq, dv);
        Queries {
            b,
            h,
            i0,
            mq,
            mqp: padded(mq),
            rm,
            acc: if rm {
                AccRows::new(mq, dv)
            } else {
                AccRows::new(dv, mq)
            },
        }
    }
}

/// A key tile of a forward task: key rows `j0 .. j0 + bk` of the head's `K` and `V`, and
/// whether it is the task's first (which overwrites a row-major accumulator).
struct Keys<'v, T> {
    j0: usize,
    bk: usize,
    first: bool,
    k: ArrayView2<'v, T>,
    v: ArrayView2<'v, T>,
}

/// One (batch, head, query tile) task: rows `i0 .. i0 + lse.len()`, streamed over the key
/// tiles with a running max `m`, sum `l` and output accumulator, then normalised.
fn tile<T: Real>(
    p: &Problem<T>,
    sc: &mut Scratch<T>,
    bh: usize,
    i0: usize,
    o: &mut [MaybeUninit<T>],
    lse: &mut [MaybeUninit<T>],
) {
    let (b, h) = p.split(bh);
    let q = Queries::new(b, h, i0, lse.len(), p.dv);
    let (qh, kh, vh) = (p.head(&p.q, bh), p.head(&p.k, bh), p.head(&p.v, bh));
    // The next head's operands (from its first task), and this task's output rows.
    if i0 == 0 {
        p.prefetch_head([&p.q, &p.k, &p.v], bh + 1);
    }
    prefetch_small(&[&*o]);
    pack_cols(p.isa, &qh, i0, q.mq, &mut sc.qt, q.mqp);
    sc.m[..q.mqp].fill(T::NEG_INFINITY);
    sc.l[..q.mqp].fill(T::ZERO);
    if !q.rm {
        q.acc.clear(&mut sc.acc);
    }
    for (t, (j0, bk)) in tiles(p.hi_max(b, i0, q.mq), BLOCK_K).enumerate() {
        let k = Keys {
            j0,
            bk,
            first: t == 0,
            k: kh,
            v: vh,
        };
        visible(p, sc, &q, &k);
        scores(p, sc, &q, &k);
        mask_scores(p, sc, &q, &k);
        if q.rm {
            accumulate_rows(p, sc, &q, &k);
        } else {
            accumulate_t(p, sc, &q, &k);
        }
    }
    finish(p, sc, &q, o, lse);
}

/// The visible key counts `cnt` of the tile's query columns and their column groups.
#[inline(always)]
fn visible<T: Real>(p: &Problem<T>, sc: &mut Scratch<T>, q: &Queries, k: &Keys<T>) {
    let mq = q.mq;
    // Masks: query column r sees key rows j < cnt[r] (prefix rules; cnt grows with r).
    p.rules.counts(q.b, q.i0, k.j0, k.bk, &mut sc.cnt[..mq]);
    // Column groups [c0, c1) of PAD queries with the same number of key rows any of them
    // sees: rows at or past it are −∞ for the whole group, so neither product nor softmax
    // touches them (the causal triangle is skipped).
    sc.groups.clear();
    for c0 in (0..q.mqp).step_by(PAD) {
        let lim = sc.cnt[(c0 + PAD).min(mq) - 1];
        match sc.groups.last_mut() {
            Some(g) if g.2 == lim => g.1 = c0 + PAD,
            _ => sc.groups.push((c0, c0 + PAD, lim)),
        }
    }
}

/// `Sᵀ = scale·K·Qᵀ` (keys × queries) of a key tile, on the entries the softmax reads.
#[inline(always)]
fn scores<T: Real>(p: &Problem<T>, sc: &mut Scratch<T>, q: &Queries, k: &Keys<T>) {
    let (mq, mqp) = (q.mq, q.mqp);
    // By bands of key rows: key row j is computed from the start of the group holding the
    // first column that sees it to the last column, which are the entries below each group's
    // row count (the causal triangle is skipped). A band holds the rows first seen in the same
    // group and runs over its whole width in wide register blocks; a product per group of PAD
    // columns would use one-vector blocks and load each key element again for every group.
    let ka = a_operand(&k.k, k.j0);
    let (mut j, mut f) = (0, 0);
    let seen = if mq == 0 { 0 } else { sc.cnt[mq - 1] };
    while j < seen {
        while sc.cnt[f] <= j {
            f += 1;
        }
        let c0 = f / PAD * PAD;
        // Rows before cnt[last column of the group] are first seen in this group.
        let je = sc.cnt[(c0 + PAD).min(mq) - 1];
        let a = ka.down(j);
        // SAFETY: K rows j0 + j .. j0 + je (< hi, inside the view, d columns) through its
        // strides; qt is d×mqp and st is bk×mqp with columns c0..mq (c0 a multiple of PAD,
        // the vector tail within mqp), rows j..je < bk.
        unsafe {
            gemm(
                p.isa,
                a.view(je - j, p.d),
                MatRef::row_major(&sc.qt[c0..], p.d, mq - c0, mqp),
                MatMut::row_major(&mut sc.st[j * mqp + c0..], je - j, mq - c0, mqp),
                false,
                p.scale,
            );
        }
        j = je;
    }
}

/// Hides the masked entries of `Sᵀ` that the softmax reads (−∞).
#[inline(always)]
fn mask_scores<T: Real>(p: &Problem<T>, sc: &mut Scratch<T>, q: &Queries, k: &Keys<T>) {
    let (mq, mqp) = (q.mq, q.mqp);
    // Key row j is hidden from the first f(j) columns: set those that the softmax reads
    // (columns of groups whose row count exceeds j) to −∞; then element-wise rules. When
    // every column sees the same rows (no mask, key lengths), no row is hidden from a column
    // the softmax reads: rows below the count are seen by all, rows at or past it by none.
    let uniform = mq == 0 || sc.cnt[0] == sc.cnt[mq - 1];
    let scanned = if uniform { 0 } else { k.bk };
    let (mut f, mut g) = (0, 0);
    for j in 0..scanned {
        while f < mq && sc.cnt[f] <= j {
            f += 1;
        }
        while g < sc.groups.len() && sc.groups[g].2 <= j {
            g += 1;
        }
        let Some(&(c0, _, _)) = sc.groups.get(g) else {
            break;
        };
        if c0 < f {
            sc.st[j * mqp + c0..j * mqp + f].fill(T::NEG_INFINITY);
        }
    }
    if p.rules.has_pointwise() {
        for r in 0..mq {
            for j in 0..sc.cnt[r] {
                if !p.rules.pointwise(q.b, q.h, q.i0 + r, k.j0 + j) {
                    sc.st[j * mqp + r] = T::NEG_INFINITY;
                }
            }
        }
    }
}

/// Transposed accumulator: online softmax of the tile (rescaling `accᵀ` in it), then
/// `accᵀ += Vᵀ·Pᵀ` per column group.
#[inline(always)]
fn accumulate_t<T: Real>(p: &Problem<T>, sc: &mut Scratch<T>, q: &Queries, k: &Keys<T>) {
    let (mq, mqp, dv) = (q.mq, q.mqp, p.dv);
    // SAFETY: buffers sized by Scratch::new for this tile.
    unsafe {
        online_softmax_t(
            p.isa,
            &sc.cnt[..mq],
            (&mut sc.st, k.bk, mqp),
            (&mut sc.m, &mut sc.l),
            (&mut sc.acc, dv),
            None,
        )
    };
    let va = a_operand(&k.v, k.j0);
    for &(c0, c1, lim) in &sc.groups {
        if lim == 0 {
            continue;
        }
        // accᵀ += Vᵀ·Pᵀ over the key rows < lim (Pᵀ is 0 below them; Vᵀ read through
        // transposed strides).
        // SAFETY: V rows j0..j0+lim (dv columns), st is bk×mqp, acc holds dv×mqp.
        unsafe {
            let n = c1.min(mq) - c0;
            gemm(
                p.isa,
                va.view(lim, dv).t(),
                MatRef::row_major(&sc.st[c0..], lim, n, mqp),
                MatMut::row_major(&mut sc.acc[c0..], dv, n, mqp),
                true,
                T::ONE,
            );
        }
    }
}

/// Row-major accumulator: online softmax of the tile (keeping the rescaling factors), then
/// `acc = α∘acc + P·V` by groups of [`ROW_GROUP`] query rows.
#[inline(always)]
fn accumulate_rows<T: Real>(p: &Problem<T>, sc: &mut Scratch<T>, q: &Queries, k: &Keys<T>) {
    let (mq, mqp, dv, bk, acc) = (q.mq, q.mqp, p.dv, k.bk, q.acc);
    // SAFETY: buffers sized by Scratch::new for this tile (dv = 0: acc untouched).
    unsafe {
        online_softmax_t(
            p.isa,
            &sc.cnt[..mq],
            (&mut sc.st, bk, mqp),
            (&mut sc.m, &mut sc.l),
            (&mut sc.acc, 0),
            Some(&mut sc.alpha),
        )
    };
    if !k.first {
        for r in 0..mq {
            let a = sc.alpha[r];
            for x in acc.row_mut(&mut sc.acc, r) {
                *x *= a;
            }
        }
    }
    if sc.vb.len() < bk * acc.w {
        sc.vb.resize(BLOCK_K.min(p.nk) * acc.w, T::ZERO);
    }
    let vb = b_operand(&k.v, k.j0, bk, &mut sc.vb);
    // acc += P·V per group of ROW_GROUP queries over the keys its last row sees (P is
    // read from Pᵀ through transposed strides); the first key tile overwrites.
    let mut r0 = 0;
    while r0 < mq {
        let kr = sc.cnt[(r0 + ROW_GROUP).min(mq) - 1];
        let mut r1 = (r0 + ROW_GROUP).min(mq);
        while r1 < mq && sc.cnt[(r1 + ROW_GROUP).min(mq) - 1] == kr {
            r1 = (r1 + ROW_GROUP).min(mq);
        }
        if k.first || kr > 0 {
            // SAFETY: Pᵀ columns r0..r1 (< mq ≤ mqp), rows < kr ≤ bk of st; V rows
            // j0..j0+kr of the operand (dvp-wide contiguous rows, dvp = acc.w a multiple of
            // PAD); acc rows r0..r1 of width dvp inside the scratch.
            unsafe {
                gemm(
                    p.isa,
                    MatRef::new(&sc.st[r0..], r1 - r0, kr, 1, mqp as isize),
                    vb.view(kr, dv),
                    acc.rows_mut(&mut sc.acc, r0, r1 - r0, dv),
                    !k.first,
                    T::ONE,
                );
            }
        }
        r0 = r1;
    }
}

/// Finish: `o = acc / l`, `lse = m + ln l`; rows that saw nothing get `o = 0`, `lse = −∞`;
/// rows with a NaN score get NaN.
fn finish<T: Real>(
    p: &Problem<T>,
    sc: &Scratch<T>,
    q: &Queries,
    o: &mut [MaybeUninit<T>],
    lse: &mut [MaybeUninit<T>],
) {
    let (acc, dv) = (q.acc, p.dv);
    for r in 0..q.mq {
        let l = sc.l[r];
        let out = &mut o[r * dv..(r + 1) * dv];
        if l > T::ZERO {
            let inv = T::ONE / l;
            if q.rm {
                for (o, &a) in out.iter_mut().zip(acc.row(&sc.acc, r)) {
                    o.write(a * inv);
                }
            } else {
                for (c, o) in out.iter_mut().enumerate() {
                    o.write(sc.acc[c * acc.w + r] * inv);
                }
            }
            lse[r].write(sc.m[r] + l.ln());
        } else if l.is_nan() {
            // A NaN score (from a NaN query or key element) reaches l through exp: the row's
            // output and log-normaliser are NaN, never the fully-masked 0 and −∞.
            out.fill(MaybeUninit::new(T::NAN));
            lse[r].write(T::NAN);
        } else {
            out.fill(MaybeUninit::new(T::ZERO));
            lse[r].write(T::NEG_INFINITY);
        }
    }
}
