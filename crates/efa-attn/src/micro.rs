//! Attention microkernels on packed tiles, with the run-time dispatch of `efa_num::simd`.
//!
//! [`gemm`] computes `C (+)= A·B` where `A` is read one scalar at a time through arbitrary
//! (row, column) strides — so transposed operands such as `Pᵀ` or `dSᵀ` cost nothing extra —
//! and `B`, `C` have contiguous rows whose width is a multiple of [`PAD`] (tiles are padded with
//! zeros). The register block is `MR` rows × `NR` vectors: 8×2 for AVX-512 (16 of 32 zmm
//! accumulators), 6×2 for AVX2 (12 of 16 ymm), 4×2 for the scalar path.

use efa_num::simd::{Isa, SimdElem, SimdVec};
use efa_num::{simd_by_kind, simd_variants, Real};

/// Tile widths are rounded up to a multiple of this (16 elements: a 64-byte f32 or a
/// 128-byte f64 row chunk; every variant's lane count divides it).
pub const PAD: usize = 16;

/// `n` rounded up to a multiple of [`PAD`].
#[inline]
pub fn padded(n: usize) -> usize {
    n.div_ceil(PAD) * PAD
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn block<V: SimdVec, const MR: usize, const NR: usize>(
    k: usize,
    a: *const V::Elem,
    rsa: isize,
    csa: isize,
    b: *const V::Elem,
    rsb: isize,
    c: *mut V::Elem,
    rsc: isize,
    accumulate: bool,
    alpha: V::Elem,
) {
    unsafe {
        let w = V::LANES;
        let zero = V::splat(V::Elem::ZERO);
        let mut acc = [[zero; NR]; MR];
        if accumulate {
            for (i, row) in acc.iter_mut().enumerate() {
                for (j, x) in row.iter_mut().enumerate() {
                    *x = V::load(c.offset(i as isize * rsc).add(j * w));
                }
            }
        }
        let (mut ap, mut bp) = (a, b);
        for _ in 0..k {
            let mut bv = [zero; NR];
            for (j, x) in bv.iter_mut().enumerate() {
                *x = V::load(bp.add(j * w));
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let av = V::splat(*ap.offset(i as isize * rsa));
                for (j, x) in row.iter_mut().enumerate() {
                    *x = av.fma(bv[j], *x);
                }
            }
            ap = ap.offset(csa);
            bp = bp.offset(rsb);
        }
        let va = V::splat(alpha);
        let scaled = !accumulate && alpha != V::Elem::ONE;
        for (i, row) in acc.iter().enumerate() {
            for (j, x) in row.iter().enumerate() {
                let x = if scaled { x.mul(va) } else { *x };
                x.store(c.offset(i as isize * rsc).add(j * w));
            }
        }
    }
}

/// All column blocks of an `MR`-row strip.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn strip<V: SimdVec, const MR: usize, const NR: usize>(
    n: usize,
    k: usize,
    a: *const V::Elem,
    rsa: isize,
    csa: isize,
    b: *const V::Elem,
    rsb: isize,
    c: *mut V::Elem,
    rsc: isize,
    accumulate: bool,
    alpha: V::Elem,
) {
    unsafe {
        let w = V::LANES;
        let mut j = 0;
        while j + NR * w <= n {
            block::<V, MR, NR>(k, a, rsa, csa, b.add(j), rsb, c.add(j), rsc, accumulate, alpha);
            j += NR * w;
        }
        while j < n {
            block::<V, MR, 1>(k, a, rsa, csa, b.add(j), rsb, c.add(j), rsc, accumulate, alpha);
            j += w;
        }
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows<V: SimdVec, const MR: usize>(
    m: usize,
    n: usize,
    k: usize,
    a: *const V::Elem,
    rsa: isize,
    csa: isize,
    b: *const V::Elem,
    rsb: isize,
    c: *mut V::Elem,
    rsc: isize,
    accumulate: bool,
    alpha: V::Elem,
) {
    unsafe {
        let mut i = 0;
        while i + MR <= m {
            let (ai, ci) = (a.offset(i as isize * rsa), c.offset(i as isize * rsc));
            strip::<V, MR, 2>(n, k, ai, rsa, csa, b, rsb, ci, rsc, accumulate, alpha);
            i += MR;
        }
        // Remainder rows in blocks of 4, 2, 1.
        while i < m {
            let (ai, ci) = (a.offset(i as isize * rsa), c.offset(i as isize * rsc));
            let left = m - i;
            if left >= 4 && MR > 4 {
                strip::<V, 4, 2>(n, k, ai, rsa, csa, b, rsb, ci, rsc, accumulate, alpha);
                i += 4;
            } else if left >= 2 {
                strip::<V, 2, 2>(n, k, ai, rsa, csa, b, rsb, ci, rsc, accumulate, alpha);
                i += 2;
            } else {
                strip::<V, 1, 2>(n, k, ai, rsa, csa, b, rsb, ci, rsc, accumulate, alpha);
                i += 1;
            }
        }
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_body<V: SimdVec>(
    m: usize,
    n: usize,
    k: usize,
    a: *const V::Elem,
    rsa: isize,
    csa: isize,
    b: *const V::Elem,
    rsb: isize,
    c: *mut V::Elem,
    rsc: isize,
    accumulate: bool,
    alpha: V::Elem,
) {
    unsafe {
        let bytes = V::LANES * std::mem::size_of::<V::Elem>();
        if bytes >= 64 {
            rows::<V, 8>(m, n, k, a, rsa, csa, b, rsb, c, rsc, accumulate, alpha)
        } else if bytes >= 32 {
            rows::<V, 6>(m, n, k, a, rsa, csa, b, rsb, c, rsc, accumulate, alpha)
        } else {
            rows::<V, 4>(m, n, k, a, rsa, csa, b, rsb, c, rsc, accumulate, alpha)
        }
    }
}
simd_variants!(gemm_body, gemm_d, (m: usize, n: usize, k: usize, a: *const E, rsa: isize, csa: isize,
    b: *const E, rsb: isize, c: *mut E, rsc: isize, accumulate: bool, alpha: E) -> ());

/// `C ← alpha·A·B` (`accumulate = false`) or `C ← C + A·B` (`accumulate = true`, `alpha`
/// ignored): `A` is m×k read at `a[i·rsa + p·csa]`, `B` is k×n with rows at `b[p·rsb]`,
/// `C` is m×n with rows at `c[i·rsc]`; `n` must be a multiple of [`PAD`]. The summation over `p` runs in index order for
/// every element, so the result does not depend on the blocking.
///
/// # Safety
/// All pointers must be valid for the stated shapes and strides; `c` must not alias `a`, `b`;
/// `isa` must be supported.
#[inline]
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm<T: Real>(
    isa: Isa,
    m: usize,
    n: usize,
    k: usize,
    a: *const T,
    rsa: isize,
    csa: isize,
    b: *const T,
    rsb: isize,
    c: *mut T,
    rsc: isize,
    accumulate: bool,
    alpha: T,
) {
    debug_assert!(n % PAD == 0);
    simd_by_kind!(T, E => unsafe {
        gemm_d::<E>(isa, m, n, k, a.cast(), rsa, csa, b.cast(), rsb, c.cast(), rsc, accumulate,
            *(&alpha as *const T).cast::<E>())
    })
}

#[inline(always)]
unsafe fn ds_body<V: SimdVec>(p: *const V::Elem, dp: *mut V::Elem, d: V::Elem, n: usize) {
    unsafe {
        let w = V::LANES;
        let vd = V::splat(d);
        let mut j = 0;
        while j + w <= n {
            let pv = V::load(p.add(j));
            pv.mul(V::load(dp.add(j)).sub(vd)).store(dp.add(j));
            j += w;
        }
        while j < n {
            *dp.add(j) = *p.add(j) * (*dp.add(j) - d);
            j += 1;
        }
    }
}
simd_variants!(ds_body, ds_d, (p: *const E, dp: *mut E, d: E, n: usize) -> ());

/// In place `dpⱼ ← pⱼ·(dpⱼ − d)` over a row (the softmax backward `dS = P ∘ (dP − D)`).
pub fn ds_row<T: Real>(isa: Isa, p: &[T], dp: &mut [T], d: T) {
    let n = p.len().min(dp.len());
    simd_by_kind!(T, E => unsafe {
        ds_d::<E>(isa, p.as_ptr().cast(), dp.as_mut_ptr().cast(), *(&d as *const T).cast::<E>(), n)
    })
}

/// Sets row `[from, w)` to `x` (scalar until lane-aligned, then whole vectors).
#[inline(always)]
unsafe fn fill<V: SimdVec>(row: *mut V::Elem, from: usize, w: usize, x: V::Elem) {
    unsafe {
        let lanes = V::LANES;
        let mut j = from;
        while j < w && j % lanes != 0 {
            *row.add(j) = x;
            j += 1;
        }
        let vx = V::splat(x);
        while j < w {
            vx.store(row.add(j));
            j += lanes;
        }
    }
}

/// Row max over `w` (a multiple of the lane count) entries.
#[inline(always)]
unsafe fn row_max_plain<V: SimdVec>(row: *const V::Elem, w: usize) -> V::Elem {
    unsafe {
        let mut m = V::splat(V::Elem::NEG_INFINITY);
        let mut j = 0;
        while j < w {
            m = V::load(row.add(j)).max(m);
            j += V::LANES;
        }
        m.reduce_max()
    }
}

/// In place `row ← exp(row − c)` over `w` (a multiple of the lane count) entries; returns the sum.
#[inline(always)]
unsafe fn row_exp<V: SimdVec>(row: *mut V::Elem, w: usize, c: V::Elem) -> V::Elem {
    unsafe {
        let lanes = V::LANES;
        let vc = V::splat(c);
        let zero = V::splat(V::Elem::ZERO);
        let (mut s0, mut s1) = (zero, zero);
        let mut j = 0;
        while j + 2 * lanes <= w {
            let e0 = V::load(row.add(j)).sub(vc).exp();
            let e1 = V::load(row.add(j + lanes)).sub(vc).exp();
            e0.store(row.add(j));
            e1.store(row.add(j + lanes));
            s0 = s0.add(e0);
            s1 = s1.add(e1);
            j += 2 * lanes;
        }
        if j < w {
            let e0 = V::load(row.add(j)).sub(vc).exp();
            e0.store(row.add(j));
            s0 = s0.add(e0);
        }
        s0.add(s1).reduce_sum()
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn online_body<V: SimdVec>(
    mq: usize,
    s: *mut V::Elem,
    bkp: usize,
    cnt: *const usize,
    m: *mut V::Elem,
    l: *mut V::Elem,
    acc: *mut V::Elem,
    dvpad: usize,
) -> usize {
    unsafe {
        let ninf = V::Elem::NEG_INFINITY;
        let zero = V::Elem::ZERO;
        let mut k_eff = 0;
        for r in 0..mq {
            let row = s.add(r * bkp);
            let c = *cnt.add(r);
            let w = padded(c).min(bkp);
            if c == 0 {
                fill::<V>(row, 0, bkp, zero);
                continue;
            }
            fill::<V>(row, c, w, ninf);
            let mt = row_max_plain::<V>(row, w);
            if mt == ninf {
                fill::<V>(row, 0, bkp, zero);
                continue;
            }
            // Online softmax: m ← max(m, max_j s), l ← l·e^{m_old − m} + Σ_j e^{s − m},
            // acc ← acc·e^{m_old − m} (P·V is added by the caller).
            let m_old = *m.add(r);
            let m_new = if mt > m_old { mt } else { m_old };
            let sum = row_exp::<V>(row, w, m_new);
            fill::<V>(row, w, bkp, zero);
            if m_new != m_old && *l.add(r) != zero {
                let alpha = <V::Elem as SimdElem>::One::splat(m_old - m_new).exp().reduce_sum();
                *l.add(r) *= alpha;
                let va = V::splat(alpha);
                let a = acc.add(r * dvpad);
                let mut j = 0;
                while j < dvpad {
                    V::load(a.add(j)).mul(va).store(a.add(j));
                    j += V::LANES;
                }
            }
            *l.add(r) += sum;
            *m.add(r) = m_new;
            k_eff = k_eff.max(c);
        }
        k_eff
    }
}
simd_variants!(online_body, online_d, (mq: usize, s: *mut E, bkp: usize, cnt: *const usize, m: *mut E,
    l: *mut E, acc: *mut E, dvpad: usize) -> usize);

/// Forward online-softmax update of a score tile `s` (`mq` rows of stride `bkp`, a multiple of
/// [`PAD`]): row `r` has `cnt[r]` leading visible entries (element-wise masks already set to
/// −∞). Updates the running max `m`, sum `l`, rescales the accumulator rows, and leaves
/// `P = exp(s − m)` in `s` (zero beyond the visible entries). Returns the largest visible count.
///
/// # Safety
/// Buffers sized `mq·bkp` (`s`), `mq` (`cnt`, `m`, `l`), `mq·dvpad` (`acc`, a multiple of
/// [`PAD`]); `isa` supported.
#[allow(clippy::too_many_arguments)]
pub unsafe fn online_softmax<T: Real>(
    isa: Isa,
    mq: usize,
    s: &mut [T],
    bkp: usize,
    cnt: &[usize],
    m: &mut [T],
    l: &mut [T],
    acc: &mut [T],
    dvpad: usize,
) -> usize {
    debug_assert!(s.len() >= mq * bkp && cnt.len() >= mq && m.len() >= mq && l.len() >= mq && acc.len() >= mq * dvpad);
    simd_by_kind!(T, E => unsafe {
        online_d::<E>(isa, mq, s.as_mut_ptr().cast(), bkp, cnt.as_ptr(), m.as_mut_ptr().cast(),
            l.as_mut_ptr().cast(), acc.as_mut_ptr().cast(), dvpad)
    })
}

#[inline(always)]
unsafe fn probs_body<V: SimdVec>(
    mq: usize,
    s: *mut V::Elem,
    bkp: usize,
    cnt: *const usize,
    lse: *const V::Elem,
) -> usize {
    unsafe {
        let ninf = V::Elem::NEG_INFINITY;
        let mut k_eff = 0;
        for r in 0..mq {
            let row = s.add(r * bkp);
            let c = *cnt.add(r);
            let lse = *lse.add(r);
            if c == 0 || lse == ninf {
                fill::<V>(row, 0, bkp, V::Elem::ZERO);
                continue;
            }
            let w = padded(c).min(bkp);
            fill::<V>(row, c, w, ninf);
            row_exp::<V>(row, w, lse);
            fill::<V>(row, w, bkp, V::Elem::ZERO);
            k_eff = k_eff.max(c);
        }
        k_eff
    }
}
simd_variants!(probs_body, probs_d, (mq: usize, s: *mut E, bkp: usize, cnt: *const usize, lse: *const E) -> usize);

/// Backward recomputation `P = exp(s − lse)` in place on a score tile (layout as in
/// [`online_softmax`]); rows with no visible entry or `lse = −∞` become 0. Returns the largest
/// visible count.
///
/// # Safety
/// As [`online_softmax`].
pub unsafe fn probabilities<T: Real>(isa: Isa, mq: usize, s: &mut [T], bkp: usize, cnt: &[usize], lse: &[T]) -> usize {
    debug_assert!(s.len() >= mq * bkp && cnt.len() >= mq && lse.len() >= mq);
    simd_by_kind!(T, E => unsafe {
        probs_d::<E>(isa, mq, s.as_mut_ptr().cast(), bkp, cnt.as_ptr(), lse.as_ptr().cast())
    })
}
