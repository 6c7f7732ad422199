//! One (query tile, key tile) pair of the backward pass, stage by stage: the visible keys of
//! each query row and their groups, `P` recomputed, `dV += Pᵀ·dO`, `dS = P ∘ (dO·Vᵀ − D)` with
//! `dQ += dS·K`, and `dK += dSᵀ·Q`.

use super::{Ctx, QSide, Scratch};
use crate::micro::{ds_row, gemm, padded, probabilities};
use crate::problem::{AccRows, Mat, Problem};
use efa_num::sum::compensated;
use efa_num::{MatMut, MatRef, Real};

/// The query rows of a pair: rows `i0 .. i0 + mq` of head `bh`, their operands `ops`, and
/// `at`, the scratch row of their `lse`, `D` and `dQ` accumulator (`i0` when the whole head's
/// rows are held, else 0).
#[derive(Clone, Copy)]
pub(super) struct QTile<T> {
    pub bh: usize,
    pub i0: usize,
    pub mq: usize,
    pub at: usize,
    pub ops: QSide<T>,
}

/// The key tile of a pair: keys `j0 .. j0 + bk`, `K` as a right operand (`kb`, from
/// [`Ctx::keys`]), and which gradients the pair accumulates: `dK`, `dV` (`kv`) and `dQ`
/// (`dq`).
#[derive(Clone, Copy)]
pub(super) struct KTile<T> {
    pub j0: usize,
    pub bk: usize,
    pub kb: Mat<T>,
    pub kv: bool,
    pub dq: bool,
}

/// Rows (of queries, or of keys) per group of the causal-triangle skipping: the AVX-512 f32
/// register block's row count, and a multiple of 8 so a key group's last row stays inside the
/// padded columns of every query row that sees its first (see [`key_groups`]).
pub(super) const ROW_GROUP: usize = 8;
const _: () = assert!(crate::micro::PAD.is_multiple_of(ROW_GROUP));

impl<T: Real> Ctx<'_, '_, T> {
    /// One (query tile, key tile) pair: the query rows `q` (their `lse`, `D` in the scratch
    /// at row `q.at`) against the packed key tile `k`, adding to the scratch's accumulators.
    pub(super) fn pair(&self, sc: &mut Scratch<T>, q: &QTile<T>, k: &KTile<T>) {
        let p = self.p;
        if !groups(p, sc, q, k) {
            return;
        }
        scores(p, sc, q, k);
        if k.kv {
            grad_v(p, sc, q, k);
        }
        grad_s(p, sc, q, k);
        if k.kv {
            grad_k(p, sc, q, k);
        }
    }
}

/// The visible key counts `cnt` of the query rows and their row and key groups; false when
/// no row sees any key of the tile.
#[inline(always)]
fn groups<T: Real>(p: &Problem<T>, sc: &mut Scratch<T>, q: &QTile<T>, k: &KTile<T>) -> bool {
    let mq = q.mq;
    let (b, _) = p.split(q.bh);
    // Query row r sees the first cnt[r] keys of the tile (prefix rules; cnt grows with r).
    p.rules.counts(b, q.i0, k.j0, k.bk, &mut sc.cnt[..mq]);
    // cnt is non-decreasing: the last row sees the most keys.
    let k_eff = sc.cnt[..mq].last().copied().unwrap_or(0);
    if k_eff == 0 {
        return false;
    }
    row_groups(&sc.cnt[..mq], &mut sc.rows);
    key_groups(&sc.cnt[..mq], k_eff, &mut sc.keys);
    true
}

/// `P = exp(S − lse)` with `S = scale·Q·Kᵀ` on each row group's visible columns: the causal
/// triangle beyond them is neither multiplied nor exponentiated. The product stops at the
/// group's widest count (the gemm's last vector may run past it, inside the padded row);
/// [`probabilities`] reads a row's scores only below its count and writes every column.
#[inline(always)]
fn scores<T: Real>(p: &Problem<T>, sc: &mut Scratch<T>, q: &QTile<T>, k: &KTile<T>) {
    let (b, h) = p.split(q.bh);
    let (mq, bkp) = (q.mq, padded(k.bk));
    for &(r0, r1, kr) in &sc.rows {
        let a = q.ops.qa.down(r0);
        // SAFETY: `isa` is `Problem::new`'s `or_scalar` variant, supported. A reads rows
        // i0 + r0 .. i0 + r1 ≤ i0 + mq ≤ nq, columns < d of the head's Q view; B is `kt`
        // (d rows at stride bkp, `d·bkp` elements by Scratch::new) read to at most
        // padded(kr) ≤ padded(bk) = bkp columns (counts are ≤ bk); C is rows r0..r1 of `s`
        // at stride bkp, inside its `bq·bkp ≥ mq·bkp` elements (mq ≤ BLOCK_Q, nq). `s` is a
        // scratch buffer distinct from Q and `kt`.
        unsafe {
            gemm(
                p.isa,
                a.view(r1 - r0, p.d),
                MatRef::row_major(&sc.kt, p.d, kr, bkp),
                MatMut::row_major(&mut sc.s[r0 * bkp..], r1 - r0, kr, bkp),
                false,
                p.scale,
            )
        };
    }
    // Forward computed P = exp(S − lse) on visible pairs, so recompute exactly that.
    if p.rules.has_pointwise() {
        for r in 0..mq {
            let i = q.i0 + r;
            for (c, x) in sc.s[r * bkp..r * bkp + sc.cnt[r]].iter_mut().enumerate() {
                if !p.rules.pointwise(b, h, i, k.j0 + c) {
                    *x = T::NEG_INFINITY;
                }
            }
        }
    }
    // SAFETY: buffers sized by Scratch::new for this tile; row r's scores are read below
    // cnt[r] ≤ kr of its group, inside the computed columns.
    unsafe { probabilities(p.isa, mq, &mut sc.s, bkp, &sc.cnt, &sc.lse[q.at..]) };
}

/// `dV += Pᵀ·dO`; key rows `[ja, jb)` sum over the query rows from `f` on (the rows before
/// `f` see none of them, so their `P` is 0 and is skipped, not added).
#[inline(always)]
fn grad_v<T: Real>(p: &Problem<T>, sc: &mut Scratch<T>, q: &QTile<T>, k: &KTile<T>) {
    let (mq, bkp, acc) = (q.mq, padded(k.bk), AccRows::new(k.bk, p.dv));
    for &(ja, jb, f) in &sc.keys {
        let b_op = q.ops.dob.down(f);
        // SAFETY: `isa` supported (`Problem::new`). A is Pᵀ: element (i, p) at
        // s[(f + p)·bkp + ja + i] for i < jb − ja, p < mq − f, below mq·bkp ≤ s.len()
        // (jb ≤ k_eff ≤ bk ≤ bkp); B is dO's rows i0 + f .. i0 + mq as contiguous rows of
        // dvpad = acc.w columns (the view itself when dv is a multiple of PAD, else the copy
        // `b_operand` made in `dob`, sized for these rows); C is rows ja..jb of `dv` at stride
        // dvpad, inside its `bk·dvpad` elements. `dv` is distinct from `s`, `dob` and the
        // input views.
        unsafe {
            gemm(
                p.isa,
                MatRef::new(&sc.s[f * bkp + ja..], jb - ja, mq - f, 1, bkp as isize),
                b_op.view(mq - f, acc.w),
                acc.rows_mut(&mut sc.dv, ja, jb - ja, acc.w),
                true,
                T::ONE,
            );
        }
    }
}

/// Per row group: `dP = dO·Vᵀ`, `dS = P ∘ (dP − D)` in place of `dP`, and (for `k.dq`)
/// `dQ += dS·K`.
#[inline(always)]
fn grad_s<T: Real>(p: &Problem<T>, sc: &mut Scratch<T>, q: &QTile<T>, k: &KTile<T>) {
    let bkp = padded(k.bk);
    // The last row sees the most keys (counts are non-decreasing).
    let k_eff = sc.cnt[q.mq - 1];
    for &(r0, r1, kr) in &sc.rows {
        let w = padded(kr);
        // The columns of dS read later: below kr for dQ; for dK the key groups, which end at
        // k_eff and, for each row they read, within its group's padded width (`key_groups`).
        let n = w.min(k_eff);
        // dP = dO·Vᵀ on the group's columns. In f64 the compensated product starts from −D
        // (rounded) and then `dS = P ∘ (· − D_lo)`: `dP − D` is rounded once, not twice,
        // where sharp attention makes it far smaller than either (the dominant key's dP ≈ D).
        let a = q.ops.doa.down(r0);
        let comp = compensated::<T>();
        if comp {
            for r in r0..r1 {
                sc.dp[r * bkp..r * bkp + w].fill(T::ZERO - sc.dd[q.at + r]);
            }
        }
        // SAFETY: `isa` supported (`Problem::new`). A reads rows i0 + r0 .. i0 + r1 ≤ nq,
        // columns < dv of the head's dO view; B is `vt` (dv rows at stride bkp,
        // `dv·bkp` elements) read to padded(n) ≤ w = padded(kr) ≤ bkp columns; C is rows
        // r0..r1 of `dp` at stride bkp (its starting values, when accumulating, set to w
        // above), inside its `bq·bkp ≥ mq·bkp` elements. `dp` is distinct from dO and `vt`.
        unsafe {
            gemm(
                p.isa,
                a.view(r1 - r0, p.dv),
                MatRef::row_major(&sc.vt, p.dv, n, bkp),
                MatMut::row_major(&mut sc.dp[r0 * bkp..], r1 - r0, n, bkp),
                comp,
                T::ONE,
            );
        }
        // dS = P ∘ (dP − D) (P is 0 past each row's visible keys).
        for r in r0..r1 {
            let (pr, dr) = (
                &sc.s[r * bkp..r * bkp + n],
                &mut sc.dp[r * bkp..r * bkp + n],
            );
            let d = if comp {
                sc.dd_lo[q.at + r]
            } else {
                sc.dd[q.at + r]
            };
            ds_row(p.isa, pr, dr, d);
        }
        if k.dq {
            grad_q(p, q, k, (r0, r1, kr), &sc.dp, &mut sc.dq);
        }
    }
}

/// `dQ += dS·K` of query rows `r0..r1` over their visible keys `< kr` (scale applied when
/// written out), from the scratch's `dS` (in `dp`) into its `dq`.
#[inline(always)]
fn grad_q<T: Real>(
    p: &Problem<T>,
    q: &QTile<T>,
    k: &KTile<T>,
    (r0, r1, kr): (usize, usize, usize),
    ds: &[T],
    dq: &mut [T],
) {
    let bkp = padded(k.bk);
    // The dQ rows of the scratch (only their stride is used here).
    let acc = AccRows::new(q.at + q.mq, p.d);
    // SAFETY: `isa` supported (`Problem::new`). A reads rows r0..r1, columns < kr ≤ bkp
    // of `ds` (the scratch's `dp`: stride bkp, `mq·bkp` elements); B is K's rows j0 .. j0 + kr of the
    // tile as contiguous rows of dpad columns (the view itself when d is a multiple of
    // PAD, else `b_operand`'s copy in `kp`, `bk·dpad` elements, kr ≤ bk); C is rows
    // at + r0 .. at + r1 of `dq` at stride dpad = acc.w, inside it (`at + mq` is at most the
    // rows Scratch::new sized `dq` for: nq when fused, else mq ≤ BLOCK_Q.min(nq) at
    // at = 0). `dq` (a unique borrow) is distinct from `dp`, `kp` and the input views.
    unsafe {
        gemm(
            p.isa,
            MatRef::row_major(&ds[r0 * bkp..], r1 - r0, kr, bkp),
            k.kb.view(kr, acc.w),
            acc.rows_mut(dq, q.at + r0, r1 - r0, acc.w),
            true,
            T::ONE,
        );
    }
}

/// `dK += dSᵀ·Q` (scale applied when written out), key rows as for `dV` ([`grad_v`]).
#[inline(always)]
fn grad_k<T: Real>(p: &Problem<T>, sc: &mut Scratch<T>, q: &QTile<T>, k: &KTile<T>) {
    let (mq, bkp, acc) = (q.mq, padded(k.bk), AccRows::new(k.bk, p.d));
    for &(ja, jb, f) in &sc.keys {
        let b_op = q.ops.qb.down(f);
        // SAFETY: `isa` supported (`Problem::new`). A is dSᵀ: element (i, p) at
        // dp[(f + p)·bkp + ja + i] for i < jb − ja, p < mq − f, below mq·bkp ≤ dp.len();
        // B is Q's rows i0 + f .. i0 + mq as contiguous rows of dpad = acc.w columns (the
        // view itself, or `b_operand`'s copy in `qb`, sized for these rows); C is rows ja..jb
        // of `dk` at stride dpad, inside its `bk·dpad` elements. `dk` is distinct from `dp`,
        // `qb` and the input views.
        unsafe {
            gemm(
                p.isa,
                MatRef::new(&sc.dp[f * bkp + ja..], jb - ja, mq - f, 1, bkp as isize),
                b_op.view(mq - f, acc.w),
                acc.rows_mut(&mut sc.dk, ja, jb - ja, acc.w),
                true,
                T::ONE,
            );
        }
    }
}

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
