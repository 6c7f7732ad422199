//! Backward of the block op, one chunk of whole samples at a time, mirroring `forward`:
//! each chunk writes its rows of the input gradients and its partial parameter gradients (its
//! piece of one buffer), summed afterwards element by element in chunk order.

use super::dense::{grow, ld, mm, Packed};
use super::forward::{query_rows, sample_qkv, slices, At};
use super::norm::{col_sums, ln_back_rows};
use super::rows::{self, Rows, RowsMut, RowsScratch};
use super::saved::{assume_init, carve, uninit, zeroed, Cut, Saved, SavedParts};
use super::{err, tail_at, Config, Dims, Source};
use crate::KernelError;
use efa_num::simd::{self, Isa};
use efa_num::Real;
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;
use std::mem::MaybeUninit;

mod partial;
use partial::{cut, outputs, BlockGrads};

/// Elements of a parameter gradient per task of the partial sums' reduction.
const SUM_PIECE: usize = 512;

/// What a backward chunk reads: shapes, settings, inputs, saved buffers and the transposed
/// kernels (`W_oᵀ`, `W₁ᵀ`, `W₂ᵀ`, and with projections `W_qᵀ`, `W_kᵀ`, `W_vᵀ`).
struct Ctx<'a, T> {
    cfg: &'a Config,
    dm: &'a Dims,
    isa: Isa,
    x: &'a [T],
    given: Option<[&'a [T]; 3]>,
    /// The attention ran elsewhere ([`super::BlockSource::Attended`]): its gradient is the
    /// op's (in `dq`).
    attended: bool,
    /// Row stride of the attention output `o` (saved, or the given `a`).
    ldo: usize,
    proj_t: Option<[Packed<T>; 3]>,
    wo_t: Packed<T>,
    w1_t: Packed<T>,
    w2_t: Packed<T>,
    /// `ln1 gain, ln1 bias, ln2 gain`.
    vecs: [&'a [T]; 3],
}

/// One chunk's rows of the saved buffers, the cotangent and the input gradients.
struct Chunk<'a, T> {
    at: At,
    saved: SavedParts<&'a [T]>,
    dy: &'a [T],
    /// The next chunk's [`Chunk::bulk`] (empty for the last chunk), fetched ahead into the
    /// cache (see [`prefetch_saved`]).
    ahead: [&'a [T]; 9],
    /// Input gradients not yet written: the chunk that owns them writes every row of `dx`
    /// (projection mode) or zeroes its pieces first (given `q, k, v`; see `super::saved::uninit`).
    dx: &'a mut [MaybeUninit<T>],
    dq: &'a mut [MaybeUninit<T>],
    dk: &'a mut [MaybeUninit<T>],
    dv: &'a mut [MaybeUninit<T>],
}

impl<'a, T> Chunk<'a, T> {
    /// The pieces of the buffers read in bulk: saved `p` (row-major path), `kept`, `kv, q, o,
    /// xhat1, hid, xhat2` and the cotangent `dy` (empty pieces cost nothing).
    fn bulk(&self) -> [&'a [T]; 9] {
        let s = &self.saved;
        [
            s.p, s.kept, s.kv, s.q, s.o, s.xhat1, s.hid, s.xhat2, self.dy,
        ]
    }
}

struct Scratch<T> {
    xq: Vec<T>,
    dz: Vec<T>,
    dh: Vec<T>,
    y1: Vec<T>,
    dob: Vec<T>,
    dq: Vec<T>,
    dk: Vec<T>,
    dv: Vec<T>,
    dxs: Vec<T>,
    dxq: Vec<T>,
    /// One sample's attention probabilities, formed again from `q` and `k`.
    p: Vec<T>,
    attn: RowsScratch<T>,
}

impl<T: Real> Scratch<T> {
    fn new() -> Self {
        Scratch {
            xq: Vec::new(),
            dz: Vec::new(),
            dh: Vec::new(),
            y1: Vec::new(),
            dob: Vec::new(),
            dq: Vec::new(),
            dk: Vec::new(),
            dv: Vec::new(),
            dxs: Vec::new(),
            dxq: Vec::new(),
            p: Vec::new(),
            attn: RowsScratch::new(),
        }
    }
}

/// Runs the backward for the cotangent `dy` of the output: one gradient per input.
pub(super) fn run<T: Real>(
    cfg: &Config,
    dm: &Dims,
    inputs: &[&ArrayD<T>],
    s: &Saved<T>,
    dy: &ArrayD<T>,
) -> Result<Vec<Option<ArrayD<T>>>, KernelError> {
    let vals = slices(inputs);
    let v = |i: usize| vals[i].as_slice().expect("standard layout");
    let dy = dy.as_standard_layout();
    let dy = dy.as_slice().expect("standard layout");
    let (b, n, nq, d, hk, f) = (dm.b, dm.n, dm.nq, dm.d, dm.hk, dm.f);
    let attended = cfg.src == Source::Attended;
    // The attention output: saved, or the given input (read in place).
    let (o_all, ldo) = if attended {
        (v(1), hk)
    } else {
        (&s.o[..], ld(hk))
    };
    if dy.len() != b * nq * d || o_all.len() != b * nq * ldo {
        return Err(err(format!(
            "backward: cotangent of {} elements or saved state for another shape (B = {b}, \
             Nq = {nq}, d = {d})",
            dy.len()
        )));
    }
    let t = tail_at(cfg.src);
    let project = cfg.project();
    let cx = Ctx {
        cfg,
        dm,
        isa: simd::active(),
        x: v(0),
        given: cfg.given().then(|| [v(1), v(2), v(3)]),
        attended,
        ldo,
        proj_t: project.then(|| [1, 3, 5].map(|i| Packed::transposed(v(i), d, hk))),
        wo_t: Packed::transposed(v(t), hk, d),
        w1_t: Packed::transposed(v(t + 4), d, f),
        w2_t: Packed::transposed(v(t + 6), f, d),
        vecs: [v(t + 2), v(t + 3), v(t + 8)],
    };
    // Written or zeroed piece by piece by the chunks that own them (`Chunk::dx`).
    let mut dx = uninit::<T>(b * n * d);
    // With the attention given, its gradient `da` `[B, Nq, H·K]` goes in `dq`.
    let (mut dq, mut dk, mut dv) = match cfg.src {
        Source::Given => (uninit(b * nq * hk), uninit(b * n * hk), uninit(b * n * hk)),
        Source::Attended => (uninit(b * nq * hk), Vec::new(), Vec::new()),
        Source::Project => (Vec::new(), Vec::new(), Vec::new()),
    };
    let per = Config::per_chunk(dm);
    let mut lens = SavedParts::per_sample(cfg, dm);
    lens.o = nq * ldo;
    let mut parts = s.each_ref().map(|v| &v[..]);
    parts.o = o_all;
    let mut chunks: Vec<Chunk<T>> = carve(parts, lens, per, b)
        .into_iter()
        .zip(dy.cut(nq * d, per, b))
        .zip(dx.as_mut_slice().cut(n * d, per, b))
        .zip(dq.as_mut_slice().cut(nq * hk, per, b))
        .zip(dk.as_mut_slice().cut(n * hk, per, b))
        .zip(dv.as_mut_slice().cut(n * hk, per, b))
        .zip((0..b).step_by(per))
        .map(|((((((saved, dy), dx), dq), dk), dv), s0)| Chunk {
            at: At::new(dm, s0, per),
            saved,
            dy,
            ahead: [&[]; 9],
            dx,
            dq,
            dk,
            dv,
        })
        .collect();
    for j in 1..chunks.len() {
        chunks[j - 1].ahead = chunks[j].bulk();
    }
    let parts: Vec<Vec<T>> = chunks
        .into_par_iter()
        .map_init(Scratch::new, |sc, c| chunk(&cx, c, sc))
        .collect::<Result<_, KernelError>>()?;
    // SAFETY: the chunks cover every buffer (`cut` gives each one piece per chunk) and every
    // chunk that returned Ok zeroed or wrote each of its pieces in full (`chunk_body`); on an
    // error we returned above.
    let (dx, dq, dk, dv) = unsafe {
        (
            assume_init(dx),
            assume_init(dq),
            assume_init(dk),
            assume_init(dv),
        )
    };
    let grads = sum_parts(&parts, BlockGrads::sizes(dm, project));
    let mut out = vec![ArrayD::from_shape_vec(IxDyn(&[b, n, d]), dx).expect("block: sizes")];
    if attended {
        out.push(ArrayD::from_shape_vec(IxDyn(&[b, nq, hk]), dq).expect("sizes"));
    } else if cfg.given() {
        out.push(ArrayD::from_shape_vec(IxDyn(&[b, nq, hk]), dq).expect("sizes"));
        out.push(ArrayD::from_shape_vec(IxDyn(&[b, n, hk]), dk).expect("sizes"));
        out.push(ArrayD::from_shape_vec(IxDyn(&[b, n, hk]), dv).expect("sizes"));
    }
    out.extend(outputs(grads, dm, project));
    Ok(out.into_iter().map(Some).collect())
}

/// The chunks' partial parameter gradients summed in chunk order (independent of the thread
/// count): every element adds its chunks' values in chunk order, the elements split over the
/// pool.
fn sum_parts<T: Real>(parts: &[Vec<T>], sizes: BlockGrads<usize>) -> BlockGrads<Vec<T>> {
    let mut off = 0;
    BlockGrads::from_array(sizes.into_array().map(|len| {
        let mut acc = vec![T::ZERO; len];
        let base = off;
        acc.par_chunks_mut(SUM_PIECE)
            .enumerate()
            .for_each(|(i, piece)| {
                let at = base + i * SUM_PIECE;
                for part in parts {
                    for (a, &v) in piece.iter_mut().zip(&part[at..]) {
                        *a += v;
                    }
                }
            });
        off += len;
        acc
    }))
}

/// Asks for this chunk's and the next chunk's saved rows (and cotangent rows) in the
/// second-level cache when a sample has at most [`PREFETCH_MAX_ROWS`] positions. A
/// micro-batch's saved state (29 MB at L = 4 in the temperature model when it held the
/// probabilities, about 25 MB since) outgrows the caches between the forward and the backward,
/// and the per-sample products that read it through short rows (`V·dOᵀ` per head, and `Pᵀ·dO`
/// when `P` was kept: with 44 positions in f32, rows of one to three cache lines, twelve rows
/// at a time) ran at a third of their in-cache speed, about the speed of the same calls on data
/// in main memory. This chunk's rows arrive while its first products
/// run, the next chunk's while the rest of this one does (usually the same thread's next
/// chunk: a thread runs a range of chunks in order unless another steals part of it). A hint:
/// no value depends on it.
fn prefetch_saved<T>(dm: &Dims, c: &Chunk<'_, T>) {
    if dm.n > PREFETCH_MAX_ROWS {
        return;
    }
    for piece in c.bulk().into_iter().chain(c.ahead) {
        simd::prefetch_l2(piece);
    }
}

/// Most positions per sample for [`prefetch_saved`]. With 132 (the lag-2 temperature model)
/// fetching ahead measured 1.5–2.7% slower at one thread: its longer rows did not stall the
/// same way.
const PREFETCH_MAX_ROWS: usize = 64;

// One chunk, compiled for the active instruction set.
efa_num::isa_compiled!(chunk => chunk_body, cx.isa, (cx: &Ctx<T>, c: Chunk<T>, sc: &mut Scratch<T>) -> Result<Vec<T>, KernelError>);

/// The backward of one chunk, the forward's stages in reverse: second norm, feed-forward
/// layer, first norm and output projection, attention, projections. Returns the chunk's
/// partial parameter gradients (one buffer, [`BlockGrads`] pieces in input order).
#[inline(always)]
fn chunk_body<T: Real>(
    cx: &Ctx<T>,
    c: Chunk<T>,
    sc: &mut Scratch<T>,
) -> Result<Vec<T>, KernelError> {
    let (dm, at) = (cx.dm, c.at);
    prefetch_saved(dm, &c);
    // This chunk's partial parameter gradients: one allocation of the 16 pieces (a small one,
    // reused from the heap; one buffer for every chunk would be a fresh mapping per call).
    let sizes = BlockGrads::sizes(dm, cx.proj_t.is_some());
    let mut part = vec![T::ZERO; sizes.total()];
    let mut g = cut(&mut part, &sizes);
    let Scratch {
        xq,
        dz,
        dh,
        y1,
        dob,
        dq,
        dk,
        dv,
        dxs,
        dxq,
        p: pbuf,
        attn,
    } = sc;
    let sv = &c.saved;
    let dz = norm2_back(cx, at, sv, c.dy, dz, &mut g);
    ffn_back(cx, at, sv, dz, (dh, y1), &mut g);
    let dob = norm1_back(cx, at, sv, dz, dob, &mut g);
    if cx.attended {
        // The attention's gradient is the op's: every row of `da` written.
        let rows = c.dq.chunks_exact_mut(dm.hk.max(1));
        for (out, grad) in rows.zip(dob.chunks_exact(ld(dm.hk))) {
            for (o, &v) in out.iter_mut().zip(grad) {
                o.write(v);
            }
        }
        residual_only(cx, at, dz, c.dx);
        return Ok(part);
    }
    let out = match cx.given {
        // Given q, k, v: their gradients are the op's, written in full by the attention.
        Some(_) => AttnGrads {
            dq: zeroed(c.dq),
            dk: zeroed(c.dk),
            dv: zeroed(c.dv),
            ld: dm.hk,
        },
        None => {
            let ldhk = ld(dm.hk);
            AttnGrads {
                dq: grow(dq, at.rq * ldhk),
                dk: grow(dk, at.rk * ldhk),
                dv: grow(dv, at.rk * ldhk),
                ld: ldhk,
            }
        }
    };
    let grads = attention_back(cx, at, sv, dob, out, pbuf, attn)?;
    match &cx.proj_t {
        Some(proj_t) => {
            let scratch = ProjScratch { xq, dxs, dxq };
            project_back(cx, at, proj_t, grads, (dz, c.dx), scratch, &mut g);
        }
        None => residual_only(cx, at, dz, c.dx),
    }
    Ok(part)
}

/// `y = LN₂(u)` with `u = z + h·W₂ + b₂`: `du = LN₂ᵀ(dy)` into `dz` (row stride `ld(d)`,
/// zero padding), with `dγ₂`, `dβ₂`.
#[inline(always)]
fn norm2_back<'s, T: Real>(
    cx: &Ctx<T>,
    at: At,
    sv: &SavedParts<&[T]>,
    dy: &[T],
    dz: &'s mut Vec<T>,
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
    let (xhat2, rstd2) = ((sv.xhat2, ldd), sv.rstd2);
    ln_back_rows(
        cx.isa,
        at.rq,
        Some((dy, d)),
        (dz, ldd),
        xhat2,
        rstd2,
        g2,
        g.g2,
        g.be2,
    );
    dz
}

/// `u = z + relu(z·W₁ + b₁)·W₂ + b₂`: `db₂, dW₂, db₁, dW₁`, and `dz = du + dh·W₁ᵀ` in place
/// (`z` recomputed from `x̂₁`).
#[inline(always)]
fn ffn_back<T: Real>(
    cx: &Ctx<T>,
    at: At,
    sv: &SavedParts<&[T]>,
    dz: &mut [T],
    (dh, y1): (&mut Vec<T>, &mut Vec<T>),
    g: &mut BlockGrads<&mut [T]>,
) {
    let (isa, d, f, rq) = (cx.isa, cx.dm.d, cx.dm.f, at.rq);
    let (ldd, ldf) = (ld(d), ld(f));
    let [g1, be1, _] = cx.vecs;
    // db₂ = Σ du, dW₂ = hᵀ·du, dh = du·W₂ᵀ (through the ReLU).
    col_sums(isa, g.b2, dz, ldd, rq);
    mm(isa, (f, d, rq), sv.hid, (1, ldf), dz, ldd, g.w2, ldd, true);
    let dh = grow(dh, rq * ldf);
    let w2_t = &cx.w2_t;
    mm(
        isa,
        (rq, f, d),
        dz,
        (ldd, 1),
        &w2_t.data,
        w2_t.ld,
        dh,
        ldf,
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
    mm(isa, (d, f, rq), y1, (1, ldd), dh, ldf, g.w1, ldf, true);
    let w1_t = &cx.w1_t;
    mm(
        isa,
        (rq, d, f),
        dh,
        (ldf, 1),
        &w1_t.data,
        w1_t.ld,
        dz,
        ldd,
        true,
    );
}

/// `z = LN₁(x_q + a)` with `a = o·W_o + b_o`: `dr = LN₁ᵀ(dz)` in place (the gradient of both
/// the residual and `a`), `dγ₁, dβ₁, db_o, dW_o`; returns `do = dr·W_oᵀ` (row stride
/// `ld(H·K)`).
#[inline(always)]
fn norm1_back<'s, T: Real>(
    cx: &Ctx<T>,
    at: At,
    sv: &SavedParts<&[T]>,
    dz: &mut [T],
    dob: &'s mut Vec<T>,
    g: &mut BlockGrads<&mut [T]>,
) -> &'s [T] {
    let (isa, d, hk, rq) = (cx.isa, cx.dm.d, cx.dm.hk, at.rq);
    let (ldd, ldhk) = (ld(d), ld(hk));
    let g1 = cx.vecs[0];
    ln_back_rows(
        isa,
        rq,
        None,
        (dz, ldd),
        (sv.xhat1, ldd),
        sv.rstd1,
        g1,
        g.g1,
        g.be1,
    );
    col_sums(isa, g.bo, dz, ldd, rq);
    mm(
        isa,
        (hk, d, rq),
        sv.o,
        (1, cx.ldo),
        dz,
        ldd,
        g.wo,
        ldd,
        true,
    );
    let dob = grow(dob, rq * ldhk);
    let wo_t = &cx.wo_t;
    mm(
        isa,
        (rq, hk, d),
        dz,
        (ldd, 1),
        &wo_t.data,
        wo_t.ld,
        dob,
        ldhk,
        false,
    );
    dob
}

/// The attention's input gradients of one chunk: the op's own (given `q, k, v`, row stride
/// `H·K`) or scratch for the projections' backward (row stride `ld(H·K)`).
struct AttnGrads<'s, T> {
    dq: &'s mut [T],
    dk: &'s mut [T],
    dv: &'s mut [T],
    ld: usize,
}

/// Attention per sample, from its kept probabilities or with them formed again from `q`, `k`
/// and the kept maxima and scales (the forward's bits): `dq, dk, dv` for `do`.
#[inline(always)]
fn attention_back<'s, T: Real>(
    cx: &Ctx<T>,
    at: At,
    sv: &SavedParts<&[T]>,
    dob: &[T],
    out: AttnGrads<'s, T>,
    pbuf: &mut Vec<T>,
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
        let (q, k, v) = sample_qkv(cx.given, sv.q, sv.kv, *dm, at.s0, i);
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
            rows::probs_uninit(isa, &shape, q, k, kept, pu, attn)
                .map_err(|e| err(e.to_string()))?;
            pbuf
        };
        let d_o = Rows {
            data: &dob[i * nq * ldhk..(i + 1) * nq * ldhk],
            ld: ldhk,
        };
        let (dqi, dki, dvi) = (
            RowsMut {
                data: &mut dq[qr],
                ld: ldg,
            },
            RowsMut {
                data: &mut dk[kr.clone()],
                ld: ldg,
            },
            RowsMut {
                data: &mut dv[kr],
                ld: ldg,
            },
        );
        rows::backward(isa, &shape, q, k, v, p, d_o, dqi, dki, dvi, attn)
            .map_err(|e| err(e.to_string()))?;
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
struct ProjScratch<'s, T> {
    xq: &'s mut Vec<T>,
    dxs: &'s mut Vec<T>,
    dxq: &'s mut Vec<T>,
}

/// `q = x_q·W_q + b_q, k = x·W_k + b_k, v = x·W_v + b_v`: `db, dW` of each and every row of
/// `dx` (with the residual's gradient `dz` at the query rows).
#[inline(always)]
fn project_back<T: Real>(
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
    mm(isa, (d, hk, rq), xq, (1, d), dq, ldhk, g.wq, ldhk, true);
    col_sums(isa, g.bk, dk, ldhk, rk);
    mm(isa, (d, hk, rk), xc, (1, d), dk, ldhk, g.wk, ldhk, true);
    col_sums(isa, g.bv, dv, ldhk, rk);
    mm(isa, (d, hk, rk), xc, (1, d), dv, ldhk, g.wv, ldhk, true);
    let dxs = grow(sc.dxs, rk * ldd);
    mm(
        isa,
        (rk, d, hk),
        dk,
        (ldhk, 1),
        &wk_t.data,
        wk_t.ld,
        dxs,
        ldd,
        false,
    );
    mm(
        isa,
        (rk, d, hk),
        dv,
        (ldhk, 1),
        &wv_t.data,
        wv_t.ld,
        dxs,
        ldd,
        true,
    );
    if cx.cfg.queries.is_none() {
        mm(
            isa,
            (rq, d, hk),
            dq,
            (ldhk, 1),
            &wq_t.data,
            wq_t.ld,
            dxs,
            ldd,
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
            dq,
            (ldhk, 1),
            &wq_t.data,
            wq_t.ld,
            dxq,
            ldd,
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

/// Given `q, k, v` or `a`: `x` reaches the output only through the residual at the query
/// rows, so `dx` is `dz` there and zero elsewhere.
fn residual_only<T: Real>(cx: &Ctx<T>, at: At, dz: &[T], dx: &mut [MaybeUninit<T>]) {
    let (d, ldd) = (cx.dm.d, ld(cx.dm.d));
    let dx = zeroed(dx);
    for r in 0..at.rq {
        let row = query_row(cx.cfg, cx.dm, at.s0, r);
        for (g, &v) in dx[row * d..(row + 1) * d].iter_mut().zip(&dz[r * ldd..]) {
            *g += v;
        }
    }
}

/// The chunk-local row of `x` that query row `r` of the chunk starting at sample `s0` reads.
fn query_row(cfg: &Config, dm: &Dims, s0: usize, r: usize) -> usize {
    match &cfg.queries {
        None => r,
        Some(pos) => r * dm.n + pos[s0 + r],
    }
}
