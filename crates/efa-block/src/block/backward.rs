//! Backward of the block op, one chunk of whole samples at a time, mirroring `forward`:
//! each chunk writes its rows of the input gradients and its partial parameter gradients (its
//! piece of one buffer), summed afterwards element by element in chunk order.

use super::dense::{grow, ld, mm, Packed};
use super::forward::{query_rows, sample_qkv, slices};
use super::norm::{col_sums, ln_back_rows};
use super::rows::{self, Rows, RowsMut, RowsScratch};
use super::{
    assume_init, err, split, split_ref, tail_at, uninit, unpad, zeroed, Config, Dims, Saved, Source,
};
use crate::KernelError;
use efa_num::simd::{self, Isa};
use efa_num::Real;
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;
use std::mem::MaybeUninit;

mod partial;
use partial::{
    cut, sizes, B1, B2, BE1, BE2, BK, BO, BQ, BV, G1, G2, SUM_PIECE, W1, W2, WK, WO, WQ, WV,
};

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
    s0: usize,
    ns: usize,
    q: &'a [T],
    kv: &'a [T],
    kept: &'a [T],
    p: &'a [T],
    o: &'a [T],
    xhat1: &'a [T],
    rstd1: &'a [T],
    hid: &'a [T],
    xhat2: &'a [T],
    rstd2: &'a [T],
    dy: &'a [T],
    /// The next chunk's [`Chunk::bulk`] (empty for the last chunk), fetched ahead into the
    /// cache (see [`prefetch_saved`]).
    ahead: [&'a [T]; 9],
    /// Input gradients not yet written: the chunk that owns them writes every row of `dx`
    /// (projection mode) or zeroes its pieces first (given `q, k, v`; see `super::uninit`).
    dx: &'a mut [MaybeUninit<T>],
    dq: &'a mut [MaybeUninit<T>],
    dk: &'a mut [MaybeUninit<T>],
    dv: &'a mut [MaybeUninit<T>],
}

impl<'a, T> Chunk<'a, T> {
    /// The pieces of the buffers read in bulk: saved `p` (row-major path), `kept`, `kv, q, o,
    /// xhat1, hid, xhat2` and the cotangent `dy` (empty pieces cost nothing).
    fn bulk(&self) -> [&'a [T]; 9] {
        [
            self.p, self.kept, self.kv, self.q, self.o, self.xhat1, self.hid, self.xhat2, self.dy,
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
    let (ldd, ldhk, ldkv, ldf) = (ld(d), ld(hk), ld(2 * hk), ld(f));
    // Written or zeroed piece by piece by the chunks that own them (`Chunk::dx`).
    let mut dx = uninit::<T>(b * n * d);
    // With the attention given, its gradient `da` `[B, Nq, H·K]` goes in `dq`.
    let (mut dq, mut dk, mut dv) = match cfg.src {
        Source::Given => (uninit(b * nq * hk), uninit(b * n * hk), uninit(b * n * hk)),
        Source::Attended => (uninit(b * nq * hk), Vec::new(), Vec::new()),
        Source::Project => (Vec::new(), Vec::new(), Vec::new()),
    };
    let per = Config::per_chunk(dm);
    // The lengths of the parameter gradients: each chunk returns its partial ones as one
    // vector of these pieces in order.
    let sizes = sizes(dm, project);
    let mut chunks: Vec<Chunk<T>> = {
        let r = |buf, each| split_ref(buf, each, per, b).into_iter();
        let mut kept = r(&s.kept, cfg.kept_len(dm));
        let mut p = r(&s.p, cfg.saved_p_len(dm));
        let (mut q, mut kv, mut o) = (r(&s.q, nq * ldhk), r(&s.kv, n * ldkv), r(o_all, nq * ldo));
        let (mut xhat1, mut rstd1, mut hid, mut xhat2, mut rstd2, mut dys) = (
            r(&s.xhat1, nq * ldd),
            r(&s.rstd1, nq),
            r(&s.hid, nq * ldf),
            r(&s.xhat2, nq * ldd),
            r(&s.rstd2, nq),
            r(dy, nq * d),
        );
        let mut dxs = split(&mut dx, n * d, per, b).into_iter();
        let mut dqs = split(&mut dq, nq * hk, per, b).into_iter();
        let mut dks = split(&mut dk, n * hk, per, b).into_iter();
        let mut dvs = split(&mut dv, n * hk, per, b).into_iter();
        (0..b)
            .step_by(per)
            .map(|s0| Chunk {
                s0,
                ns: per.min(b - s0),
                q: q.next().expect("chunk"),
                kv: kv.next().expect("chunk"),
                kept: kept.next().expect("chunk"),
                p: p.next().expect("chunk"),
                o: o.next().expect("chunk"),
                xhat1: xhat1.next().expect("chunk"),
                rstd1: rstd1.next().expect("chunk"),
                hid: hid.next().expect("chunk"),
                xhat2: xhat2.next().expect("chunk"),
                rstd2: rstd2.next().expect("chunk"),
                dy: dys.next().expect("chunk"),
                ahead: [&[]; 9],
                dx: dxs.next().expect("chunk"),
                dq: dqs.next().expect("chunk"),
                dk: dks.next().expect("chunk"),
                dv: dvs.next().expect("chunk"),
            })
            .collect()
    };
    for j in 1..chunks.len() {
        chunks[j - 1].ahead = chunks[j].bulk();
    }
    let parts: Vec<Vec<T>> = chunks
        .into_par_iter()
        .map_init(Scratch::new, |sc, c| chunk(&cx, c, sc))
        .collect::<Result<_, KernelError>>()?;
    // SAFETY: the chunks cover every buffer (`split` cuts each into one piece per chunk) and
    // every chunk that returned Ok zeroed or wrote each of its pieces in full (`chunk_body`);
    // on an error we returned above.
    let (dx, dq, dk, dv) = unsafe {
        (
            assume_init(dx),
            assume_init(dq),
            assume_init(dk),
            assume_init(dv),
        )
    };
    // Partial parameter gradients summed in chunk order (independent of the thread count):
    // every element adds its chunks' values in chunk order, the elements split over the pool.
    let mut pg = sizes.map(|n| vec![T::ZERO; n]);
    let mut off = 0;
    for acc in pg.iter_mut() {
        let len = acc.len();
        acc.par_chunks_mut(SUM_PIECE)
            .enumerate()
            .for_each(|(i, piece)| {
                let at = off + i * SUM_PIECE;
                for part in &parts {
                    for (a, &v) in piece.iter_mut().zip(&part[at..]) {
                        *a += v;
                    }
                }
            });
        off += len;
    }
    let vec1 = |x: &Vec<T>| ArrayD::from_shape_vec(IxDyn(&[x.len()]), x.clone()).expect("sizes");
    let mut out = vec![Some(
        ArrayD::from_shape_vec(IxDyn(&[b, n, d]), dx).expect("block: sizes"),
    )];
    if attended {
        out.push(Some(
            ArrayD::from_shape_vec(IxDyn(&[b, nq, hk]), dq).expect("sizes"),
        ));
    } else if cfg.given() {
        out.push(Some(
            ArrayD::from_shape_vec(IxDyn(&[b, nq, hk]), dq).expect("sizes"),
        ));
        out.push(Some(
            ArrayD::from_shape_vec(IxDyn(&[b, n, hk]), dk).expect("sizes"),
        ));
        out.push(Some(
            ArrayD::from_shape_vec(IxDyn(&[b, n, hk]), dv).expect("sizes"),
        ));
    } else {
        for (w, bias) in [(WQ, BQ), (WK, BK), (WV, BV)] {
            out.push(Some(unpad(&pg[w], ldhk, d, hk, 0, &[d, hk])));
            out.push(Some(vec1(&pg[bias])));
        }
    }
    out.push(Some(unpad(&pg[WO], ldd, hk, d, 0, &[hk, d])));
    out.push(Some(vec1(&pg[BO])));
    out.push(Some(vec1(&pg[G1])));
    out.push(Some(vec1(&pg[BE1])));
    out.push(Some(unpad(&pg[W1], ldf, d, f, 0, &[d, f])));
    out.push(Some(vec1(&pg[B1])));
    out.push(Some(unpad(&pg[W2], ldd, f, d, 0, &[f, d])));
    out.push(Some(vec1(&pg[B2])));
    out.push(Some(vec1(&pg[G2])));
    out.push(Some(vec1(&pg[BE2])));
    Ok(out)
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

#[inline(always)]
fn chunk_body<T: Real>(
    cx: &Ctx<T>,
    c: Chunk<T>,
    sc: &mut Scratch<T>,
) -> Result<Vec<T>, KernelError> {
    let (dm, isa) = (cx.dm, cx.isa);
    let (n, nq, d, hk, f) = (dm.n, dm.nq, dm.d, dm.hk, dm.f);
    let (ldd, ldhk, ldf) = (ld(d), ld(hk), ld(f));
    let (s0, ns) = (c.s0, c.ns);
    let (rk, rq) = (ns * n, ns * nq);
    let [g1, be1, g2] = cx.vecs;
    prefetch_saved(dm, &c);
    // dq, dk, dv (given q, k, v only; empty otherwise) are written in full by the attention
    // backward, which takes them initialised. With the attention output given, dq holds its
    // gradient, written row by row below.
    let (dq_in, dk_in, dv_in) = if cx.attended {
        (<&mut [T]>::default(), zeroed(c.dk), zeroed(c.dv))
    } else {
        (zeroed(c.dq), zeroed(c.dk), zeroed(c.dv))
    };
    // This chunk's partial parameter gradients: one allocation of the 16 pieces (a small one,
    // reused from the heap; one buffer for every chunk would be a fresh mapping per call).
    let sz = sizes(dm, cx.proj_t.is_some());
    let mut part = vec![T::ZERO; sz.iter().sum()];
    let mut pg = cut(&mut part, &sz);
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
    // forward computed y = LN₂(u) with u = z + h·W₂ + b₂, so du = LN₂ᵀ(dy).
    let dz = grow(dz, rq * ldd);
    if ldd > d {
        for row in dz.chunks_exact_mut(ldd) {
            row[d..].fill(T::ZERO);
        }
    }
    let [.., g2p, be2p] = &mut pg;
    let dy = Some((c.dy, d));
    ln_back_rows(
        isa,
        rq,
        dy,
        (dz, ldd),
        (c.xhat2, ldd),
        c.rstd2,
        g2,
        g2p,
        be2p,
    );
    // u = z + h·W₂ + b₂: db₂ = Σ du, dW₂ = hᵀ·du, dh = du·W₂ᵀ (through the ReLU).
    col_sums(isa, pg[B2], dz, ldd, rq);
    mm(isa, (f, d, rq), c.hid, (1, ldf), dz, ldd, pg[W2], ldd, true);
    let dh = grow(dh, rq * ldf);
    mm(
        isa,
        (rq, f, d),
        dz,
        (ldd, 1),
        &cx.w2_t.data,
        cx.w2_t.ld,
        dh,
        ldf,
        false,
    );
    for r in 0..rq {
        let hid = &c.hid[r * ldf..r * ldf + f];
        for (g, &h) in dh[r * ldf..r * ldf + f].iter_mut().zip(hid) {
            // forward computed h = relu(·): the derivative is 1 above 0, NaN at NaN, else 0.
            if h.is_nan() {
                *g = h;
            } else if h <= T::ZERO {
                *g = T::ZERO;
            }
        }
    }
    // h = relu(z·W₁ + b₁): db₁ = Σ dh, dW₁ = zᵀ·dh, dz = du + dh·W₁ᵀ (z recomputed from x̂₁).
    col_sums(isa, pg[B1], dh, ldf, rq);
    let y1 = grow(y1, rq * ldd);
    for (row, xh) in y1.chunks_exact_mut(ldd).zip(c.xhat1.chunks_exact(ldd)) {
        let (out, pad) = row.split_at_mut(d);
        for ((o, &x), (&g, &b)) in out.iter_mut().zip(&xh[..d]).zip(g1.iter().zip(be1)) {
            *o = x * g + b;
        }
        pad.fill(T::ZERO);
    }
    mm(isa, (d, f, rq), y1, (1, ldd), dh, ldf, pg[W1], ldf, true);
    mm(
        isa,
        (rq, d, f),
        dh,
        (ldf, 1),
        &cx.w1_t.data,
        cx.w1_t.ld,
        dz,
        ldd,
        true,
    );
    // z = LN₁(x_q + a): dr = LN₁ᵀ(dz), the gradient of both the residual and a.
    let (head, tail) = pg.split_at_mut(BE1);
    ln_back_rows(
        isa,
        rq,
        None,
        (dz, ldd),
        (c.xhat1, ldd),
        c.rstd1,
        g1,
        head[G1],
        tail[0],
    );
    // a = o·W_o + b_o: db_o = Σ dr, dW_o = oᵀ·dr, do = dr·W_oᵀ.
    col_sums(isa, pg[BO], dz, ldd, rq);
    mm(
        isa,
        (hk, d, rq),
        c.o,
        (1, cx.ldo),
        dz,
        ldd,
        pg[WO],
        ldd,
        true,
    );
    let dob = grow(dob, rq * ldhk);
    mm(
        isa,
        (rq, hk, d),
        dz,
        (ldd, 1),
        &cx.wo_t.data,
        cx.wo_t.ld,
        dob,
        ldhk,
        false,
    );
    if cx.attended {
        // The attention's gradient is the op's: every row of `da` written.
        let rows = c.dq.chunks_exact_mut(hk.max(1)).zip(dob.chunks_exact(ldhk));
        for (out, g) in rows {
            for (o, &g) in out.iter_mut().zip(g) {
                o.write(g);
            }
        }
        return residual_only(cx, dm, s0, rq, dz, c.dx, part);
    }
    // Attention per sample, from its kept probabilities or with them formed again from q, k
    // and the kept maxima and scales (the forward's bits).
    let (plen, nsp, nkept) = (
        cx.cfg.p_len(dm),
        cx.cfg.saved_p_len(dm),
        cx.cfg.kept_len(dm),
    );
    let pbuf = grow(pbuf, if nsp > 0 { 0 } else { plen });
    let (dqb, dkb, dvb, ldg) = match cx.given {
        Some(_) => (dq_in, dk_in, dv_in, hk),
        None => (
            grow(dq, rq * ldhk),
            grow(dk, rk * ldhk),
            grow(dv, rk * ldhk),
            ldhk,
        ),
    };
    for i in 0..ns {
        let shape = cx.cfg.shape(dm, s0 + i);
        let (q, k, v) = sample_qkv(cx.given, c.q, c.kv, *dm, s0, i);
        let (qr, kr) = (
            i * nq * ldg..(i + 1) * nq * ldg,
            i * n * ldg..(i + 1) * n * ldg,
        );
        let p: &[T] = if nsp > 0 {
            &c.p[i * nsp..(i + 1) * nsp]
        } else {
            // SAFETY: `MaybeUninit<T>` has the layout of `T`; the kernel only writes
            // initialised values through the view.
            let pu = unsafe { &mut *(&mut *pbuf as *mut [T] as *mut [MaybeUninit<T>]) };
            let kept = Some(&c.kept[i * nkept..(i + 1) * nkept]);
            rows::probs_uninit(isa, &shape, q, k, kept, pu, attn)
                .map_err(|e| err(e.to_string()))?;
            pbuf
        };
        rows::backward(
            isa,
            &shape,
            q,
            k,
            v,
            p,
            Rows {
                data: &dob[i * nq * ldhk..(i + 1) * nq * ldhk],
                ld: ldhk,
            },
            RowsMut {
                data: &mut dqb[qr],
                ld: ldg,
            },
            RowsMut {
                data: &mut dkb[kr.clone()],
                ld: ldg,
            },
            RowsMut {
                data: &mut dvb[kr],
                ld: ldg,
            },
            attn,
        )
        .map_err(|e| err(e.to_string()))?;
    }
    let xc = &cx.x[s0 * n * d..(s0 + ns) * n * d];
    let Some([wq_t, wk_t, wv_t]) = &cx.proj_t else {
        return residual_only(cx, dm, s0, rq, dz, c.dx, part);
    };
    // forward computed q = x_q·W_q + b_q, k = x·W_k + b_k, v = x·W_v + b_v.
    let xq = query_rows(cx.cfg, dm, s0, ns, xc, xq);
    col_sums(isa, pg[BQ], dqb, ldhk, rq);
    mm(isa, (d, hk, rq), xq, (1, d), dqb, ldhk, pg[WQ], ldhk, true);
    col_sums(isa, pg[BK], dkb, ldhk, rk);
    mm(isa, (d, hk, rk), xc, (1, d), dkb, ldhk, pg[WK], ldhk, true);
    col_sums(isa, pg[BV], dvb, ldhk, rk);
    mm(isa, (d, hk, rk), xc, (1, d), dvb, ldhk, pg[WV], ldhk, true);
    let dxs = grow(dxs, rk * ldd);
    mm(
        isa,
        (rk, d, hk),
        dkb,
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
        dvb,
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
            dqb,
            (ldhk, 1),
            &wq_t.data,
            wq_t.ld,
            dxs,
            ldd,
            true,
        );
        // Every row of dx written (rk = rq rows of d).
        for (out, (g, r)) in
            c.dx.chunks_exact_mut(d.max(1))
                .zip(dxs.chunks_exact(ldd).zip(dz.chunks_exact(ldd)))
        {
            for k in 0..d {
                out[k].write(g[k] + r[k]);
            }
        }
    } else {
        // One query row per sample: its q-gradient and residual go to that row only.
        for (out, g) in c.dx.chunks_exact_mut(d.max(1)).zip(dxs.chunks_exact(ldd)) {
            for k in 0..d {
                out[k].write(g[k]);
            }
        }
        // SAFETY: the loop wrote every row of dx (rk rows of d: `dxs` has rk rows);
        // `MaybeUninit<T>` has the layout of `T`.
        let dx = unsafe { &mut *(c.dx as *mut [MaybeUninit<T>] as *mut [T]) };
        let dxq = grow(dxq, rq * ldd);
        mm(
            isa,
            (rq, d, hk),
            dqb,
            (ldhk, 1),
            &wq_t.data,
            wq_t.ld,
            dxq,
            ldd,
            false,
        );
        for r in 0..rq {
            let at = query_row(cx.cfg, dm, s0, r);
            for k in 0..d {
                dx[at * d + k] += dxq[r * ldd + k] + dz[r * ldd + k];
            }
        }
    }
    Ok(part)
}

/// Given `q, k, v` or `a`: `x` reaches the output only through the residual at the query
/// rows, so `dx` is `dz` there and zero elsewhere. Returns the chunk's partial gradients.
fn residual_only<T: Real>(
    cx: &Ctx<T>,
    dm: &Dims,
    s0: usize,
    rq: usize,
    dz: &[T],
    dx: &mut [MaybeUninit<T>],
    part: Vec<T>,
) -> Result<Vec<T>, KernelError> {
    let (d, ldd) = (dm.d, ld(dm.d));
    let dx = zeroed(dx);
    for r in 0..rq {
        let at = query_row(cx.cfg, dm, s0, r);
        for (g, &v) in dx[at * d..(at + 1) * d].iter_mut().zip(&dz[r * ldd..]) {
            *g += v;
        }
    }
    Ok(part)
}

/// The chunk-local row of `x` that query row `r` of the chunk starting at sample `s0` reads.
fn query_row(cfg: &Config, dm: &Dims, s0: usize, r: usize) -> usize {
    match &cfg.queries {
        None => r,
        Some(pos) => r * dm.n + pos[s0 + r],
    }
}
