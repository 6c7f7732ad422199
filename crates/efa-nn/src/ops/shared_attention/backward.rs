//! The backward: one task per group (its base gradients and its samples' gradients), each
//! compiled for the active instruction set.

use super::rows::{add_rows, axpy_k, combine, direct_probs, dot_k, k16, loo_rows, loo_scalars, L};
use super::{by_group, pieces, standard, Config, Dims, Inputs, Saved};
use efa_attn::micro::transpose_cols;
use efa_num::Real;
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;

/// What every group's task reads: the inputs, the output and its cotangent `[B, N, H·K]`, and
/// the forward's saved state.
struct Ctx<'a, T> {
    inp: Inputs<'a, T>,
    o: &'a [T],
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
    rpos: Vec<T>,
    dpos: Vec<T>,
    rx: Vec<T>,
    dx: Vec<T>,
    /// A row's `dq` `[K]` and a direct row's probabilities `[N]`.
    dq: Vec<T>,
    row: Vec<T>,
    /// Per row, the leave-one-out pairs' `dS'` and samples, the pairs per target `[N]` and
    /// the base keys some pair sees.
    pairs: Vec<(T, usize)>,
    cnt: Vec<usize>,
    seen: Vec<usize>,
    /// One head's base keys and values transposed `[K, N]`, and a direct row's `dP` `[N]`.
    ktr: Vec<T>,
    vtr: Vec<T>,
    dp: Vec<T>,
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

/// The gradients of `q, k, v, q_t, k_t, v_t` given the output `o` and its cotangent.
pub(super) fn run<T: Real>(
    cfg: &Config,
    dm: &Dims,
    inputs: &[&ArrayD<T>],
    o: &ArrayD<T>,
    d_o: &ArrayD<T>,
    saved: &Saved<T>,
) -> Vec<Option<ArrayD<T>>> {
    let (g, n, b, hk) = (dm.g, dm.n, dm.b, dm.hk);
    let x: Vec<_> = inputs.iter().map(|a| standard(a)).collect();
    let (o, d_o) = (standard(o), standard(d_o));
    let cx = Ctx {
        inp: Inputs::new(cfg, dm, &x),
        o: &o,
        d_o: &d_o,
        saved,
    };
    let mut grads: Vec<Vec<T>> = (0..3)
        .map(|_| vec![T::ZERO; g * n * hk])
        .chain((0..3).map(|_| vec![T::ZERO; b * hk]))
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

// One group, compiled for the active instruction set.
isa_compiled!(group => group_body, cx.isa, (cx: &Ctx<'_, T>, t: Task<'_, T>, sc: &mut Scratch<T>) -> ());

#[inline(always)]
fn group_body<T: Real>(cx: &Ctx<'_, T>, mut t: Task<'_, T>, sc: &mut Scratch<T>) {
    let dm = cx.dm;
    let (n, hk, kd, heads, g) = (dm.n, dm.hk, dm.kd, dm.heads, t.g);
    let len = cx.cfg.lengths[g];
    let scale = cx.scale;
    let k16 = k16::<T>(cx.isa, kd);
    sc.fit(&dm);
    let [qg, kg, vg] = cx.base(g);
    let (nh, sv) = (n * heads, cx.saved);
    let Scratch {
        rpos,
        dpos,
        rx,
        dx,
        dq: dqi,
        row,
        ktr,
        vtr,
        dp,
        pairs,
        cnt,
        seen,
    } = sc;
    for h in 0..heads {
        let c0 = h * kd;
        // This head's keys and values, transposed, for the rows computed directly.
        transpose_cols(cx.isa, kg, hk, c0, kd, len, ktr, n);
        transpose_cols(cx.isa, vg, hk, c0, kd, len, vtr, n);
        for i in 0..n {
            let (at, idx) = (i * hk + c0, i * heads + h);
            let qi = &qg[at..at + kd];
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
                let d = dot_k(k16, dos, &cx.o[row_at..row_at + kd]);
                let r = sv.r[s * nh + idx];
                axpy_k(k16, r, dos, &mut rpos[tg * kd..(tg + 1) * kd]);
                dpos[tg] += r * d;
                cnt[tg] += 1;
                // The pair's replaced key (`dS'` kept for `dq`, added after the base keys').
                let vts = &cx.vt[s * hk + c0..][..kd];
                let p = sv.p[s * nh + idx];
                axpy_k(k16, p, dos, &mut t.dvt[mi][c0..c0 + kd]);
                let ds = scale * (p * (dot_k(k16, dos, vts) - d));
                axpy_k(k16, ds, qi, &mut t.dkt[mi][c0..c0 + kd]);
                pairs.push((ds, s));
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
                let e0 = ((g * heads + h) * n + i) * n;
                let e = &sv.e[e0..e0 + len];
                let ds = &mut dp[..len];
                for &j in seen.iter() {
                    let (ej, w, kj) = (e[j], &rx[j * kd..(j + 1) * kd], j * hk + c0);
                    axpy_k(k16, ej, w, &mut t.dv[kj..kj + kd]);
                    ds[j] = scale * (ej * (dot_k(k16, w, &vg[kj..kj + kd]) - dx[j]));
                    axpy_k(k16, ds[j], qi, &mut t.dk[kj..kj + kd]);
                }
                let key = |k: usize| &kg[seen[k] * hk + c0..seen[k] * hk + c0 + kd];
                add_rows(seen.len(), |k| ds[seen[k]], key, dqi);
                // The pairs' replaced keys, in member order.
                let kt_row = |k: usize| &cx.kt[pairs[k].1 * hk + c0..][..kd];
                add_rows(pairs.len(), |k| pairs[k].0, kt_row, dqi);
                for (a, &d) in t.dq[at..at + kd].iter_mut().zip(dqi.iter()) {
                    *a += d;
                }
            }
            // The rows computed directly: the ordinary backward of one softmax row.
            for (mi, &s) in t.members.iter().enumerate() {
                if sv.direct[s * nh + idx] == 0 {
                    continue;
                }
                let tg = cx.cfg.target[s];
                let row_at = s * n * hk + at;
                let dos = &cx.d_o[row_at..row_at + kd];
                let (kts, vts) = (&cx.kt[s * hk + c0..][..kd], &cx.vt[s * hk + c0..][..kd]);
                let own = tg == i;
                let q = if own { &cx.qt[s * hk + c0..][..kd] } else { qi };
                direct_probs(cx.isa, q, ktr, n, len, (tg, kts), scale, row);
                // dPⱼ = ⟨dO, vⱼ⟩ along the keys, dSⱼ = scale·pⱼ·(dPⱼ − D).
                let dp = &mut dp[..len];
                combine(dos, vtr, n, dp);
                if let Some(x) = dp.get_mut(tg) {
                    *x = dot_k(k16, dos, vts);
                }
                let d = dot_k(k16, dos, &cx.o[row_at..row_at + kd]);
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
                let key = |j: usize| {
                    if j == tg {
                        kts
                    } else {
                        &kg[j * hk + c0..j * hk + c0 + kd]
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
    }
}
