//! The backward: one task per group (its base gradients and its samples' gradients), each
//! compiled for the active instruction set.

use super::rows::{add_rows, axpy_k, combine, direct_probs, dot_k, k16, loo_rows, loo_scalars, L};
use super::{by_group, pieces, standard, Config, Dims, Inputs, Saved};
use efa_attn::micro::transpose_cols;
use efa_num::pool::{self, Buf};
use efa_num::Real;
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;

/// What every group's task reads: the inputs, the output's cotangent `[B, N, H·K]`, and the
/// forward's saved state. (The output itself is not read: `D = ⟨dO, o⟩` is formed from the
/// values less their mean, see [`centred`].)
struct Ctx<'a, T> {
    inp: Inputs<'a, T>,
    d_o: &'a [T],
    saved: &'a Saved<T>,
}

impl<'a, T> std::ops::Deref for Ctx<'a, T> {
    type Target = Inputs<'a, T>;
    fn deref(&self) -> &Inputs<'a, T> {
        &self.inp
    }
}

/// One group's work: its samples (increasing) and the gradient pieces it writes.
struct Task<'a, T> {
    g: usize,
    members: &'a [usize],
    /// The group's base gradients `[N, H·K]`.
    dq: &'a mut [T],
    dk: &'a mut [T],
    dv: &'a mut [T],
    /// Per member: replaced-row gradients `[H·K]`.
    dqt: Vec<&'a mut [T]>,
    dkt: Vec<&'a mut [T]>,
    dvt: Vec<&'a mut [T]>,
}

/// Per-thread scratch, sized for `N` positions of width `K`.
#[derive(Default)]
struct Scratch<T> {
    /// Cotangents gathered per target `R` `[N, K]` and `Δ` `[N]`, then their leave-one-out
    /// sums `R⁻` `[N, K]` and `Δ⁻` `[N]`.
    rpos: Buf<T>,
    dpos: Buf<T>,
    rx: Buf<T>,
    dx: Buf<T>,
    /// A row's `dq` `[K]` and a direct row's probabilities `[N]`.
    dq: Buf<T>,
    row: Buf<T>,
    /// Per row, the leave-one-out pairs' `dS'`, samples and member indices, the pairs per
    /// target `[N]` and the base keys some pair sees.
    pairs: Buf<(T, usize, usize)>,
    cnt: Buf<usize>,
    seen: Buf<usize>,
    /// One head's base keys and values transposed `[K, N]`, and a direct row's `dP` `[N]`.
    ktr: Buf<T>,
    vtr: Buf<T>,
    dp: Buf<T>,
    /// One head's keys and values less their means (see [`centred`]): the base rows `[N, K]`
    /// and each member's replaced row `[members, K]`.
    kc: Buf<T>,
    ktc: Buf<T>,
    vc: Buf<T>,
    vtc: Buf<T>,
    /// The keys some member sees (see [`centred`]).
    keys: Buf<usize>,
    /// One row's values less its dominant key's (see [`row_centred`]): the base rows
    /// `[N, K]` and each member's replaced row `[members, K]`.
    vh: Buf<T>,
    vth: Buf<T>,
    /// A row's leave-one-out sums of the weighted row-centred values `Â⁻` `[N, K]`.
    ao: Buf<T>,
}

impl<T: Real> Scratch<T> {
    fn fit(&mut self, dm: &Dims) {
        let (n, kd) = (dm.n, dm.kd);
        for (buf, len) in [
            (&mut self.rpos, n * kd),
            (&mut self.dpos, n),
            (&mut self.rx, n * kd),
            (&mut self.dx, n),
            (&mut self.dq, kd),
            (&mut self.row, n),
            // Transposed rows `+ L`: `combine` reads its last block whole.
            (&mut self.ktr, kd * n + L),
            (&mut self.vtr, kd * n + L),
            (&mut self.dp, n),
            (&mut self.kc, n * kd),
            (&mut self.vc, n * kd),
            (&mut self.vh, n * kd),
            (&mut self.ao, n * kd),
        ] {
            if buf.len() != len {
                buf.resize(len, T::ZERO);
            }
        }
        if self.cnt.len() != n {
            self.cnt.resize(n, 0);
        }
    }
}

/// The gradients of `q, k, v, q_t, k_t, v_t` given the output's cotangent (the output itself
/// is checked by the caller but not read).
pub(super) fn run<T: Real>(
    cfg: &Config,
    dm: &Dims,
    inputs: &[&ArrayD<T>],
    d_o: &ArrayD<T>,
    saved: &Saved<T>,
) -> Vec<Option<ArrayD<T>>> {
    let (g, n, b, hk) = (dm.g, dm.n, dm.b, dm.hk);
    let x: Vec<_> = inputs.iter().map(|a| standard(a)).collect();
    let d_o = standard(d_o);
    let cx = Ctx {
        inp: Inputs::new(cfg, dm, &x),
        d_o: &d_o,
        saved,
    };
    let mut grads: Vec<Vec<T>> = (0..3)
        .map(|_| pool::filled(g * n * hk, T::ZERO))
        .chain((0..3).map(|_| pool::filled(b * hk, T::ZERO)))
        .collect();
    let members = cfg.members(g);
    {
        let [dq, dk, dv, dqt, dkt, dvt] = &mut grads[..] else {
            unreachable!("six gradients")
        };
        let tasks: Vec<Task<T>> = members
            .iter()
            .zip(pieces(dq, n * hk, g))
            .zip(pieces(dk, n * hk, g))
            .zip(pieces(dv, n * hk, g))
            .zip(by_group(dqt, hk, &cfg.group, g))
            .zip(by_group(dkt, hk, &cfg.group, g))
            .zip(by_group(dvt, hk, &cfg.group, g))
            .enumerate()
            .map(|(gi, ((((((m, dq), dk), dv), dqt), dkt), dvt))| Task {
                g: gi,
                members: m,
                dq,
                dk,
                dv,
                dqt,
                dkt,
                dvt,
            })
            .collect();
        tasks
            .into_par_iter()
            .for_each_init(Scratch::default, |sc, t| group(&cx, t, sc));
    }
    grads
        .into_iter()
        .zip(inputs)
        .map(|(d, x)| {
            Some(ArrayD::from_shape_vec(IxDyn(x.shape()), d).expect("shared attention: sizes"))
        })
        .collect()
}

/// One head's keys (`which = 1`) or values (`2`) less the mean `c` of the base rows (of the
/// first `len`) some member sees: the base rows into `kc` `[len, K]` and each member's
/// replaced row into `ktc` `[members, K]`.
///
/// Keys: every sample's score gradients `dSⱼ` sum to zero over its keys (the softmax's
/// Jacobian), so `dq = Σⱼ dSⱼ·kⱼ = Σⱼ dSⱼ·(kⱼ − c)` for any `c`. Values: the output is a
/// weighted mean of the values, so `dPⱼ − D = ⟨dO, vⱼ − o⟩ = ⟨dO, (vⱼ − c) − (o − c)⟩`.
/// Computed with the rows themselves, these sums' round-off is relative to the rows' size;
/// rows with a large common part (as the temperature model's first block has) then leave
/// the gradients with the round-off of that common part, which the exact sums cancel. Less
/// their mean, the terms are as small as the rows' spread.
#[inline(always)]
fn centred<T: Real>(
    cx: &Ctx<'_, T>,
    t: &Task<'_, T>,
    (c0, len, rows): (usize, usize, &[usize]),
    which: usize,
    kc: &mut [T],
    ktc: &mut Vec<T>,
) {
    let (hk, kd) = (cx.dm.hk, cx.dm.kd);
    let kg = cx.base(t.g)[which];
    let rows_t = if which == 1 { cx.kt } else { cx.vt };
    // The mean over the keys some member sees (`rows`).
    let inv = T::ONE / T::from_usize(rows.len().max(1));
    for c in 0..kd {
        let mut m = T::ZERO;
        for &j in rows {
            m += kg[j * hk + c0 + c];
        }
        let m = m * inv;
        for j in 0..len {
            kc[j * kd + c] = kg[j * hk + c0 + c] - m;
        }
        ktc.resize(t.members.len() * kd, T::ZERO);
        for (mi, &s) in t.members.iter().enumerate() {
            ktc[mi * kd + c] = rows_t[s * hk + c0 + c] - m;
        }
    }
}

/// One row's values less the value `ō = ṽ_d` of its dominant key `d` (the largest `eⱼ` among
/// the keys some member sees; `ṽ` the values less their mean, see [`centred`]): the base rows
/// into `vh` `[len, K]`, the members' replaced rows into `vth` `[members, K]`.
///
/// The leave-one-out pairs' score gradients `p·(dP − D)` sum their samples' `dP` and `D`
/// before subtracting (`⟨R⁻, v̂ⱼ⟩ − Δ⁻`), so their round-off is relative to those terms,
/// not to their difference. With sharp attention every pair of a row puts nearly all its
/// weight on the dominant key and its output is close to `ō`: less `ō`, the dominant key's
/// terms are as small as their difference (plain attention gets the same from forming `D`
/// from the very `dP` it is subtracted from). Any `ō` gives the same exact sums.
#[inline(always)]
fn row_centred<T: Real>(
    len: usize,
    kd: usize,
    (e, keys): (&[T], &[usize]),
    (vc, vtc): (&[T], &[T]),
    (vh, vth): (&mut [T], &mut Vec<T>),
) {
    let mut d = None;
    for &j in keys {
        if d.is_none_or(|d: usize| e[j] > e[d]) {
            d = Some(j);
        }
    }
    // (Rows of width 0 leave nothing to do: `max(1)` only keeps the chunking defined.)
    let w = kd.max(1);
    vth.resize(vtc.len(), T::ZERO);
    // No key some member sees: no leave-one-out pair either (the caller has one); the values
    // as they are, for totality.
    let Some(d) = d else {
        vh[..len * kd].copy_from_slice(&vc[..len * kd]);
        vth.copy_from_slice(vtc);
        return;
    };
    let ob = &vc[d * kd..(d + 1) * kd];
    for (dst, src) in vh[..len * kd].chunks_exact_mut(w).zip(vc.chunks_exact(w)) {
        for ((d, &x), &o) in dst.iter_mut().zip(src).zip(ob) {
            *d = x - o;
        }
    }
    for (dst, src) in vth.chunks_exact_mut(w).zip(vtc.chunks_exact(w)) {
        for ((d, &x), &o) in dst.iter_mut().zip(src).zip(ob) {
            *d = x - o;
        }
    }
}

// One group, compiled for the active instruction set.
efa_num::isa_compiled!(group => group_body, cx.isa, (cx: &Ctx<'_, T>, t: Task<'_, T>, sc: &mut Scratch<T>) -> ());

/// Where one base query row of one head sits: its head's first column, the row, its offset in
/// a `[N, H·K]` row block, its index among the `N·H` (row, head) pairs, its query and its base
/// exponentials.
struct RowAt<'r, T> {
    c0: usize,
    i: usize,
    at: usize,
    idx: usize,
    qi: &'r [T],
    e: &'r [T],
}

#[inline(always)]
fn group_body<T: Real>(cx: &Ctx<'_, T>, mut t: Task<'_, T>, sc: &mut Scratch<T>) {
    let dm = cx.dm;
    let (n, hk, kd, heads, g) = (dm.n, dm.hk, dm.kd, dm.heads, t.g);
    let len = cx.cfg.lengths[g];
    sc.fit(&dm);
    let [qg, kg, _] = cx.base(g);
    // The keys some member sees (a base row every member replaces takes no part in any sum,
    // whatever it holds).
    sc.keys.clear();
    let seen = |j: usize| t.members.iter().any(|&s| cx.cfg.target[s] != j);
    sc.keys.extend((0..len).filter(|&j| seen(j)));
    for h in 0..heads {
        let c0 = h * kd;
        // This head's keys and values, transposed, for the rows computed directly.
        transpose_cols(cx.isa, kg, hk, c0, kd, len, &mut sc.ktr, n);
        centred(cx, &t, (c0, len, &sc.keys), 1, &mut sc.kc, &mut sc.ktc);
        centred(cx, &t, (c0, len, &sc.keys), 2, &mut sc.vc, &mut sc.vtc);
        // The direct rows' dP run along the centred values.
        transpose_cols(cx.isa, &sc.vc, kd, 0, kd, len, &mut sc.vtr, n);
        for i in 0..n {
            let (at, idx) = (i * hk + c0, i * heads + h);
            let e0 = ((g * heads + h) * n + i) * n;
            let r = RowAt {
                c0,
                i,
                at,
                idx,
                qi: &qg[at..at + kd],
                e: &cx.saved.e[e0..e0 + len],
            };
            pairs_back(cx, &mut t, &r, sc);
            direct_back(cx, &mut t, &r, sc);
        }
    }
}

/// The leave-one-out pairs of one base row and head: their cotangents gathered per target,
/// every base key's share from the leave-one-out sums over targets, the replaced keys', and
/// the row's `dq`.
#[inline(always)]
fn pairs_back<T: Real>(
    cx: &Ctx<'_, T>,
    t: &mut Task<'_, T>,
    r: &RowAt<'_, T>,
    sc: &mut Scratch<T>,
) {
    let dm = cx.dm;
    let (n, hk, kd, g) = (dm.n, dm.hk, dm.kd, t.g);
    let (len, scale, k16) = (cx.cfg.lengths[g], cx.scale, k16::<T>(cx.isa, kd));
    let (nh, sv) = (n * dm.heads, cx.saved);
    let (c0, at, idx, qi, e) = (r.c0, r.at, r.idx, r.qi, r.e);
    let Scratch {
        rpos,
        dpos,
        rx,
        dx,
        dq: dqi,
        dp,
        pairs,
        cnt,
        seen,
        kc,
        ktc,
        vc,
        vtc,
        keys,
        vh,
        vth,
        ao,
        ..
    } = sc;
    // The pairs' outputs less the dominant key's value, ô = r·Â⁻[t] + p·v̂_t, from the
    // leave-one-out sums of eⱼ·v̂ⱼ (as the output from those of eⱼ·vⱼ: r·Z⁻ + p = 1).
    if t.members.iter().any(|&s| sv.direct[s * nh + idx] == 0) {
        row_centred(len, kd, (e, keys), (vc, vtc), (vh, vth));
        loo_rows(len, kd, |j| e[j], |j| &vh[j * kd..(j + 1) * kd], ao);
    }
    // Gather the leave-one-out pairs' cotangents per target: R[t], Δ[t].
    rpos[..len * kd].fill(T::ZERO);
    dpos[..len].fill(T::ZERO);
    cnt[..len].fill(0);
    pairs.clear();
    for (mi, &s) in t.members.iter().enumerate() {
        if sv.direct[s * nh + idx] != 0 {
            continue;
        }
        let tg = cx.cfg.target[s];
        let row_at = s * n * hk + at;
        let dos = &cx.d_o[row_at..row_at + kd];
        let (r, p) = (sv.r[s * nh + idx], sv.p[s * nh + idx]);
        // D = ⟨dO, ô⟩ and dP' = ⟨dO, v̂_t⟩ with the values less the dominant key's: the
        // score gradients p·(dP − D) are unchanged, but their round-off is relative to
        // how far the values are from that key's (see `row_centred`).
        let vts = &vth[mi * kd..(mi + 1) * kd];
        let dpt = dot_k(k16, dos, vts);
        let d = r * dot_k(k16, dos, &ao[tg * kd..(tg + 1) * kd]) + p * dpt;
        axpy_k(k16, r, dos, &mut rpos[tg * kd..(tg + 1) * kd]);
        dpos[tg] += r * d;
        cnt[tg] += 1;
        // The pair's replaced key (`dS'` kept for `dq`, added after the base keys').
        axpy_k(k16, p, dos, &mut t.dvt[mi][c0..c0 + kd]);
        let ds = scale * (p * (dpt - d));
        axpy_k(k16, ds, qi, &mut t.dkt[mi][c0..c0 + kd]);
        pairs.push((ds, s, mi));
    }
    dqi.fill(T::ZERO);
    if !pairs.is_empty() {
        // Their leave-one-out sums over targets: suffixes, then prefixes in front.
        loo_rows(len, kd, |_| T::ONE, |j| &rpos[j * kd..(j + 1) * kd], rx);
        loo_scalars(&dpos[..len], &mut dx[..len]);
        // Every base key's share of those pairs: the keys some pair sees (a key is
        // left out by the pairs that target it; a key no pair sees adds nothing, not
        // even 0·NaN from a non-finite row).
        seen.clear();
        seen.extend((0..len).filter(|&j| cnt[j] < pairs.len()));
        let ds = &mut dp[..len];
        for &j in seen.iter() {
            let (ej, w, kj) = (e[j], &rx[j * kd..(j + 1) * kd], j * hk + c0);
            axpy_k(k16, ej, w, &mut t.dv[kj..kj + kd]);
            ds[j] = scale * (ej * (dot_k(k16, w, &vh[j * kd..(j + 1) * kd]) - dx[j]));
            axpy_k(k16, ds[j], qi, &mut t.dk[kj..kj + kd]);
        }
        // dq = Σ dS·k over every pair's keys, with the keys less their mean: the
        // pairs' dS sum to zero over each one's keys, so this is the same sum, while
        // its round-off scales with the keys' spread, not their common part.
        let key = |k: usize| &kc[seen[k] * kd..(seen[k] + 1) * kd];
        add_rows(seen.len(), |k| ds[seen[k]], key, dqi);
        // The pairs' replaced keys, in member order.
        let kt_row = |k: usize| &ktc[pairs[k].2 * kd..(pairs[k].2 + 1) * kd];
        add_rows(pairs.len(), |k| pairs[k].0, kt_row, dqi);
        for (a, &d) in t.dq[at..at + kd].iter_mut().zip(dqi.iter()) {
            *a += d;
        }
    }
}

/// The pairs of one base row and head computed directly (a sample's own query row, a small
/// leave-one-out sum, a non-finite replaced score): the ordinary backward of one softmax row.
#[inline(always)]
fn direct_back<T: Real>(
    cx: &Ctx<'_, T>,
    t: &mut Task<'_, T>,
    r: &RowAt<'_, T>,
    sc: &mut Scratch<T>,
) {
    let dm = cx.dm;
    let (n, hk, kd, g) = (dm.n, dm.hk, dm.kd, t.g);
    let (len, scale, k16) = (cx.cfg.lengths[g], cx.scale, k16::<T>(cx.isa, kd));
    let (nh, sv) = (n * dm.heads, cx.saved);
    let (c0, i, at, idx, qi) = (r.c0, r.i, r.at, r.idx, r.qi);
    let Scratch {
        dq: dqi,
        row,
        ktr,
        vtr,
        dp,
        kc,
        ktc,
        vtc,
        ..
    } = sc;
    for (mi, &s) in t.members.iter().enumerate() {
        if sv.direct[s * nh + idx] == 0 {
            continue;
        }
        let tg = cx.cfg.target[s];
        let row_at = s * n * hk + at;
        let dos = &cx.d_o[row_at..row_at + kd];
        let kts = &cx.kt[s * hk + c0..][..kd];
        let own = tg == i;
        let q = if own { &cx.qt[s * hk + c0..][..kd] } else { qi };
        direct_probs(cx.isa, q, ktr, n, len, (tg, kts), scale, row);
        // dPⱼ = ⟨dO, ṽⱼ⟩ along the keys (values less their mean), D = Σ pⱼ·dPⱼ from
        // the same dP, dSⱼ = scale·pⱼ·(dPⱼ − D).
        let dp = &mut dp[..len];
        combine(dos, vtr, n, dp);
        if let Some(x) = dp.get_mut(tg) {
            *x = dot_k(k16, dos, &vtc[mi * kd..(mi + 1) * kd]);
        }
        let d = row[..len]
            .iter()
            .zip(dp.iter())
            .fold(T::ZERO, |a, (&pj, &dpj)| a + pj * dpj);
        // dp becomes dS in place.
        for (j, (&pj, dsj)) in row[..len].iter().zip(dp.iter_mut()).enumerate() {
            let kj = j * hk + c0;
            *dsj = scale * (pj * (*dsj - d));
            if j == tg {
                axpy_k(k16, pj, dos, &mut t.dvt[mi][c0..c0 + kd]);
                axpy_k(k16, *dsj, q, &mut t.dkt[mi][c0..c0 + kd]);
            } else {
                axpy_k(k16, pj, dos, &mut t.dv[kj..kj + kd]);
                axpy_k(k16, *dsj, q, &mut t.dk[kj..kj + kd]);
            }
        }
        // dq over the keys less their mean (the row's dS sum to zero).
        let key = |j: usize| {
            if j == tg {
                &ktc[mi * kd..(mi + 1) * kd]
            } else {
                &kc[j * kd..(j + 1) * kd]
            }
        };
        dqi.fill(T::ZERO);
        add_rows(len, |j| dp[j], key, dqi);
        let dst = if own {
            &mut t.dqt[mi][c0..c0 + kd]
        } else {
            &mut t.dq[at..at + kd]
        };
        for (a, &d) in dst.iter_mut().zip(dqi.iter()) {
            *a += d;
        }
    }
}
