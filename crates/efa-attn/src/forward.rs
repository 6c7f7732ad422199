//! Forward pass: online softmax over key tiles per (batch, head, query tile).

use crate::micro::{gemm, online_softmax, padded};
use crate::problem::{a_operand, b_operand, pack_cols, pads, run_tasks, split_lens, tiles, zeros, Problem};
use crate::{AttnError, Mask, Par, BLOCK_K, BLOCK_Q};
use efa_num::simd::{self, Isa};
use efa_num::Real;
use ndarray::{Array3, Array4, ArrayView4};

/// Per-job scratch: packed `Kᵀ` and (when needed) `V` tiles, score tile, accumulator and
/// the running max / sum per row.
struct Scratch<T> {
    kt: Vec<T>,
    vp: Vec<T>,
    s: Vec<T>,
    acc: Vec<T>,
    m: Vec<T>,
    l: Vec<T>,
    cnt: Vec<usize>,
}

impl<T: Real> Scratch<T> {
    fn new(p: &Problem<T>) -> Self {
        let (_, dvpad) = pads(p);
        let bq = BLOCK_Q.min(p.nq).max(1);
        let bk = BLOCK_K.min(p.nk).max(1);
        let bkp = padded(bk);
        Scratch {
            kt: zeros(p.d * bkp),
            vp: zeros(bk * dvpad),
            s: zeros(bq * bkp),
            acc: zeros(bq * dvpad),
            m: zeros(bq),
            l: zeros(bq),
            cnt: vec![0; bq],
        }
    }
}

/// Attention forward: returns `o` `[B, H, Nq, Dv]` and `lse` `[B, H, Nq]` with
/// `lseᵢ = ln Σ_{j visible} exp(scale·⟨qᵢ, kⱼ⟩)` and `oᵢ = Σⱼ exp(scale·⟨qᵢ, kⱼ⟩ − lseᵢ)·vⱼ`
/// (`oᵢ = 0`, `lseᵢ = −∞` for rows with no visible key).
///
/// `q` is `[B, H, Nq, D]`, `k` is `[B, H, Nk, D]`, `v` is `[B, H, Nk, Dv]`; views may have any
/// strides. Uses the SIMD variant chosen by `efa_num::simd::active()`.
///
/// # Errors
/// Shape mismatches (naming the tensor and its shape), a mask that does not fit, or a
/// non-finite `scale`.
pub fn forward<'a, 'm, T: Real>(
    q: ArrayView4<'a, T>,
    k: ArrayView4<'a, T>,
    v: ArrayView4<'a, T>,
    mask: &Mask<'m>,
    scale: T,
    par: Par,
) -> Result<(Array4<T>, Array3<T>), AttnError> {
    forward_with(q, k, v, mask, scale, par, simd::active())
}

/// [`forward`] with an explicit SIMD variant (the scalar path if the CPU lacks it).
///
/// # Errors
/// As [`forward`].
pub fn forward_with<'a, 'm, T: Real>(
    q: ArrayView4<'a, T>,
    k: ArrayView4<'a, T>,
    v: ArrayView4<'a, T>,
    mask: &Mask<'m>,
    scale: T,
    par: Par,
    isa: Isa,
) -> Result<(Array4<T>, Array3<T>), AttnError> {
    let p = Problem::new(q.view(), k.view(), v.view(), mask, scale, isa)?;
    let mut o = Array4::<T>::zeros((p.batch, p.heads, p.nq, p.dv));
    let mut lse = Array3::<T>::from_elem((p.batch, p.heads, p.nq), T::NEG_INFINITY);
    let bh_count = p.batch * p.heads;
    let per_head = tiles(p.nq, BLOCK_Q).count();
    let o_parts = split_lens(
        o.as_slice_mut().expect("fresh array is contiguous"),
        (0..bh_count).flat_map(|_| tiles(p.nq, BLOCK_Q).map(|(_, n)| n * p.dv)),
    );
    let l_parts = split_lens(
        lse.as_slice_mut().expect("fresh array is contiguous"),
        (0..bh_count).flat_map(|_| tiles(p.nq, BLOCK_Q).map(|(_, n)| n)),
    );
    let tasks: Vec<_> = o_parts
        .into_iter()
        .zip(l_parts)
        .enumerate()
        .map(|(t, (o, l))| (t / per_head.max(1), (t % per_head.max(1)) * BLOCK_Q, o, l))
        .collect();
    run_tasks(par, tasks, || Scratch::new(&p), |sc, (bh, i0, o, l)| tile(&p, sc, bh, i0, o, l));
    Ok((o, lse))
}

/// One (batch, head, query tile) task: rows `i0 .. i0 + lse.len()`.
fn tile<T: Real>(p: &Problem<T>, sc: &mut Scratch<T>, bh: usize, i0: usize, o: &mut [T], lse: &mut [T]) {
    let (b, h) = p.split(bh);
    let mq = lse.len();
    let (_, dvpad) = pads(p);
    let isa = p.isa;
    let (qh, kh, vh) = (p.head(&p.q, bh), p.head(&p.k, bh), p.head(&p.v, bh));
    let qa = a_operand(&qh, i0);
    let pointwise = p.rules.has_pointwise();
    sc.m[..mq].fill(T::NEG_INFINITY);
    sc.l[..mq].fill(T::ZERO);
    sc.acc[..mq * dvpad].fill(T::ZERO);
    for (j0, bk) in tiles(p.hi_max(b, i0, mq), BLOCK_K) {
        let bkp = padded(bk);
        pack_cols(&kh, j0, bk, &mut sc.kt, bkp);
        let vb = b_operand(&vh, j0, bk, &mut sc.vp);
        // S = scale·Q·Kᵀ
        // SAFETY: q rows i0..i0+mq through the view's strides (d columns), kt is d×bkp, s is
        // mq×bkp with bkp % PAD == 0.
        unsafe {
            gemm(isa, mq, bkp, p.d, qa.ptr, qa.rs, qa.cs, sc.kt.as_ptr(), bkp as isize, sc.s.as_mut_ptr(),
                bkp as isize, false, p.scale);
        }
        for r in 0..mq {
            let i = i0 + r;
            let cnt = p.rules.hi(b, i).saturating_sub(j0).min(bk);
            sc.cnt[r] = cnt;
            if pointwise && cnt > 0 {
                // Element-wise rules.
                for (c, x) in sc.s[r * bkp..r * bkp + cnt].iter_mut().enumerate() {
                    if !p.rules.pointwise(b, h, i, j0 + c) {
                        *x = T::NEG_INFINITY;
                    }
                }
            }
        }
        // SAFETY: buffers sized by Scratch::new for this tile.
        let k_eff =
            unsafe { online_softmax(isa, mq, &mut sc.s, bkp, &sc.cnt, &mut sc.m, &mut sc.l, &mut sc.acc, dvpad) };
        if k_eff > 0 {
            // acc += P·V
            // SAFETY: s is mq×bkp (k_eff ≤ bk columns read), V rows j0.. with dvpad columns,
            // acc is mq×dvpad.
            unsafe {
                gemm(isa, mq, dvpad, k_eff, sc.s.as_ptr(), bkp as isize, 1, vb.ptr, vb.rs, sc.acc.as_mut_ptr(),
                    dvpad as isize, true, T::ONE);
            }
        }
    }
    // Finish: o = acc / l, lse = m + ln l; rows that saw nothing keep o = 0, lse = −∞.
    for r in 0..mq {
        let l = sc.l[r];
        if l > T::ZERO {
            let inv = T::ONE / l;
            for (o, &a) in o[r * p.dv..(r + 1) * p.dv].iter_mut().zip(&sc.acc[r * dvpad..]) {
                *o = a * inv;
            }
            lse[r] = sc.m[r] + l.ln();
        } else {
            o[r * p.dv..(r + 1) * p.dv].fill(T::ZERO);
            lse[r] = T::NEG_INFINITY;
        }
    }
}
