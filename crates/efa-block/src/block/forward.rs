//! Forward of the block op, one chunk of whole samples at a time (see the module docs for the
//! formulas and `Saved` for what is kept).

use super::dense::{add_bias_rows, grow, ld, mm, mm_bias_into, padded_bias, Packed};
use super::norm::{ln_rows_into, LnParams};
use super::rows::{self, Qkv, Rows, RowsMut, RowsScratch};
use super::saved::{assume_init, carve, uninit, zeroed, Cut, Saved, SavedParts};
use super::{err, tail_at, Config, Dims, Source};
use crate::KernelError;
use efa_attn::micro::gemm_checked_from;
use efa_num::pool::Buf;
use efa_num::simd::{self, Isa};
use efa_num::{MatRef, Real};
use ndarray::{ArrayD, CowArray, IxDyn};
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Inputs as contiguous slices (copies only for inputs not in standard layout).
pub(super) fn slices<'a, T: Real>(inputs: &[&'a ArrayD<T>]) -> Vec<CowArray<'a, T, IxDyn>> {
    inputs.iter().map(|x| x.as_standard_layout()).collect()
}

/// Everything a forward chunk reads: shapes, settings, inputs and the packed weights.
struct Ctx<'a, T> {
    cfg: &'a Config,
    dm: &'a Dims,
    isa: Isa,
    x: &'a [T],
    /// Given `q, k, v`, or the packed projections `W_q` and `[W_k | W_v]` with their biases.
    given: Option<[&'a [T]; 3]>,
    /// The attention output `a` `[B·Nq, H·K]` computed elsewhere ([`super::BlockSource::Attended`]).
    attended: Option<&'a [T]>,
    wq: Option<Packed<T>>,
    /// `b_q` and `[b_k | b_v]` with zero padding (the bias rows of `mm_bias_into`).
    bq: Vec<T>,
    wkv: Option<Packed<T>>,
    bkv: Vec<T>,
    wo: Packed<T>,
    w1: Packed<T>,
    w2: Packed<T>,
    /// `b₁`, `b_o`, `b₂` with zero padding.
    b1: Vec<T>,
    bo: Vec<T>,
    b2: Vec<T>,
    /// `ln1 gain, ln1 bias, ln2 gain, ln2 bias`.
    vecs: [&'a [T]; 4],
    eps: T,
}

/// One chunk's rows of the output and of the saved buffers, not yet written: the chunk writes
/// every element of each (`mm_bias_into`, `rows::forward_uninit`, `ln_rows_into`) before
/// reading it, except `o` and `kept`, which it zeroes first (on the thread that computes them,
/// in cache).
struct Chunk<'a, T> {
    at: At,
    saved: SavedParts<&'a mut [MaybeUninit<T>]>,
    y: &'a mut [MaybeUninit<T>],
}

/// Where a chunk sits: its first sample, its samples, its key rows and its query rows.
#[derive(Clone, Copy)]
pub(super) struct At {
    pub s0: usize,
    pub ns: usize,
    pub rk: usize,
    pub rq: usize,
}

impl At {
    /// The chunk of `per` samples starting at sample `s0` of `b`.
    pub fn new(dm: &Dims, s0: usize, per: usize) -> Self {
        let ns = per.min(dm.b - s0);
        At {
            s0,
            ns,
            rk: ns * dm.n,
            rq: ns * dm.nq,
        }
    }
}

/// Per-thread scratch: gathered query rows, the pre-norm rows, the first norm's output, one
/// sample's attention probabilities and the attention kernel's buffers.
struct Scratch<T> {
    xq: Buf<T>,
    pre: Buf<T>,
    y1: Buf<T>,
    p: Buf<T>,
    attn: RowsScratch<T>,
}

impl<T: Real> Scratch<T> {
    fn new() -> Self {
        Scratch {
            xq: Buf::new(),
            pre: Buf::new(),
            y1: Buf::new(),
            p: Buf::new(),
            attn: RowsScratch::new(),
        }
    }
}

/// Runs the forward: the output `[B, Nq, d]` and what the backward needs.
pub(super) fn run<T: Real>(
    cfg: &Config,
    dm: &Dims,
    inputs: &[&ArrayD<T>],
) -> Result<(ArrayD<T>, Saved<T>), KernelError> {
    let vals = slices(inputs);
    let v = |i: usize| vals[i].as_slice().expect("standard layout");
    let (b, nq, d, hk, f) = (dm.b, dm.nq, dm.d, dm.hk, dm.f);
    let t = tail_at(cfg.src);
    let project = cfg.project();
    let cx = Ctx {
        cfg,
        dm,
        isa: simd::active(),
        x: v(0),
        given: cfg.given().then(|| [v(1), v(2), v(3)]),
        attended: (cfg.src == Source::Attended).then(|| v(1)),
        wq: project.then(|| Packed::new(v(1), d, hk)),
        bq: if project {
            padded_bias(v(2))
        } else {
            Vec::new()
        },
        wkv: project.then(|| Packed::side_by_side(v(3), v(5), d, hk)),
        bkv: if project {
            padded_bias(&[v(4), v(6)].concat())
        } else {
            Vec::new()
        },
        wo: Packed::new(v(t), hk, d),
        w1: Packed::new(v(t + 4), d, f),
        w2: Packed::new(v(t + 6), f, d),
        b1: padded_bias(v(t + 5)),
        bo: padded_bias(v(t + 1)),
        b2: padded_bias(v(t + 7)),
        vecs: [v(t + 2), v(t + 3), v(t + 8), v(t + 9)],
        eps: T::from_f64(cfg.eps),
    };
    // Every buffer is written in full, or zeroed, by the chunk that owns its piece (see
    // `uninit` and `Chunk`).
    let lens = SavedParts::per_sample(cfg, dm);
    let mut bufs = lens.map(|each| uninit::<T>(b * each));
    let mut y = uninit::<T>(b * nq * d);
    let per = Config::per_chunk(dm);
    let views = bufs.each_mut().map(|v| &mut v[..]);
    let chunks: Vec<Chunk<T>> = carve(views, lens, per, b)
        .into_iter()
        .zip(y.as_mut_slice().cut(nq * d, per, b))
        .zip((0..b).step_by(per))
        .map(|((saved, y), s0)| Chunk {
            at: At::new(dm, s0, per),
            saved,
            y,
        })
        .collect();
    chunks
        .into_par_iter()
        .map_init(Scratch::new, |sc, c| chunk(&cx, c, sc))
        .collect::<Result<Vec<()>, KernelError>>()?;
    // SAFETY: the chunks cover every buffer (`carve` and `cut` give each one piece per chunk)
    // and every chunk that returned Ok zeroed its `o` and `kept` and wrote its `q`, `kv`, `p`
    // (`rows::forward_uninit` on each sample's whole `saved_p_len` slice), `hid`
    // (`mm_bias_into`, whole pieces), `x̂₁`, `r₁`, `x̂₂`, `r₂`, `y` (`ln_rows_into`, whole
    // pieces) in full; on an error we returned above.
    let (s, y): (Saved<T>, _) =
        unsafe { (bufs.map(|v| Buf::from_vec(assume_init(v))), assume_init(y)) };
    let y = ArrayD::from_shape_vec(IxDyn(&[b, nq, d]), y).expect("block: sizes");
    Ok((y, s))
}

/// The query rows of `x` for the chunk's samples: `x` itself, or the gathered query row of
/// each sample (row stride `d`).
pub(super) fn query_rows<'a, T: Real>(
    cfg: &Config,
    dm: &Dims,
    s0: usize,
    ns: usize,
    xc: &'a [T],
    buf: &'a mut Buf<T>,
) -> &'a [T] {
    match &cfg.queries {
        None => xc,
        Some(pos) => {
            let (n, d) = (dm.n, dm.d);
            let rows = grow(buf, ns * d);
            for i in 0..ns {
                let at = (i * n + pos[s0 + i]) * d;
                rows[i * d..(i + 1) * d].copy_from_slice(&xc[at..at + d]);
            }
            rows
        }
    }
}

// One chunk, compiled for the active instruction set.
efa_num::isa_compiled!(chunk => chunk_body, cx.isa, (cx: &Ctx<T>, c: Chunk<T>, sc: &mut Scratch<T>) -> Result<(), KernelError>);

/// The forward of one chunk, stage by stage: projections, attention, output projection and
/// first norm, feed-forward layer and second norm.
#[inline(always)]
fn chunk_body<T: Real>(cx: &Ctx<T>, c: Chunk<T>, sc: &mut Scratch<T>) -> Result<(), KernelError> {
    let (dm, at) = (cx.dm, c.at);
    let (n, d) = (dm.n, dm.d);
    let Scratch {
        xq,
        pre,
        y1,
        p: pbuf,
        attn,
    } = sc;
    let SavedParts {
        q,
        kv,
        kept,
        p,
        o,
        xhat1,
        rstd1,
        xhat2,
        rstd2,
        hid,
    } = c.saved;
    let xc = &cx.x[at.s0 * n * d..(at.s0 + at.ns) * n * d];
    let xq = query_rows(cx.cfg, dm, at.s0, at.ns, xc, xq);
    let qkv = project(cx, at, (xc, xq), q, kv);
    let kept = zeroed(kept);
    let (o, ldo) = match cx.attended {
        Some(a) => (
            &a[at.s0 * dm.nq * dm.hk..(at.s0 + at.ns) * dm.nq * dm.hk],
            dm.hk,
        ),
        None => (
            attention(cx, at, qkv, AttnSaved { o, kept, p }, pbuf, attn)?,
            ld(dm.hk),
        ),
    };
    let pre = grow(pre, at.rq * ld(d));
    let y1 = norm1(cx, at, (o, ldo), xq, pre, y1, (xhat1, rstd1));
    ffn_norm2(cx, at, y1, pre, hid, (xhat2, rstd2), c.y);
    Ok(())
}

/// `q = x_q·W_q + b_q` and `[k | v] = x·[W_k | W_v] + [b_k | b_v]` into the chunk's saved
/// pieces (projection mode; with `q, k, v` given the pieces are empty and so is the result).
#[inline(always)]
fn project<'c, T: Real>(
    cx: &Ctx<T>,
    at: At,
    (xc, xq): (&[T], &[T]),
    q: &'c mut [MaybeUninit<T>],
    kv: &'c mut [MaybeUninit<T>],
) -> (&'c [T], &'c [T]) {
    let (isa, d, hk) = (cx.isa, cx.dm.d, cx.dm.hk);
    if let (Some(wq), Some(wkv)) = (&cx.wq, &cx.wkv) {
        let kv = mm_bias_into(
            isa,
            (at.rk, 2 * hk, d),
            (xc, (d, 1)),
            wkv,
            &cx.bkv,
            (kv, ld(2 * hk)),
        );
        let q = mm_bias_into(isa, (at.rq, hk, d), (xq, (d, 1)), wq, &cx.bq, (q, ld(hk)));
        (q, kv)
    } else {
        debug_assert!(q.is_empty() && kv.is_empty());
        (&[], &[])
    }
}

/// A chunk's saved attention pieces: the output (zeroed by the caller's [`zeroed`] below),
/// the softmax's kept statistics (zeroed) and the kept probabilities (not yet written).
struct AttnSaved<'c, T> {
    o: &'c mut [MaybeUninit<T>],
    kept: &'c mut [T],
    p: &'c mut [MaybeUninit<T>],
}

/// The attention per sample into the chunk's `o` (row stride `ld(H·K)`), its probabilities
/// kept (a few query rows) or in scratch (the backward forms them again).
#[inline(always)]
fn attention<'c, T: Real>(
    cx: &Ctx<T>,
    at: At,
    (cq, ckv): (&[T], &[T]),
    out: AttnSaved<'c, T>,
    pbuf: &mut Buf<T>,
    attn: &mut RowsScratch<T>,
) -> Result<&'c [T], KernelError> {
    let (dm, isa) = (cx.dm, cx.isa);
    let (nq, ldhk) = (dm.nq, ld(dm.hk));
    let (nkept, nsp) = (cx.cfg.kept_len(dm), cx.cfg.saved_p_len(dm));
    let AttnSaved {
        o,
        kept,
        p: saved_p,
    } = out;
    let o = zeroed(o);
    let p = grow(pbuf, if nsp > 0 { 0 } else { cx.cfg.p_len(dm) });
    // SAFETY: `MaybeUninit<T>` has the layout of `T`; the kernel only writes initialised
    // values through the view.
    let p = unsafe { &mut *(p as *mut [T] as *mut [MaybeUninit<T>]) };
    for i in 0..at.ns {
        let shape = cx.cfg.shape(dm, at.s0 + i);
        let x = sample_qkv(cx.given, cq, ckv, *dm, at.s0, i);
        let o = RowsMut {
            data: &mut o[i * nq * ldhk..(i + 1) * nq * ldhk],
            ld: ldhk,
        };
        let kept = &mut kept[i * nkept..(i + 1) * nkept];
        if nsp > 0 {
            let p = &mut saved_p[i * nsp..(i + 1) * nsp];
            rows::forward_uninit(isa, &shape, x, p, o, attn)
        } else {
            rows::forward_uninit_kept(isa, &shape, x, &mut *p, kept, o, attn)
        }
        .map_err(|e| err(e.to_string()))?;
    }
    Ok(o)
}

/// `z = LN₁(x_q + o·W_o + b_o)`: the pre-norm rows in `pre`, `z` returned (in `y1`, row
/// stride `ld(d)`), `x̂₁` and `r₁` saved.
#[inline(always)]
fn norm1<'s, T: Real>(
    cx: &Ctx<T>,
    at: At,
    (o, ldo): (&[T], usize),
    xq: &[T],
    pre: &mut [T],
    y1: &'s mut Buf<T>,
    (xhat1, rstd1): (&mut [MaybeUninit<T>], &mut [MaybeUninit<T>]),
) -> &'s [T] {
    let (isa, d, hk) = (cx.isa, cx.dm.d, cx.dm.hk);
    let [g1, be1, ..] = cx.vecs;
    let ldd = ld(d);
    residual_mm(
        isa,
        (at.rq, d, hk),
        (o, ldo),
        &cx.wo,
        (xq, d),
        &cx.bo,
        (pre, ldd),
    );
    let y1 = grow(y1, at.rq * ldd);
    // SAFETY: `MaybeUninit<T>` has the layout of `T`; `ln_rows_into` only writes initialised
    // values through the view.
    let y1_out = unsafe { &mut *(&mut *y1 as *mut [T] as *mut [MaybeUninit<T>]) };
    let ln1 = LnParams {
        g: g1,
        b: be1,
        eps: cx.eps,
    };
    let x = MatRef::row_major(pre, at.rq, d, ldd);
    ln_rows_into(isa, x, ln1, (xhat1, ldd), (y1_out, ldd), rstd1);
    y1
}

/// `h = relu(z·W₁ + b₁)` (saved) and `y = LN₂(z + h·W₂ + b₂)` into the chunk's output rows,
/// `x̂₂` and `r₂` saved.
#[inline(always)]
fn ffn_norm2<T: Real>(
    cx: &Ctx<T>,
    at: At,
    y1: &[T],
    pre: &mut [T],
    hid: &mut [MaybeUninit<T>],
    (xhat2, rstd2): (&mut [MaybeUninit<T>], &mut [MaybeUninit<T>]),
    y: &mut [MaybeUninit<T>],
) {
    let (isa, d, f) = (cx.isa, cx.dm.d, cx.dm.f);
    let [.., g2, be2] = cx.vecs;
    let (ldd, ldf) = (ld(d), ld(f));
    let hid = mm_bias_into(
        isa,
        (at.rq, f, d),
        (y1, (ldd, 1)),
        &cx.w1,
        &cx.b1,
        (hid, ldf),
    );
    for r in 0..at.rq {
        for h in &mut hid[r * ldf..r * ldf + f] {
            // A NaN stays NaN (as the tape's relu).
            if *h < T::ZERO {
                *h = T::ZERO;
            }
        }
    }
    residual_mm(
        isa,
        (at.rq, d, f),
        (hid, ldf),
        &cx.w2,
        (y1, ldd),
        &cx.b2,
        (pre, ldd),
    );
    let ln2 = LnParams {
        g: g2,
        b: be2,
        eps: cx.eps,
    };
    let x = MatRef::row_major(pre, at.rq, d, ldd);
    ln_rows_into(isa, x, ln2, (xhat2, ldd), (y, d), rstd2);
}

/// Sample `s0 + i`'s queries, keys and values as rows: slices of the given `[q, k, v]`
/// (width `H·K`), or of chunk `i`'s projections `q` (stride `ld(H·K)`) and `[k | v]` (stride
/// `ld(2·H·K)`, values from column `H·K` on).
pub(super) fn sample_qkv<'a, T: Real>(
    given: Option<[&'a [T]; 3]>,
    q: &'a [T],
    kv: &'a [T],
    dm: Dims,
    s0: usize,
    i: usize,
) -> Qkv<'a, T> {
    let (n, nq, hk) = (dm.n, dm.nq, dm.hk);
    match given {
        Some([q, k, v]) => {
            let s = s0 + i;
            let rows = |x: &'a [T], r: usize| Rows {
                data: &x[s * r * hk..(s + 1) * r * hk],
                ld: hk,
            };
            Qkv {
                q: rows(q, nq),
                k: rows(k, n),
                v: rows(v, n),
            }
        }
        None => {
            let (ldhk, ldkv) = (ld(hk), ld(2 * hk));
            let kv = &kv[i * n * ldkv..(i + 1) * n * ldkv];
            Qkv {
                q: Rows {
                    data: &q[i * nq * ldhk..(i + 1) * nq * ldhk],
                    ld: ldhk,
                },
                k: Rows { data: kv, ld: ldkv },
                v: Rows {
                    data: kv.get(hk..).unwrap_or_default(),
                    ld: ldkv,
                },
            }
        }
    }
}

/// `C ← (A·W + b) + S` (`S` the residual rows, `b` the bias; the order of a linear layer and
/// its residual added after it): in one product when `S` has padded rows
/// ([`gemm_checked_from`]; their padding columns must be zero, as the callers' `x_q` without
/// padding and `y₁` with zero padding are), else by the product and a pass adding `b` and `S`;
/// the same bits either way. `b` comes padded ([`padded_bias`]).
fn residual_mm<T: Real>(
    isa: Isa,
    (m, n, k): (usize, usize, usize),
    (a, lda): (&[T], usize),
    w: &Packed<T>,
    (s, lds): (&[T], usize),
    b_pad: &[T],
    (c, ldc): (&mut [T], usize),
) {
    if lds == ld(n) {
        gemm_checked_from(
            isa,
            (m, n, k),
            (a, (lda, 1)),
            (&w.data, w.ld),
            ((s, lds), b_pad),
            (c, ldc),
        );
        // The padding columns of C hold (A·0 + 0) + 0, as `mm` then `add_bias_rows` leaves them.
    } else {
        mm(
            isa,
            (m, n, k),
            (a, (lda, 1)),
            (&w.data, w.ld),
            (c, ldc),
            false,
        );
        add_bias_rows(c, ldc, m, &b_pad[..n], (s, lds));
    }
}
