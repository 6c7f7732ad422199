//! Backward of the block op, one chunk of whole samples at a time, mirroring `forward`:
//! each chunk writes its rows of the input gradients and its partial parameter gradients (its
//! piece of one buffer), summed afterwards element by element in a fixed tree over the chunks.

use super::dense::{grow, ld, Packed};
use super::forward::{slices, At};
use super::rows::RowsScratch;
use super::saved::{assume_init, carve, uninit, zeroed, Cut, Saved, SavedParts};
use super::{err, tail_at, Config, Dims, Source};
use crate::KernelError;
use efa_num::pool::Buf;
use efa_num::simd::{self, Isa};
use efa_num::Real;
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;
use std::mem::MaybeUninit;

mod partial;
mod stages;
use partial::{cut, outputs, BlockGrads};
use stages::{
    attention_back, ffn_back, norm1_back, norm2_back, project_back, AttnGrads, ProjScratch,
};

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
    xq: Buf<T>,
    dz: Buf<T>,
    dh: Buf<T>,
    y1: Buf<T>,
    dob: Buf<T>,
    dq: Buf<T>,
    dk: Buf<T>,
    dv: Buf<T>,
    dxs: Buf<T>,
    dxq: Buf<T>,
    /// One sample's attention probabilities, formed again from `q` and `k`.
    p: Buf<T>,
    attn: RowsScratch<T>,
}

impl<T: Real> Scratch<T> {
    fn new() -> Self {
        Scratch {
            xq: Buf::new(),
            dz: Buf::new(),
            dh: Buf::new(),
            y1: Buf::new(),
            dob: Buf::new(),
            dq: Buf::new(),
            dk: Buf::new(),
            dv: Buf::new(),
            dxs: Buf::new(),
            dxq: Buf::new(),
            p: Buf::new(),
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

/// The chunks' partial parameter gradients summed in a fixed pairwise tree over the chunks
/// (`efa_num::sum::tree`: independent of the thread count, error growing with the log of the
/// chunk count instead of the count), the elements split over the pool.
fn sum_parts<T: Real>(parts: &[Vec<T>], sizes: BlockGrads<usize>) -> BlockGrads<Vec<T>> {
    let mut off = 0;
    let nc = parts.len();
    BlockGrads::from_array(sizes.into_array().map(|len| {
        let mut acc = vec![T::ZERO; len];
        let base = off;
        acc.par_chunks_mut(SUM_PIECE)
            .enumerate()
            .for_each(|(i, piece)| {
                let (at, w) = (base + i * SUM_PIECE, piece.len());
                if nc == 0 {
                    return;
                }
                let mut buf = efa_num::pool::take(nc * w);
                for part in parts {
                    buf.extend_from_slice(&part[at..at + w]);
                }
                efa_num::sum::tree(&mut buf, w, nc);
                piece.copy_from_slice(&buf[..w]);
                efa_num::pool::give(buf);
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
