//! Forward pass: online softmax over key tiles per (batch, head, query tile).

use crate::micro::{gemm, online_softmax_t, padded};
use crate::problem::{a_operand, pack_cols, run_tasks, split_lens, tiles, zeros, Problem};
use crate::{AttnError, Mask, Par, BLOCK_K, BLOCK_Q};
use efa_num::simd::{self, Isa};
use efa_num::Real;
use ndarray::{Array3, Array4, ArrayView4};
use std::mem::MaybeUninit;

/// Per-job scratch: the transposed query tile `Qᵀ`, (when needed) a padded `V` tile, the
/// transposed score tile `Sᵀ` (keys × queries, so the softmax statistics are vectorised across
/// queries), the transposed accumulator `accᵀ` and the running max / sum per query.
struct Scratch<T> {
    qt: Vec<T>,
    st: Vec<T>,
    acct: Vec<T>,
    m: Vec<T>,
    l: Vec<T>,
    cnt: Vec<usize>,
}

impl<T: Real> Scratch<T> {
    fn new(p: &Problem<T>) -> Self {
        let bq = BLOCK_Q.min(p.nq).max(1);
        let bk = BLOCK_K.min(p.nk).max(1);
        let mqp = padded(bq);
        Scratch {
            qt: zeros(p.d * mqp),
            st: zeros(bk * mqp),
            acct: zeros(p.dv * mqp),
            m: zeros(mqp),
            l: zeros(mqp),
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
pub fn forward<T: Real>(
    q: ArrayView4<'_, T>,
    k: ArrayView4<'_, T>,
    v: ArrayView4<'_, T>,
    mask: &Mask<'_>,
    scale: T,
    par: Par,
) -> Result<(Array4<T>, Array3<T>), AttnError> {
    forward_with(q, k, v, mask, scale, par, simd::active())
}

/// [`forward`] with an explicit SIMD variant (the scalar path if the CPU lacks it).
///
/// # Errors
/// As [`forward`].
pub fn forward_with<T: Real>(
    q: ArrayView4<'_, T>,
    k: ArrayView4<'_, T>,
    v: ArrayView4<'_, T>,
    mask: &Mask<'_>,
    scale: T,
    par: Par,
    isa: Isa,
) -> Result<(Array4<T>, Array3<T>), AttnError> {
    let p = Problem::new(q.view(), k.view(), v.view(), mask, scale, isa)?;
    // Every element is written exactly once by the tasks below (no zero-fill pass).
    let mut o = Array4::<T>::uninit((p.batch, p.heads, p.nq, p.dv));
    let mut lse = Array3::<T>::uninit((p.batch, p.heads, p.nq));
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
    run_tasks(
        par,
        tasks,
        || Scratch::new(&p),
        |sc, (bh, i0, o, l)| tile(&p, sc, bh, i0, o, l),
    );
    // SAFETY: the tasks cover every (b, h, row) once and `tile` writes every element of its
    // rows of `o` and `lse`.
    Ok(unsafe { (o.assume_init(), lse.assume_init()) })
}

/// One (batch, head, query tile) task: rows `i0 .. i0 + lse.len()`.
fn tile<T: Real>(
    p: &Problem<T>,
    sc: &mut Scratch<T>,
    bh: usize,
    i0: usize,
    o: &mut [MaybeUninit<T>],
    lse: &mut [MaybeUninit<T>],
) {
    let (b, h) = p.split(bh);
    let mq = lse.len();
    let mqp = padded(mq);
    let isa = p.isa;
    let (qh, kh, vh) = (p.head(&p.q, bh), p.head(&p.k, bh), p.head(&p.v, bh));
    pack_cols(&qh, i0, mq, &mut sc.qt, mqp);
    let pointwise = p.rules.has_pointwise();
    sc.m[..mqp].fill(T::NEG_INFINITY);
    sc.l[..mqp].fill(T::ZERO);
    sc.acct[..p.dv * mqp].fill(T::ZERO);
    for (j0, bk) in tiles(p.hi_max(b, i0, mq), BLOCK_K) {
        let (ka, va) = (a_operand(&kh, j0), a_operand(&vh, j0));
        // Sᵀ = scale·K·Qᵀ (keys × queries)
        // SAFETY: K rows j0..j0+bk through the view's strides (d columns), qt is d×mqp, st is
        // bk×mqp with mqp % PAD == 0.
        unsafe {
            gemm(
                isa,
                bk,
                mqp,
                p.d,
                ka.ptr,
                ka.rs,
                ka.cs,
                sc.qt.as_ptr(),
                mqp as isize,
                sc.st.as_mut_ptr(),
                mqp as isize,
                false,
                p.scale,
            );
        }
        // Masks: query column r sees key rows j < cnt[r] (prefix rules; cnt grows with r), so
        // key row j is hidden from the first f(j) columns; then element-wise rules.
        for r in 0..mq {
            sc.cnt[r] = p.rules.hi(b, i0 + r).saturating_sub(j0).min(bk);
        }
        let mut f = 0;
        for j in 0..bk {
            while f < mq && sc.cnt[f] <= j {
                f += 1;
            }
            sc.st[j * mqp..j * mqp + f].fill(T::NEG_INFINITY);
        }
        if pointwise {
            for r in 0..mq {
                for j in 0..sc.cnt[r] {
                    if !p.rules.pointwise(b, h, i0 + r, j0 + j) {
                        sc.st[j * mqp + r] = T::NEG_INFINITY;
                    }
                }
            }
        }
        // SAFETY: buffers sized by Scratch::new for this tile.
        unsafe {
            online_softmax_t(
                isa,
                bk,
                &sc.cnt[..mq],
                &mut sc.st,
                mqp,
                &mut sc.m,
                &mut sc.l,
                &mut sc.acct,
                p.dv,
            )
        };
        // accᵀ += Vᵀ·Pᵀ (Vᵀ read through transposed strides)
        // SAFETY: V rows j0..j0+bk (dv columns), st is bk×mqp, acct is dv×mqp.
        unsafe {
            gemm(
                isa,
                p.dv,
                mqp,
                bk,
                va.ptr,
                va.cs,
                va.rs,
                sc.st.as_ptr(),
                mqp as isize,
                sc.acct.as_mut_ptr(),
                mqp as isize,
                true,
                T::ONE,
            );
        }
    }
    // Finish: o = acc / l, lse = m + ln l; rows that saw nothing keep o = 0, lse = −∞.
    for r in 0..mq {
        let l = sc.l[r];
        if l > T::ZERO {
            let inv = T::ONE / l;
            for (c, o) in o[r * p.dv..(r + 1) * p.dv].iter_mut().enumerate() {
                o.write(sc.acct[c * mqp + r] * inv);
            }
            lse[r].write(sc.m[r] + l.ln());
        } else {
            o[r * p.dv..(r + 1) * p.dv].fill(MaybeUninit::new(T::ZERO));
            lse[r].write(T::NEG_INFINITY);
        }
    }
}
