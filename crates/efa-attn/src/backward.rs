//! Backward pass, mirroring the forward: forward computed `P = exp(S − LSE)` tile by tile and
//! `O = P·V`, so per tile we recompute `P`, then `dV += Pᵀ·dO`, `dP = dO·Vᵀ`,
//! `dS = P ∘ (dP − D)` with `Dᵢ = ⟨dOᵢ, Oᵢ⟩ − dlseᵢ`, `dQ += scale·dS·K`, `dK += scale·dSᵀ·Q`.
//!
//! No atomics: either one task per (batch, head) computes everything in a fixed order, or two
//! passes split the work so that each task owns its output rows (key tiles own `dK`, `dV`;
//! query tiles own `dQ`). See [`crate::FUSED_MIN_HEADS`].

use crate::micro::{dot_rows, ds_row, gemm, padded, probabilities, scale_rows};
use crate::problem::{
    a_operand, b_operand, expect_shape, head3_each, pack_cols, pads, run_tasks, split_lens, tiles,
    zeros, Mat, Problem,
};
use crate::{
    Attention, AttnError, AttnGrads, AttnOutView, BLOCK_K, BLOCK_Q, FUSED_MAX_LEN, FUSED_MIN_HEADS,
};
use efa_num::Real;
use ndarray::{Array4, ArrayView2, ArrayView3, ArrayView4};
use std::mem::MaybeUninit;

struct Scratch<T> {
    qb: Vec<T>,
    dob: Vec<T>,
    dd: Vec<T>,
    lse: Vec<T>,
    kt: Vec<T>,
    kp: Vec<T>,
    vt: Vec<T>,
    s: Vec<T>,
    dp: Vec<T>,
    dk: Vec<T>,
    dv: Vec<T>,
    dq: Vec<T>,
    cnt: Vec<usize>,
    rows: Vec<(usize, usize, usize)>,
    keys: Vec<(usize, usize, usize)>,
}

impl<T: Real> Scratch<T> {
    /// Buffers for tiles, with `rows` query rows held at once (the whole head when fused).
    fn new(p: &Problem<T>, rows: usize) -> Self {
        let (dpad, dvpad) = pads(p);
        let bk = BLOCK_K.min(p.nk).max(1);
        let bq = BLOCK_Q.min(p.nq).max(1);
        let bkp = padded(bk);
        Scratch {
            qb: zeros(rows * dpad),
            dob: zeros(rows * dvpad),
            dd: zeros(rows),
            lse: zeros(rows),
            kt: zeros(p.d * bkp),
            kp: zeros(bk * dpad),
            vt: zeros(p.dv * bkp),
            s: zeros(bq * bkp),
            dp: zeros(bq * bkp),
            dk: zeros(bk * dpad),
            dv: zeros(bk * dvpad),
            dq: zeros(rows * dpad),
            cnt: vec![0; bq],
            rows: Vec::with_capacity(bq.div_ceil(ROW_GROUP)),
            keys: Vec::with_capacity(bk.div_ceil(ROW_GROUP)),
        }
    }
}

/// Query-side operands of a block of rows: `Q` and `dO` as left (strided) and right
/// (contiguous padded) operands.
#[derive(Clone, Copy)]
struct QSide<T> {
    qa: Mat<T>,
    qb: Mat<T>,
    doa: Mat<T>,
    dob: Mat<T>,
}

impl<T> QSide<T> {
    fn down(self, r: usize) -> Self {
        QSide {
            qa: self.qa.down(r),
            qb: self.qb.down(r),
            doa: self.doa.down(r),
            dob: self.dob.down(r),
        }
    }
}

impl<'a, T: Real> Attention<ArrayView4<'a, T>> {
    /// Attention backward (the kernel): given the forward's results `out` (`o`, `lse`) and
    /// the cotangents `d_o` `[B, H, Nq, Dv]` and optionally `d_lse` `[B, H, Nq]` (`None` =
    /// zero), returns the gradients
    /// `dSᵢⱼ = Pᵢⱼ·(⟨dOᵢ, vⱼ⟩ − ⟨dOᵢ, oᵢ⟩ + dlseᵢ)`, `dqᵢ = scale·Σⱼ dSᵢⱼ kⱼ`,
    /// `dkⱼ = scale·Σᵢ dSᵢⱼ qᵢ`, `dvⱼ = Σᵢ Pᵢⱼ dOᵢ`, with `P = exp(scale·QKᵀ − lse)` on visible
    /// pairs and 0 elsewhere (rows with `lse = −∞` get zero gradients). `self` must hold the
    /// inputs, mask and scale of the forward call that produced `out`.
    ///
    /// # Errors
    /// Shape mismatches (naming the tensor: `q`, `k`, `v`, `o`, `lse`, `d_o`, `d_lse`), an
    /// unfit mask, or a scale that is not finite in `T`.
    pub fn backward(
        &self,
        out: AttnOutView<'_, T>,
        d_o: ArrayView4<'_, T>,
        d_lse: Option<ArrayView3<'_, T>>,
    ) -> Result<AttnGrads<T>, AttnError> {
        let p = Problem::new(self)?;
        let (o, lse) = (out.o, out.lse);
        let (bsz, hn, nq, nk, d, dv) = (p.batch, p.heads, p.nq, p.nk, p.d, p.dv);
        expect_shape("o", o.shape(), &[bsz, hn, nq, dv])?;
        expect_shape("d_o", d_o.shape(), &[bsz, hn, nq, dv])?;
        expect_shape("lse", lse.shape(), &[bsz, hn, nq])?;
        if let Some(g) = &d_lse {
            expect_shape("d_lse", g.shape(), &[bsz, hn, nq])?;
        }
        if crate::reference::<T>() {
            // The double-double reference type: the naive definition, computed in it.
            return crate::naive::backward_in::<T, T>(self, d_o, d_lse);
        }
        if crate::short::applies(&p) {
            let dl = d_lse.as_ref().map(|x| x.view());
            return Ok(crate::short::backward(
                &p,
                (o.view(), lse.view()),
                d_o.view(),
                dl,
            ));
        }
        // Every element is written exactly once by the tasks below (no zero-fill pass).
        let mut dq = Array4::<T>::uninit((bsz, hn, nq, d));
        let mut dk = Array4::<T>::uninit((bsz, hn, nk, d));
        let mut dvv = Array4::<T>::uninit((bsz, hn, nk, dv));
        let bh_count = bsz * hn;
        let (lse_v, d_o_v, o_v) = (lse.view(), d_o.view(), o.view());
        let dl_v = d_lse.as_ref().map(|x| x.view());
        let ctx = Ctx {
            p: &p,
            lse: &lse_v,
            o: &o_v,
            d_o: &d_o_v,
            d_lse: dl_v.as_ref(),
        };
        let dq_s = dq.as_slice_mut().expect("contiguous");
        let dk_s = dk.as_slice_mut().expect("contiguous");
        let dv_s = dvv.as_slice_mut().expect("contiguous");
        if bh_count >= FUSED_MIN_HEADS && nq <= FUSED_MAX_LEN {
            let parts = split_lens(dq_s, (0..bh_count).map(|_| nq * d))
                .into_iter()
                .zip(split_lens(dk_s, (0..bh_count).map(|_| nk * d)))
                .zip(split_lens(dv_s, (0..bh_count).map(|_| nk * dv)))
                .enumerate()
                .map(|(bh, ((a, b), c))| (bh, a, b, c))
                .collect();
            run_tasks(
                p.par,
                parts,
                || Scratch::new(&p, nq.max(1)),
                |sc, (bh, a, b, c)| fused(&ctx, sc, bh, a, b, c),
            );
        } else {
            let kparts: Vec<_> = split_lens(
                dk_s,
                (0..bh_count).flat_map(|_| tiles(nk, BLOCK_K).map(|(_, n)| n * d)),
            )
            .into_iter()
            .zip(split_lens(
                dv_s,
                (0..bh_count).flat_map(|_| tiles(nk, BLOCK_K).map(|(_, n)| n * dv)),
            ))
            .enumerate()
            .collect();
            let per = tiles(nk, BLOCK_K).count().max(1);
            run_tasks(
                p.par,
                kparts,
                || Scratch::new(&p, BLOCK_Q.min(nq).max(1)),
                |sc, (t, (a, b))| key_tile(&ctx, sc, t / per, (t % per) * BLOCK_K, a, b),
            );
            let qparts: Vec<_> = split_lens(
                dq_s,
                (0..bh_count).flat_map(|_| tiles(nq, BLOCK_Q).map(|(_, n)| n * d)),
            )
            .into_iter()
            .enumerate()
            .collect();
            let per = tiles(nq, BLOCK_Q).count().max(1);
            run_tasks(
                p.par,
                qparts,
                || Scratch::new(&p, BLOCK_Q.min(nq).max(1)),
                |sc, (t, a)| query_tile(&ctx, sc, t / per, (t % per) * BLOCK_Q, a),
            );
        }
        // SAFETY: fused tasks write all rows of their head (dK, dV rows past the visible keys as
        // zeros); in two passes every key tile and every query tile is a task writing all its rows.
        Ok(unsafe {
            AttnGrads {
                dq: dq.assume_init(),
                dk: dk.assume_init(),
                dv: dvv.assume_init(),
            }
        })
    }
}

/// `D = rowsum(dO ∘ O) − dlse` of query rows `[i0, i0 + dd.len())` of head `bh` (`o`, `d_o` its
/// `[Nq, Dv]` matrices) into `dd`: `dot_with`'s bits on contiguous rows, a plain sum otherwise.
pub(crate) fn d_rows<T: Real>(
    p: &Problem<T>,
    (oh, doh): (&ArrayView2<T>, &ArrayView2<T>),
    d_lse: Option<&ArrayView3<T>>,
    bh: usize,
    i0: usize,
    dd: &mut [T],
) {
    let mq = dd.len();
    let (oa, ga) = (a_operand(oh, i0), a_operand(doh, i0));
    if oa.cs == 1 && ga.cs == 1 {
        // SAFETY: rows i0 .. i0 + mq < nq of both views, each with dv contiguous elements.
        unsafe { dot_rows(p.isa, p.dv, oa.ptr, oa.rs, ga.ptr, ga.rs, dd) };
    } else {
        for (r, x) in dd.iter_mut().enumerate() {
            let (ro, rg) = (oa.down(r), ga.down(r));
            let mut s = T::ZERO;
            for c in 0..p.dv as isize {
                // SAFETY: row i0 + r < nq and c < dv address elements of the views.
                s += unsafe { *ro.ptr.offset(c * ro.cs) * *rg.ptr.offset(c * rg.cs) };
            }
            *x = s;
        }
    }
    if let Some(dl) = d_lse {
        head3_each(dl, p.heads, bh, i0, mq, |r, g| dd[r] -= g);
    }
}

struct Ctx<'c, 'a, T> {
    p: &'c Problem<'a, T>,
    lse: &'c ArrayView3<'a, T>,
    o: &'c ArrayView4<'a, T>,
    d_o: &'c ArrayView4<'a, T>,
    d_lse: Option<&'c ArrayView3<'a, T>>,
}

impl<T: Real> Ctx<'_, '_, T> {
    /// Query-side operands for rows `[i0, i0+mq)` of head `bh`; puts `lse` and
    /// `D = rowsum(dO ∘ O) − dlse` of those rows in the scratch (forward's lse enters every
    /// score's gradient with weight P, hence the dlse term).
    fn queries(&self, sc: &mut Scratch<T>, bh: usize, i0: usize, mq: usize) -> QSide<T> {
        let p = self.p;
        let (qh, doh, oh) = (p.head(&p.q, bh), p.head(self.d_o, bh), p.head(self.o, bh));
        let lse = &mut sc.lse;
        head3_each(self.lse, p.heads, bh, i0, mq, |r, x| lse[r] = x);
        d_rows(p, (&oh, &doh), self.d_lse, bh, i0, &mut sc.dd[..mq]);
        QSide {
            qa: a_operand(&qh, i0),
            qb: b_operand(&qh, i0, mq, &mut sc.qb),
            doa: a_operand(&doh, i0),
            dob: b_operand(&doh, i0, mq, &mut sc.dob),
        }
    }

    /// Packs key tile `[j0, j0+bk)` of head `bh` (`Kᵀ`, `Vᵀ`) and returns `K` as a right operand.
    fn keys(&self, sc: &mut Scratch<T>, bh: usize, j0: usize, bk: usize) -> Mat<T> {
        let p = self.p;
        let bkp = padded(bk);
        let kh = p.head(&p.k, bh);
        pack_cols(p.isa, &kh, j0, bk, &mut sc.kt, bkp);
        pack_cols(p.isa, &p.head(&p.v, bh), j0, bk, &mut sc.vt, bkp);
        b_operand(&kh, j0, bk, &mut sc.kp)
    }

    /// One (query tile, key tile) pair; query rows `[i0, i0+mq)` with operands `qs`, their
    /// `lse`, `D` and `dQ` accumulator at scratch row `at`.
    #[allow(clippy::too_many_arguments)]
    fn pair(
        &self,
        sc: &mut Scratch<T>,
        bh: usize,
        i0: usize,
        mq: usize,
        at: usize,
        qs: QSide<T>,
        j0: usize,
        bk: usize,
        kb: Mat<T>,
        kv: bool,
        dq: bool,
    ) {
        let p = self.p;
        let (b, h) = p.split(bh);
        let isa = p.isa;
        let (dpad, dvpad) = pads(p);
        let bkp = padded(bk);
        // Query row r sees the first cnt[r] keys of the tile (prefix rules; cnt grows with r).
        p.rules.counts(b, i0, j0, bk, &mut sc.cnt[..mq]);
        // cnt is non-decreasing: the last row sees the most keys.
        let k_eff = sc.cnt[..mq].last().copied().unwrap_or(0);
        if k_eff == 0 {
            return;
        }
        row_groups(&sc.cnt[..mq], &mut sc.rows);
        key_groups(&sc.cnt[..mq], k_eff, &mut sc.keys);
        // S = scale·Q·Kᵀ on each row group's visible columns (padded): the causal triangle
        // beyond them is neither multiplied nor exponentiated.
        // SAFETY (all gemm calls): operands address the views' rows or scratch buffers sized by
        // Scratch::new for these tile shapes; widths are multiples of PAD up to bkp; row and
        // key ranges stay inside the tile; outputs do not alias.
        for &(r0, r1, kr) in &sc.rows {
            let a = qs.qa.down(r0);
            // SAFETY: `isa` is `Problem::new`'s `or_scalar` variant, supported. A reads rows
            // i0 + r0 .. i0 + r1 ≤ i0 + mq ≤ nq, columns < d of the head's Q view; B is `kt`
            // (d rows at stride bkp, `d·bkp` elements by Scratch::new) read to
            // padded(kr) ≤ padded(bk) = bkp columns (counts are ≤ bk); C is rows r0..r1 of `s`
            // at stride bkp, inside its `bq·bkp ≥ mq·bkp` elements (mq ≤ BLOCK_Q, nq). `s` is a
            // scratch buffer distinct from Q and `kt`.
            unsafe {
                gemm(
                    isa,
                    r1 - r0,
                    padded(kr),
                    p.d,
                    a.ptr,
                    a.rs,
                    a.cs,
                    sc.kt.as_ptr(),
                    bkp as isize,
                    sc.s.as_mut_ptr().add(r0 * bkp),
                    bkp as isize,
                    false,
                    p.scale,
                )
            };
        }
        // Forward computed P = exp(S − lse) on visible pairs, so recompute exactly that.
        if p.rules.has_pointwise() {
            for r in 0..mq {
                let i = i0 + r;
                for (c, x) in sc.s[r * bkp..r * bkp + sc.cnt[r]].iter_mut().enumerate() {
                    if !p.rules.pointwise(b, h, i, j0 + c) {
                        *x = T::NEG_INFINITY;
                    }
                }
            }
        }
        // SAFETY: buffers sized by Scratch::new for this tile; row r is read up to
        // padded(cnt[r]), inside its group's computed columns.
        unsafe { probabilities(isa, mq, &mut sc.s, bkp, &sc.cnt, &sc.lse[at..]) };
        if kv {
            // dV += Pᵀ·dO; key rows [j0, j1) sum over the query rows from f on (the rows
            // before f see none of them, so their P is 0 and is skipped, not added).
            for &(ja, jb, f) in &sc.keys {
                let b_op = qs.dob.down(f);
                // SAFETY: `isa` supported (`Problem::new`). A is Pᵀ: element (i, p) at
                // s[(f + p)·bkp + ja + i] for i < jb − ja, p < mq − f, below mq·bkp ≤ s.len()
                // (jb ≤ k_eff ≤ bk ≤ bkp); B is dO's rows i0 + f .. i0 + mq as contiguous rows of
                // dvpad columns (the view itself when dv is a multiple of PAD, else the copy
                // `b_operand` made in `dob`, sized for these rows); C is rows ja..jb of `dv` at
                // stride dvpad, inside its `bk·dvpad` elements. `dv` is distinct from `s`, `dob`
                // and the input views.
                unsafe {
                    gemm(
                        isa,
                        jb - ja,
                        dvpad,
                        mq - f,
                        sc.s.as_ptr().add(f * bkp + ja),
                        1,
                        bkp as isize,
                        b_op.ptr,
                        b_op.rs,
                        sc.dv.as_mut_ptr().add(ja * dvpad),
                        dvpad as isize,
                        true,
                        T::ONE,
                    );
                }
            }
        }
        for &(r0, r1, kr) in &sc.rows {
            let w = padded(kr);
            // dP = dO·Vᵀ on the group's columns.
            let a = qs.doa.down(r0);
            // SAFETY: `isa` supported (`Problem::new`). A reads rows i0 + r0 .. i0 + r1 ≤ nq,
            // columns < dv of the head's dO view; B is `vt` (dv rows at stride bkp,
            // `dv·bkp` elements) read to w = padded(kr) ≤ bkp columns; C is rows r0..r1 of
            // `dp` at stride bkp, inside its `bq·bkp ≥ mq·bkp` elements. `dp` is distinct from
            // dO and `vt`.
            unsafe {
                gemm(
                    isa,
                    r1 - r0,
                    w,
                    p.dv,
                    a.ptr,
                    a.rs,
                    a.cs,
                    sc.vt.as_ptr(),
                    bkp as isize,
                    sc.dp.as_mut_ptr().add(r0 * bkp),
                    bkp as isize,
                    false,
                    T::ONE,
                );
            }
            // dS = P ∘ (dP − D) (P is 0 past each row's visible keys).
            for r in r0..r1 {
                let (pr, dr) = (
                    &sc.s[r * bkp..r * bkp + w],
                    &mut sc.dp[r * bkp..r * bkp + w],
                );
                ds_row(isa, pr, dr, sc.dd[at + r]);
            }
            if dq {
                // dQ += dS·K over the group's visible keys (scale applied when written out).
                // SAFETY: `isa` supported (`Problem::new`). A reads rows r0..r1, columns < kr ≤ bkp
                // of `dp` (stride bkp, `mq·bkp` elements); B is K's rows j0 .. j0 + kr of the
                // tile as contiguous rows of dpad columns (the view itself when d is a multiple of
                // PAD, else `b_operand`'s copy in `kp`, `bk·dpad` elements, kr ≤ bk); C is rows
                // at + r0 .. at + r1 of `dq` at stride dpad, inside it (`at + mq` is at most the
                // rows Scratch::new sized `dq` for: nq when fused, else mq ≤ BLOCK_Q.min(nq) at
                // at = 0). `dq` is distinct from `dp`, `kp` and the input views.
                unsafe {
                    gemm(
                        isa,
                        r1 - r0,
                        dpad,
                        kr,
                        sc.dp.as_ptr().add(r0 * bkp),
                        bkp as isize,
                        1,
                        kb.ptr,
                        kb.rs,
                        sc.dq[(at + r0) * dpad..].as_mut_ptr(),
                        dpad as isize,
                        true,
                        T::ONE,
                    );
                }
            }
        }
        if kv {
            // dK += dSᵀ·Q (scale applied when written out), rows as for dV.
            for &(ja, jb, f) in &sc.keys {
                let b_op = qs.qb.down(f);
                // SAFETY: `isa` supported (`Problem::new`). A is dSᵀ: element (i, p) at
                // dp[(f + p)·bkp + ja + i] for i < jb − ja, p < mq − f, below mq·bkp ≤ dp.len();
                // B is Q's rows i0 + f .. i0 + mq as contiguous rows of dpad columns (the view
                // itself, or `b_operand`'s copy in `qb`, sized for these rows); C is rows ja..jb
                // of `dk` at stride dpad, inside its `bk·dpad` elements. `dk` is distinct from
                // `dp`, `qb` and the input views.
                unsafe {
                    gemm(
                        isa,
                        jb - ja,
                        dpad,
                        mq - f,
                        sc.dp.as_ptr().add(f * bkp + ja),
                        1,
                        bkp as isize,
                        b_op.ptr,
                        b_op.rs,
                        sc.dk.as_mut_ptr().add(ja * dpad),
                        dpad as isize,
                        true,
                        T::ONE,
                    );
                }
            }
        }
    }

    /// Copies `rows` accumulated rows (padded width `w`, true width `n`) into `out`, times `alpha`.
    fn write(
        &self,
        out: &mut [MaybeUninit<T>],
        acc: &[T],
        rows: usize,
        n: usize,
        w: usize,
        alpha: T,
    ) {
        scale_rows(self.p.isa, rows, n, acc, w, alpha, out);
    }
}

/// Rows (of queries, or of keys) per group of the causal-triangle skipping: the AVX-512 f32
/// register block's row count, and a multiple of 8 so a key group's last row stays inside the
/// padded columns of every query row that sees its first (see [`key_groups`]).
const ROW_GROUP: usize = 8;
const _: () = assert!(crate::micro::PAD.is_multiple_of(ROW_GROUP));

/// Query row groups `(r0, r1, k)` of a tile whose row `r` sees the first `cnt[r]` keys (`cnt`
/// non-decreasing): chunks of [`ROW_GROUP`] rows, consecutive chunks merged while their last
/// rows' counts pad to the same width, `k` the count of the group's last row (its widest);
/// rows that see no key are left out.
fn row_groups(cnt: &[usize], out: &mut Vec<(usize, usize, usize)>) {
    out.clear();
    for r0 in (0..cnt.len()).step_by(ROW_GROUP) {
        let r1 = (r0 + ROW_GROUP).min(cnt.len());
        let k = cnt[r1 - 1];
        if k == 0 {
            continue;
        }
        match out.last_mut() {
            Some(g) if g.1 == r0 && padded(g.2) == padded(k) => (g.1, g.2) = (r1, k),
            _ => out.push((r0, r1, k)),
        }
    }
}

/// Key row groups `(j0, j1, f)` covering the first `k_eff` keys: chunks of [`ROW_GROUP`] keys,
/// consecutive chunks merged while they share `f`, the first query row that sees the chunk's
/// first key (no row before `f` sees any key of the group: `cnt` is non-decreasing). Every
/// row `r ≥ f` has `cnt[r] > j0`, so its padded width `padded(cnt[r]) ≥ j0 + ROW_GROUP ≥ j1`
/// (`j0` a multiple of 8, widths of 16): the group's columns of rows `f..` were computed.
fn key_groups(cnt: &[usize], k_eff: usize, out: &mut Vec<(usize, usize, usize)>) {
    out.clear();
    for j0 in (0..k_eff).step_by(ROW_GROUP) {
        let j1 = (j0 + ROW_GROUP).min(k_eff);
        let f = cnt.partition_point(|&c| c <= j0);
        match out.last_mut() {
            Some(g) if g.2 == f => g.1 = j1,
            _ => out.push((j0, j1, f)),
        }
    }
}

/// One task per (batch, head): all key tiles, all query tiles, every gradient.
fn fused<T: Real>(
    c: &Ctx<T>,
    sc: &mut Scratch<T>,
    bh: usize,
    dq: &mut [MaybeUninit<T>],
    dk: &mut [MaybeUninit<T>],
    dv: &mut [MaybeUninit<T>],
) {
    let p = c.p;
    let (b, _) = p.split(bh);
    let (dpad, dvpad) = pads(p);
    let qs = c.queries(sc, bh, 0, p.nq);
    sc.dq[..p.nq * dpad].fill(T::ZERO);
    let seen = p.hi_max(b, 0, p.nq);
    // Keys no query sees get zero gradients.
    dk[seen * p.d..].fill(MaybeUninit::new(T::ZERO));
    dv[seen * p.dv..].fill(MaybeUninit::new(T::ZERO));
    for (j0, bk) in tiles(seen, BLOCK_K) {
        let kb = c.keys(sc, bh, j0, bk);
        sc.dk[..bk * dpad].fill(T::ZERO);
        sc.dv[..bk * dvpad].fill(T::ZERO);
        let first = p.first_row_seeing(b, j0);
        for (i0, mq) in tiles(p.nq, BLOCK_Q).filter(|&(i0, mq)| i0 + mq > first) {
            c.pair(sc, bh, i0, mq, i0, qs.down(i0), j0, bk, kb, true, true);
        }
        c.write(&mut dk[j0 * p.d..], &sc.dk, bk, p.d, dpad, p.scale);
        c.write(&mut dv[j0 * p.dv..], &sc.dv, bk, p.dv, dvpad, T::ONE);
    }
    c.write(dq, &sc.dq, p.nq, p.d, dpad, p.scale);
}

/// Pass 1 task: key tile `[j0, j0 + bk)` of head `bh`, owning those rows of `dK`, `dV`.
fn key_tile<T: Real>(
    c: &Ctx<T>,
    sc: &mut Scratch<T>,
    bh: usize,
    j0: usize,
    dk: &mut [MaybeUninit<T>],
    dv: &mut [MaybeUninit<T>],
) {
    let p = c.p;
    let (b, _) = p.split(bh);
    let (dpad, dvpad) = pads(p);
    let bk = BLOCK_K.min(p.nk - j0);
    let kb = c.keys(sc, bh, j0, bk);
    sc.dk[..bk * dpad].fill(T::ZERO);
    sc.dv[..bk * dvpad].fill(T::ZERO);
    let first = p.first_row_seeing(b, j0);
    for (i0, mq) in tiles(p.nq, BLOCK_Q).filter(|&(i0, mq)| i0 + mq > first) {
        let qs = c.queries(sc, bh, i0, mq);
        c.pair(sc, bh, i0, mq, 0, qs, j0, bk, kb, true, false);
    }
    c.write(dk, &sc.dk, bk, p.d, dpad, p.scale);
    c.write(dv, &sc.dv, bk, p.dv, dvpad, T::ONE);
}

/// Pass 2 task: query tile starting at `i0` of head `bh`, owning those rows of `dQ`.
fn query_tile<T: Real>(
    c: &Ctx<T>,
    sc: &mut Scratch<T>,
    bh: usize,
    i0: usize,
    dq: &mut [MaybeUninit<T>],
) {
    let p = c.p;
    let (b, _) = p.split(bh);
    let (dpad, _) = pads(p);
    let mq = BLOCK_Q.min(p.nq - i0);
    let qs = c.queries(sc, bh, i0, mq);
    sc.dq[..mq * dpad].fill(T::ZERO);
    for (j0, bk) in tiles(p.hi_max(b, i0, mq), BLOCK_K) {
        let kb = c.keys(sc, bh, j0, bk);
        c.pair(sc, bh, i0, mq, 0, qs, j0, bk, kb, false, true);
    }
    c.write(dq, &sc.dq, mq, p.d, dpad, p.scale);
}
