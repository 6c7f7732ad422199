//! Backward pass, mirroring the forward: forward computed `P = exp(S − LSE)` tile by tile and
//! `O = P·V`, so per tile we recompute `P`, then `dV += Pᵀ·dO`, `dP = dO·Vᵀ`,
//! `dS = P ∘ (dP − D)` with `Dᵢ = ⟨dOᵢ, Oᵢ⟩ − dlseᵢ`, `dQ += scale·dS·K`, `dK += scale·dSᵀ·Q`.
//! In f64 `dP − D` is rounded once: `D` is a compensated sum split into a rounded part and a
//! rest ([`d_rows`]), the compensated product `dO·Vᵀ` starts from minus the rounded part and
//! the rest is subtracted in `dS` (where one key takes all the weight its `dP ≈ D`, and
//! rounding the two apart loses the digits of their difference; docs/design.md §3c).
//!
//! No atomics: either one task per (batch, head) computes everything in a fixed order, or two
//! passes split the work so that each task owns its output rows (key tiles own `dK`, `dV`;
//! query tiles own `dQ`). See [`crate::FUSED_MIN_HEADS`].

use crate::micro::{dot_rows, padded};
use crate::problem::{
    a_operand, b_operand, expect_shape, head3_each, pack_cols, pads, prefetch_small, run_tasks,
    split_lens, tiles, uninit4, zeros, AccRows, Mat, Problem,
};
use crate::{
    Attention, AttnError, AttnGrads, AttnOutView, BLOCK_K, BLOCK_Q, FUSED_MAX_LEN, FUSED_MIN_HEADS,
};
use efa_num::sum::{compensated, dot2_step};
use efa_num::Real;
use ndarray::{ArrayView2, ArrayView3, ArrayView4};
use std::mem::MaybeUninit;

mod pair;
use pair::{KTile, QTile, ROW_GROUP};

/// Per-job scratch: the query rows' `Q` and `dO` as right operands when they cannot be read in
/// place (`qb`, `dob`), their `D` and `lse`; the key tile as `Kᵀ`, `K` and `Vᵀ` (`kt`, `kp`,
/// `vt`); a pair's `P` (`s`) and `dP`, then `dS` (`dp`); the accumulators of a key tile's `dK`,
/// `dV` rows and of the held query rows' `dQ`; the visible key counts of a pair's query rows
/// and its row and key groups (see [`pair`]).
struct Scratch<T> {
    qb: Vec<T>,
    dob: Vec<T>,
    dd: Vec<T>,
    dd_lo: Vec<T>,
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
            dd_lo: zeros(rows),
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
        backward_here(self, out, d_o, d_lse)
    }
}

efa_num::concrete! {
    /// [`backward_kernel`], compiled in this crate for each element type.
    fn backward_here<'a, 'b, 'c, 'd, 'e, T>(
        a: &'b Attention<ArrayView4<'a, T>>,
        out: AttnOutView<'c, T>,
        d_o: ArrayView4<'d, T>,
        d_lse: Option<ArrayView3<'e, T>>,
    ) -> Result<AttnGrads<T>, AttnError> = backward_kernel;
}

/// The kernel behind [`Attention::backward`].
fn backward_kernel<T: Real>(
    a: &Attention<ArrayView4<'_, T>>,
    out: AttnOutView<'_, T>,
    d_o: ArrayView4<'_, T>,
    d_lse: Option<ArrayView3<'_, T>>,
) -> Result<AttnGrads<T>, AttnError> {
    let p = Problem::new(a)?;
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
        return crate::naive::backward_in::<T, T>(a, d_o, d_lse);
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
    let mut dq = uninit4::<T>((bsz, hn, nq, d));
    let mut dk = uninit4::<T>((bsz, hn, nk, d));
    let mut dvv = uninit4::<T>((bsz, hn, nk, dv));
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

/// `D = rowsum(dO ∘ O) − dlse` of query rows `[i0, i0 + dd.len())` of head `bh` (`o`, `d_o` its
/// `[Nq, Dv]` matrices) into `dd`: `dot_with`'s bits on contiguous rows, a plain sum otherwise.
/// In f64 (compensated sums, docs/design.md §3c) `D` is formed as a compensated sum of the
/// `dv` products and `−dlse`, and split into `dd` (rounded) and `lo` (`D − dd`, exact to about
/// twice f64's precision), so that `dP − D` can be formed without the rounding of `D`.
pub(crate) fn d_rows<T: Real>(
    p: &Problem<T>,
    (oh, doh): (&ArrayView2<T>, &ArrayView2<T>),
    d_lse: Option<&ArrayView3<T>>,
    bh: usize,
    i0: usize,
    (dd, lo): (&mut [T], &mut [T]),
) {
    let mq = dd.len();
    let (oa, ga) = (a_operand(oh, i0), a_operand(doh, i0));
    if compensated::<T>() {
        // The running sum in `dd` and its gathered errors in `lo` until the last step.
        for (r, (x, l)) in dd.iter_mut().zip(lo.iter_mut()).enumerate() {
            let (ro, rg) = (oa.down(r), ga.down(r));
            let mut acc = (T::ZERO, T::ZERO);
            for c in 0..p.dv as isize {
                // SAFETY: row i0 + r < nq and c < dv address elements of the views.
                let (o, g) = unsafe { (*ro.ptr.offset(c * ro.cs), *rg.ptr.offset(c * rg.cs)) };
                acc = dot2_step(o, g, acc);
            }
            (*x, *l) = acc;
        }
        if let Some(d) = d_lse {
            head3_each(d, p.heads, bh, i0, mq, |r, g| {
                (dd[r], lo[r]) = dot2_step(T::ZERO - g, T::ONE, (dd[r], lo[r]));
            });
        }
        for (x, l) in dd.iter_mut().zip(lo.iter_mut()) {
            let (s, e) = (*x, *l);
            let hi = s + e;
            (*x, *l) = (hi, e - (hi - s));
        }
        return;
    }
    if oa.cs == 1 && ga.cs == 1 {
        // SAFETY: rows i0 .. i0 + mq < nq of both views, each with dv contiguous elements.
        unsafe { dot_rows(p.isa, p.dv, (oa.ptr, oa.rs), (ga.ptr, ga.rs), dd) };
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

/// What every backward task reads: the problem, the forward's `lse` and `o`, and the
/// cotangents `d_o`, `d_lse`.
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
        d_rows(
            p,
            (&oh, &doh),
            self.d_lse,
            bh,
            i0,
            (&mut sc.dd[..mq], &mut sc.dd_lo[..mq]),
        );
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
    // The next head's operands, and this head's outputs (written at the end).
    p.prefetch_head([&p.q, &p.k, &p.v, c.o, c.d_o], bh + 1);
    prefetch_small(&[&*dq, &*dk, &*dv]);
    let qs = c.queries(sc, bh, 0, p.nq);
    let dq_acc = AccRows::new(p.nq, p.d);
    dq_acc.clear(&mut sc.dq);
    let seen = p.hi_max(b, 0, p.nq);
    // Keys no query sees get zero gradients.
    dk[seen * p.d..].fill(MaybeUninit::new(T::ZERO));
    dv[seen * p.dv..].fill(MaybeUninit::new(T::ZERO));
    for (j0, bk) in tiles(seen, BLOCK_K) {
        let k = KTile {
            j0,
            bk,
            kb: c.keys(sc, bh, j0, bk),
            kv: true,
            dq: true,
        };
        let (dk_acc, dv_acc) = (AccRows::new(bk, p.d), AccRows::new(bk, p.dv));
        dk_acc.clear(&mut sc.dk);
        dv_acc.clear(&mut sc.dv);
        let first = p.first_row_seeing(b, j0);
        for (i0, mq) in tiles(p.nq, BLOCK_Q).filter(|&(i0, mq)| i0 + mq > first) {
            let q = QTile {
                bh,
                i0,
                mq,
                at: i0,
                ops: qs.down(i0),
            };
            c.pair(sc, &q, &k);
        }
        dk_acc.write(p.isa, &sc.dk, p.scale, &mut dk[j0 * p.d..]);
        dv_acc.write(p.isa, &sc.dv, T::ONE, &mut dv[j0 * p.dv..]);
    }
    dq_acc.write(p.isa, &sc.dq, p.scale, dq);
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
    let bk = BLOCK_K.min(p.nk - j0);
    let k = KTile {
        j0,
        bk,
        kb: c.keys(sc, bh, j0, bk),
        kv: true,
        dq: false,
    };
    let (dk_acc, dv_acc) = (AccRows::new(bk, p.d), AccRows::new(bk, p.dv));
    dk_acc.clear(&mut sc.dk);
    dv_acc.clear(&mut sc.dv);
    let first = p.first_row_seeing(b, j0);
    for (i0, mq) in tiles(p.nq, BLOCK_Q).filter(|&(i0, mq)| i0 + mq > first) {
        let ops = c.queries(sc, bh, i0, mq);
        c.pair(
            sc,
            &QTile {
                bh,
                i0,
                mq,
                at: 0,
                ops,
            },
            &k,
        );
    }
    dk_acc.write(p.isa, &sc.dk, p.scale, dk);
    dv_acc.write(p.isa, &sc.dv, T::ONE, dv);
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
    let mq = BLOCK_Q.min(p.nq - i0);
    let ops = c.queries(sc, bh, i0, mq);
    let q = QTile {
        bh,
        i0,
        mq,
        at: 0,
        ops,
    };
    let dq_acc = AccRows::new(mq, p.d);
    dq_acc.clear(&mut sc.dq);
    for (j0, bk) in tiles(p.hi_max(b, i0, mq), BLOCK_K) {
        let k = KTile {
            j0,
            bk,
            kb: c.keys(sc, bh, j0, bk),
            kv: false,
            dq: true,
        };
        c.pair(sc, &q, &k);
    }
    dq_acc.write(p.isa, &sc.dq, p.scale, dq);
}
