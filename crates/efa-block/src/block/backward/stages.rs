//! The backward's stages, the forward's in reverse: second norm, feed-forward layer, first
//! norm with the output projection, attention, projections (see [`super::chunk_body`]).

use super::super::dense::{grow, ld, mm, Packed};
use super::super::err;
use super::super::forward::{query_rows, sample_qkv, At};
use super::super::norm::{col_sums, ln_back_rows};
use super::super::rows::{self, QkvGrads, Rows, RowsMut, RowsScratch};
use super::super::saved::SavedParts;
use super::partial::BlockGrads;
use super::{query_row, Ctx};
use crate::KernelError;
use efa_num::pool::Buf;
use efa_num::{MatMut, MatRef, Real};
use std::mem::MaybeUninit;

/// `y = LN₂(u)` with `u = z + h·W₂ + b₂`: `du = LN₂ᵀ(dy)` into `dz` (row stride `ld(d)`,
/// zero padding), with `dγ₂`, `dβ₂`.
#[inline(always)]
pub(super) fn norm2_back<'s, T: Real>(
    cx: &Ctx<T>,
    at: At,
    sv: &SavedParts<&[T]>,
    dy: &[T],
    dz: &'s mut Buf<T>,
    g: &mut BlockGrads<&mut [T]>,
) -> &'s mut [T] {
    let (d, ldd) = (cx.dm.d, ld(cx.dm.d));
    let dz = grow(dz, at.rq * ldd);
    if ldd > d {
        for row in dz.chunks_exact_mut(ldd) {
            row[d..].fill(T::ZERO);
        }
    }
    let g2 = cx.vecs[2];
    let rq = at.rq;
    let xhat2 = MatRef::row_major(sv.xhat2, rq, d, ldd);
    ln_back_rows(
        cx.isa,
        Some(MatRef::row_major(dy, rq, d, d)),
        MatMut::row_major(dz, rq, d, ldd),
        (xhat2, sv.rstd2),
        g2,
        (g.g2, g.be2),
    );
    dz
}

/// `u = z + relu(z·W₁ + b₁)·W₂ + b₂`: `db₂, dW₂, db₁, dW₁`, and `dz = du + dh·W₁ᵀ` in place
/// (`z` recomputed from `x̂₁`).
#[inline(always)]
pub(super) fn ffn_back<T: Real>(
    cx: &Ctx<T>,
    at: At,
    sv: &SavedParts<&[T]>,
    dz: &mut [T],
    (dh, y1): (&mut Buf<T>, &mut Buf<T>),
    g: &mut BlockGrads<&mut [T]>,
) {
    let (isa, d, f, rq) = (cx.isa, cx.dm.d, cx.dm.f, at.rq);
    let (ldd, ldf) = (ld(d), ld(f));
    let [g1, be1, _] = cx.vecs;
    // db₂ = Σ du, dW₂ = hᵀ·du, dh = du·W₂ᵀ (through the ReLU).
    col_sums(isa, g.b2, dz, ldd, rq);
    mm(
        isa,
        (f, d, rq),
        (sv.hid, (1, ldf)),
        (dz, ldd),
        (g.w2, ldd),
        true,
    );
    let dh = grow(dh, rq * ldf);
    let w2_t = &cx.w2_t;
    mm(
        isa,
        (rq, f, d),
        (dz, (ldd, 1)),
        (&w2_t.data, w2_t.ld),
        (dh, ldf),
        false,
    );
    for r in 0..rq {
        let hid = &sv.hid[r * ldf..r * ldf + f];
        for (g, &h) in dh[r * ldf..r * ldf + f].iter_mut().zip(hid) {
            // forward computed h = relu(·): the derivative is 1 above 0, NaN at NaN, else 0.
            if h.is_nan() {
                *g = h;
            } else if h <= T::ZERO {
                *g = T::ZERO;
            }
        }
    }
    // h = relu(z·W₁ + b₁): db₁ = Σ dh, dW₁ = zᵀ·dh, dz = du + dh·W₁ᵀ.
    col_sums(isa, g.b1, dh, ldf, rq);
    let y1 = grow(y1, rq * ldd);
    for (row, xh) in y1.chunks_exact_mut(ldd).zip(sv.xhat1.chunks_exact(ldd)) {
        let (out, pad) = row.split_at_mut(d);
        for ((o, &x), (&g, &b)) in out.iter_mut().zip(&xh[..d]).zip(g1.iter().zip(be1)) {
            *o = x * g + b;
        }
        pad.fill(T::ZERO);
    }
    mm(
        isa,
        (d, f, rq),
        (y1, (1, ldd)),
        (dh, ldf),
        (g.w1, ldf),
        true,
    );
    let w1_t = &cx.w1_t;
    mm(
        isa,
        (rq, d, f),
        (dh, (ldf, 1)),
        (&w1_t.data, w1_t.ld),
        (dz, ldd),
        true,
    );
}

/// `z = LN₁(x_q + a)` with `a = o·W_o + b_o`: `dr = LN₁ᵀ(dz)` in place (the gradient of both
/// the residual and `a`), `dγ₁, dβ₁, db_o, dW_o`; returns `do = dr·W_oᵀ` (row stride
/// `ld(H·K)`).
#[inline(always)]
pub(super) fn norm1_back<'s, T: Real>(
    cx: &Ctx<T>,
    at: At,
    sv: &SavedParts<&[T]>,
    dz: &mut [T],
    dob: &'s mut Buf<T>,
    g: &mut BlockGrads<&mut [T]>,
) -> &'s [T] {
    let (isa, d, hk, rq) = (cx.isa, cx.dm.d, cx.dm.hk, at.rq);
    let (ldd, ldhk) = (ld(d), ld(hk));
    let g1 = cx.vecs[0];
    let xhat1 = MatRef::row_major(sv.xhat1, rq, d, ldd);
    ln_back_rows(
        isa,
        None,
        MatMut::row_major(dz, rq, d, ldd),
        (xhat1, sv.rstd1),
        g1,
        (g.g1, g.be1),
    );
    col_sums(isa, g.bo, dz, ldd, rq);
    mm(
        isa,
        (hk, d, rq),
        (sv.o, (1, cx.ldo)),
        (dz, ldd),
        (g.wo, ldd),
        true,
    );
    let dob = grow(dob, rq * ldhk);
    let wo_t = &cx.wo_t;
    mm(
        isa,
        (rq, hk, d),
        (dz, (ldd, 1)),
        (&wo_t.data, wo_t.ld),
        (dob, ldhk),
        false,
    );
    dob
}

/// The attention's input gradients of one chunk: the op's own (given `q, k, v`, row stride
/// `H·K`) or scratch for the projections' backward (row stride `ld(H·K)`).
pub(super) struct AttnGrads<'s, T> {
    pub dq: &'s mut [T],
    pub dk: &'s mut [T],
    pub dv: &'s mut [T],
    pub ld: usize,
}

/// Attention per sample, from its kept probabilities or with them formed again from `q`, `k`
/// and the kept maxima and scales (the forward's bits): `dq, dk, dv` for `do`.
#[inline(always)]
pub(super) fn attention_back<'s, T: Real>(
    cx: &Ctx<T>,
    at: At,
    sv: &SavedParts<&[T]>,
    dob: &[T],
    out: AttnGrads<'s, T>,
    pbuf: &mut Buf<T>,
    attn: &mut RowsScratch<T>,
) -> Result<AttnGrads<'s, T>, KernelError> {
    let (dm, isa) = (cx.dm, cx.isa);
    let (n, nq, ldhk, ldg) = (dm.n, dm.nq, ld(dm.hk), out.ld);
    let (plen, nsp, nkept) = (
        cx.cfg.p_len(dm),
        cx.cfg.saved_p_len(dm),
        cx.cfg.kept_len(dm),
    );
    let pbuf = grow(pbuf, if nsp > 0 { 0 } else { plen });
    let AttnGrads { dq, dk, dv, ld: _ } = out;
    for i in 0..at.ns {
        let shape = cx.cfg.shape(dm, at.s0 + i);
        let x = sample_qkv(cx.given, sv.q, sv.kv, *dm, at.s0, i);
        let (qr, kr) = (
            i * nq * ldg..(i + 1) * nq * ldg,
            i * n * ldg..(i + 1) * n * ldg,
        );
        let p: &[T] = if nsp > 0 {
            &sv.p[i * nsp..(i + 1) * nsp]
        } else {
            // SAFETY: `MaybeUninit<T>` has the layout of `T`; the kernel only writes
            // initialised values through the view.
            let pu = unsafe { &mut *(&mut *pbuf as *mut [T] as *mut [MaybeUninit<T>]) };
            let kept = Some(&sv.kept[i * nkept..(i + 1) * nkept]);
            rows::probs_uninit(isa, &shape, x.q, x.k, kept, pu, attn)
                .map_err(|e| err(e.to_string()))?;
            pbuf
        };
        let d_o = Rows {
            data: &dob[i * nq * ldhk..(i + 1) * nq * ldhk],
            ld: ldhk,
        };
        let grads = QkvGrads {
            dq: RowsMut {
                data: &mut dq[qr],
                ld: ldg,
            },
            dk: RowsMut {
                data: &mut dk[kr.clone()],
                ld: ldg,
            },
            dv: RowsMut {
                data: &mut dv[kr],
                ld: ldg,
            },
        };
        rows::backward(isa, &shape, x, p, d_o, grads, attn).map_err(|e| err(e.to_string()))?;
    }
    Ok(AttnGrads {
        dq,
        dk,
        dv,
        ld: ldg,
    })
}

/// The projections' scratch rows: gathered query rows, `dx` before the residual, and the
/// query rows' `dx` when there is one query per sample.
pub(super) struct ProjScratch<'s, T> {
    pub xq: &'s mut Buf<T>,
    pub dxs: &'s mut Buf<T>,
    pub dxq: &'s mut Buf<T>,
}

/// `q = x_q·W_q + b_q, k = x·W_k + b_k, v = x·W_v + b_v`: `db, dW` of each and every row of
/// `dx` (with the residual's gradient `dz` at the query rows).
#[inline(always)]
pub(super) fn project_back<T: Real>(
    cx: &Ctx<T>,
    at: At,
    [wq_t, wk_t, wv_t]: &[Packed<T>; 3],
    grads: AttnGrads<'_, T>,
    (dz, dx): (&[T], &mut [MaybeUninit<T>]),
    sc: ProjScratch<'_, T>,
    g: &mut BlockGrads<&mut [T]>,
) {
    let (dm, isa) = (cx.dm, cx.isa);
    let (n, d, hk, rq, rk) = (dm.n, dm.d, dm.hk, at.rq, at.rk);
    let (ldd, ldhk) = (ld(d), ld(hk));
    let AttnGrads { dq, dk, dv, .. } = grads;
    let xc = &cx.x[at.s0 * n * d..(at.s0 + at.ns) * n * d];
    let xq = query_rows(cx.cfg, dm, at.s0, at.ns, xc, sc.xq);
    col_sums(isa, g.bq, dq, ldhk, rq);
    mm(
        isa,
        (d, hk, rq),
        (xq, (1, d)),
        (dq, ldhk),
        (g.wq, ldhk),
        true,
    );
    col_sums(isa, g.bk, dk, ldhk, rk);
    mm(
        isa,
        (d, hk, rk),
        (xc, (1, d)),
        (dk, ldhk),
        (g.wk, ldhk),
        true,
    );
    col_sums(isa, g.bv, dv, ldhk, rk);
    mm(
        isa,
        (d, hk, rk),
        (xc, (1, d)),
        (dv, ldhk),
        (g.wv, ldhk),
        true,
    );
    let dxs = grow(sc.dxs, rk * ldd);
    mm(
        isa,
        (rk, d, hk),
        (dk, (ldhk, 1)),
        (&wk_t.data, wk_t.ld),
        (dxs, ldd),
        false,
    );
    mm(
        isa,
        (rk, d, hk),
        (dv, (ldhk, 1)),
        (&wv_t.data, wv_t.ld),
        (dxs, ldd),
        true,
    );
    if cx.cfg.queries.is_none() {
        mm(
            isa,
            (rq, d, hk),
            (dq, (ldhk, 1)),
            (&wq_t.data, wq_t.ld),
            (dxs, ldd),
            true,
        );
        // Every row of dx written (rk = rq rows of d).
        let rows = dx.chunks_exact_mut(d.max(1));
        for (out, (g, r)) in rows.zip(dxs.chunks_exact(ldd).zip(dz.chunks_exact(ldd))) {
            for k in 0..d {
                out[k].write(g[k] + r[k]);
            }
        }
    } else {
        // One query row per sample: its q-gradient and residual go to that row only.
        for (out, g) in dx.chunks_exact_mut(d.max(1)).zip(dxs.chunks_exact(ldd)) {
            for k in 0..d {
                out[k].write(g[k]);
            }
        }
        // SAFETY: the loop wrote every row of dx (rk rows of d: `dxs` has rk rows);
        // `MaybeUninit<T>` has the layout of `T`.
        let dx = unsafe { &mut *(dx as *mut [MaybeUninit<T>] as *mut [T]) };
        let dxq = grow(sc.dxq, rq * ldd);
        mm(
            isa,
            (rq, d, hk),
            (dq, (ldhk, 1)),
            (&wq_t.data, wq_t.ld),
            (dxq, ldd),
            false,
        );
        for r in 0..rq {
            let at = query_row(cx.cfg, dm, at.s0, r);
            for k in 0..d {
                dx[at * d + k] += dxq[r * ldd + k] + dz[r * ldd + k];
            }
        }
    }
}
