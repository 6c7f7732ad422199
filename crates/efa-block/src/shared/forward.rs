//! The forward: one task per group (its samples' outputs and saved state), each compiled for
//! the active instruction set.

use super::rows::{add_rows, direct_probs, k16, loo_rows, loo_scalars, mix_k, scores, L};
use super::{by_group, pieces, standard, Config, Dims, Inputs, Saved, LOO_MIN};
use efa_attn::micro::transpose_cols;
use efa_num::pool::{self, Buf};
use efa_num::Real;
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;

/// One group's work: its samples (increasing) and the pieces of the outputs it writes.
struct Task<'a, T> {
    g: usize,
    members: &'a [usize],
    /// Per member: output rows `[N, H·K]`, and `r`, `p'`, flags `[N, H]`.
    o: Vec<&'a mut [T]>,
    r: Vec<&'a mut [T]>,
    p: Vec<&'a mut [T]>,
    direct: Vec<&'a mut [u8]>,
    /// Base exponentials `[H, N, N]`.
    e: &'a mut [T],
}

/// Per-thread scratch, sized for `N` positions of width `K`.
#[derive(Default)]
struct Scratch<T> {
    /// Keys of one head, transposed `[K, N]`.
    kt: Buf<T>,
    /// Leave-one-out sums `A⁻` `[N, K]` and `Z⁻` `[N]`.
    loo: Buf<T>,
    zl: Buf<T>,
    /// A direct row's probabilities `[N]`.
    row: Buf<T>,
    /// The members' replaced keys of one head, transposed `[K, M]`, and per member the
    /// replaced key's score `s'`, then `exp(−|s' − m|)` `[M]`.
    ktt: Buf<T>,
    sp: Buf<T>,
    ex: Buf<T>,
}

impl<T: Real> Scratch<T> {
    fn fit(&mut self, dm: &Dims, members: usize) {
        let (n, kd) = (dm.n, dm.kd);
        for (buf, len) in [
            // Transposed rows `+ L`: `combine` reads its last block whole.
            (&mut self.kt, kd * n + L),
            (&mut self.loo, n * kd),
            (&mut self.zl, n),
            (&mut self.row, n),
            (&mut self.ktt, kd * members + L),
            (&mut self.sp, members),
            (&mut self.ex, members),
        ] {
            if buf.len() != len {
                buf.resize(len, T::ZERO);
            }
        }
    }
}

/// The output `[B, N, H·K]` and the saved state.
pub(super) fn run<T: Real>(
    cfg: &Config,
    dm: &Dims,
    inputs: &[&ArrayD<T>],
) -> (ArrayD<T>, Saved<T>) {
    let (g, n, b, heads, hk) = (dm.g, dm.n, dm.b, dm.heads, dm.hk);
    let x: Vec<_> = inputs.iter().map(|a| standard(a)).collect();
    let cx = Inputs::new(cfg, dm, &x);
    let mut o = pool::filled(b * n * hk, T::ZERO);
    let mut s = Saved {
        e: Buf::from_vec(pool::filled(g * heads * n * n, T::ZERO)),
        r: Buf::from_vec(pool::filled(b * n * heads, T::ZERO)),
        p: Buf::from_vec(pool::filled(b * n * heads, T::ZERO)),
        direct: Buf::from_vec(pool::filled(b * n * heads, 0u8)),
    };
    let members = cfg.members(g);
    let tasks: Vec<Task<T>> = members
        .iter()
        .zip(by_group(&mut o, n * hk, &cfg.group, g))
        .zip(by_group(&mut s.r, n * heads, &cfg.group, g))
        .zip(by_group(&mut s.p, n * heads, &cfg.group, g))
        .zip(by_group(&mut s.direct, n * heads, &cfg.group, g))
        .zip(pieces(&mut s.e, heads * n * n, g))
        .enumerate()
        .map(|(gi, (((((m, o), r), p), direct), e))| Task {
            g: gi,
            members: m,
            o,
            r,
            p,
            direct,
            e,
        })
        .collect();
    tasks
        .into_par_iter()
        .for_each_init(Scratch::default, |sc, t| group(&cx, t, sc));
    let o = ArrayD::from_shape_vec(IxDyn(&[b, n, hk]), o).expect("shared attention: sizes");
    (o, s)
}

// One group, compiled for the active instruction set.
efa_num::isa_compiled!(group => group_body, cx.isa, (cx: &Inputs<'_, T>, t: Task<'_, T>, sc: &mut Scratch<T>) -> ());

#[inline(always)]
fn group_body<T: Real>(cx: &Inputs<'_, T>, mut t: Task<'_, T>, sc: &mut Scratch<T>) {
    let dm = cx.dm;
    let (n, hk, kd, heads, g) = (dm.n, dm.hk, dm.kd, dm.heads, t.g);
    let len = cx.cfg.lengths[g];
    let (scale, lo) = (cx.scale, T::from_f64(LOO_MIN));
    let k16 = k16::<T>(cx.isa, kd);
    let nm = t.members.len();
    sc.fit(&dm, nm);
    let [qg, kg, vg] = cx.base(g);
    let Scratch {
        kt: ktr,
        loo,
        zl,
        row,
        ktt,
        sp,
        ex,
    } = sc;
    for h in 0..heads {
        let c0 = h * kd;
        // This head's keys, transposed, so the scores run along the keys.
        transpose_cols(cx.isa, kg, hk, c0, kd, len, ktr, n);
        for (mi, &s) in t.members.iter().enumerate() {
            for (c, &x) in cx.kt[s * hk + c0..s * hk + c0 + kd].iter().enumerate() {
                ktt[c * nm + mi] = x;
            }
        }
        for i in 0..n {
            let qi = &qg[i * hk + c0..i * hk + c0 + kd];
            let e = &mut t.e[(h * n + i) * n..(h * n + i) * n + len];
            // Base scores sⱼ = scale·⟨qᵢ, kⱼ⟩, their maximum and eⱼ = exp(sⱼ − m).
            scores(qi, ktr, n, e);
            let mut m = T::NEG_INFINITY;
            for x in e.iter_mut() {
                *x *= scale;
                if *x > m {
                    m = *x;
                }
            }
            for x in e.iter_mut() {
                *x -= m;
            }
            efa_num::simd::exp_slice_with(cx.isa, e);
            let e = &*e;
            // Leave-one-out sums: suffixes first, then prefixes added in front.
            let vrow = |j: usize| &vg[j * hk + c0..j * hk + c0 + kd];
            loo_rows(len, kd, |j| e[j], vrow, loo);
            loo_scalars(e, &mut zl[..len]);
            // Every member's replaced-key score s' and exp(−|s' − m|), in one pass each.
            scores(qi, ktt, nm, sp);
            for (x, y) in sp.iter_mut().zip(ex.iter_mut()) {
                *x *= scale;
                *y = if *x <= m { *x - m } else { m - *x };
            }
            efa_num::simd::exp_slice_with(cx.isa, ex);
            for (mi, &s) in t.members.iter().enumerate() {
                let tg = cx.cfg.target[s];
                let (at, idx) = (i * hk + c0, i * heads + h);
                let out = &mut t.o[mi][at..at + kd];
                let (kts, vts) = (&cx.kt[s * hk + c0..][..kd], &cx.vt[s * hk + c0..][..kd]);
                let zm = zl[tg];
                if tg == i || zm < lo || zm.is_nan() || !sp[mi].is_finite() {
                    // The sample's own query row, a leave-one-out sum too small, or a
                    // replaced key's score that is not finite: directly.
                    let q = if tg == i {
                        &cx.qt[s * hk + c0..][..kd]
                    } else {
                        qi
                    };
                    direct_probs(cx.isa, q, ktr, n, len, (tg, kts), scale, row);
                    out.fill(T::ZERO);
                    let val = |j: usize| {
                        if j == tg {
                            vts
                        } else {
                            &vg[j * hk + c0..j * hk + c0 + kd]
                        }
                    };
                    add_rows(len, |j| row[j], val, out);
                    t.direct[mi][idx] = 1;
                    continue;
                }
                // s' ≤ m: Z = Z⁻ + e', r = 1/Z, p' = e'/Z; s' > m: with c = exp(m − s'),
                // Z = Z⁻·c + 1, p' = 1/Z, r = c/Z.
                let (r, p) = if sp[mi] <= m {
                    let r = T::ONE / (zm + ex[mi]);
                    (r, ex[mi] * r)
                } else {
                    let p = T::ONE / (zm * ex[mi] + T::ONE);
                    (ex[mi] * p, p)
                };
                mix_k(k16, (r, &loo[tg * kd..(tg + 1) * kd]), (p, vts), out);
                t.r[mi][idx] = r;
                t.p[mi][idx] = p;
            }
        }
    }
}
