//! Attention microkernels on packed tiles, with the run-time dispatch of `efa_num::simd`.
//!
//! [`gemm`] computes `C (+)= A·B` where `A` is read one scalar at a time through arbitrary
//! (row, column) strides — so transposed operands such as `Pᵀ` or `dSᵀ` cost nothing extra —
//! and `B`, `C` have contiguous rows whose width is a multiple of [`PAD`] (tiles are padded with
//! zeros). The register block is `MR` rows × `NR` vectors: 8×2 for AVX-512 (16 of 32 zmm
//! accumulators), 6×2 for AVX2 (12 of 16 ymm), 4×2 for the scalar path. A column count that
//! is not a multiple of the vector width ends in one vector; on AVX-512 that last vector is a
//! 256-bit one when it covers the rest (50 queries: three zmm and one ymm instead of four zmm),
//! which halves its cost on cores that execute 512-bit operations as two halves.

use efa_num::simd::{Isa, SimdVec};
use efa_num::{simd_by_kind, simd_variants, Real};
use std::mem::MaybeUninit;

/// Like `efa_num::simd_variants!`, but the body takes a second vector type `H` of the same
/// element for partial column tails: AVX-512 bodies get the AVX2 register (half the width; on
/// cores that split 512-bit operations in two it costs half), the others their own type.
macro_rules! tail_variants {
    ($body:ident, $disp:ident, ($($a:ident : $t:ty),*) -> $r:ty) => {
        /// Dispatches to the variant `isa`.
        ///
        /// # Safety
        /// `isa` must be supported by the CPU; pointers valid for the stated lengths.
        #[inline]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $disp<E: efa_num::simd::SimdElem>(isa: Isa, $($a: $t),*) -> $r {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn v512<E: efa_num::simd::SimdElem>($($a: $t),*) -> $r {
                // SAFETY: AVX-512F implies AVX2 and FMA, so both register types are usable.
                unsafe { $body::<E::Avx512, E::Avx2>($($a),*) }
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn v256<E: efa_num::simd::SimdElem>($($a: $t),*) -> $r {
                unsafe { $body::<E::Avx2, E::Avx2>($($a),*) }
            }
            // SAFETY: the caller guarantees `isa` is supported.
            unsafe {
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 => v512::<E>($($a),*),
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 => v256::<E>($($a),*),
                    _ => $body::<E::One, E::One>($($a),*),
                }
            }
        }
    };
}

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

/// All column blocks of an `MR`-row strip covering the first `nu` columns: `NR`-vector blocks,
/// then single vectors, and a last block of the narrower `H` when it covers the rest.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn strip<V: SimdVec, H: SimdVec<Elem = V::Elem>, const MR: usize, const NR: usize>(
    nu: usize,
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
        while j + NR * w <= nu {
            block::<V, MR, NR>(
                k,
                a,
                rsa,
                csa,
                b.add(j),
                rsb,
                c.add(j),
                rsc,
                accumulate,
                alpha,
            );
            j += NR * w;
        }
        while j < nu {
            if H::LANES < w && nu - j <= H::LANES {
                block::<H, MR, 1>(
                    k,
                    a,
                    rsa,
                    csa,
                    b.add(j),
                    rsb,
                    c.add(j),
                    rsc,
                    accumulate,
                    alpha,
                );
                j += H::LANES;
            } else {
                block::<V, MR, 1>(
                    k,
                    a,
                    rsa,
                    csa,
                    b.add(j),
                    rsb,
                    c.add(j),
                    rsc,
                    accumulate,
                    alpha,
                );
                j += w;
            }
        }
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows<V: SimdVec, H: SimdVec<Elem = V::Elem>, const MR: usize>(
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
            strip::<V, H, MR, 2>(n, k, ai, rsa, csa, b, rsb, ci, rsc, accumulate, alpha);
            i += MR;
        }
        // Remainder rows in blocks of 4, 2, 1.
        while i < m {
            let (ai, ci) = (a.offset(i as isize * rsa), c.offset(i as isize * rsc));
            let left = m - i;
            if left >= 4 && MR > 4 {
                strip::<V, H, 4, 2>(n, k, ai, rsa, csa, b, rsb, ci, rsc, accumulate, alpha);
                i += 4;
            } else if left >= 2 {
                strip::<V, H, 2, 2>(n, k, ai, rsa, csa, b, rsb, ci, rsc, accumulate, alpha);
                i += 2;
            } else {
                strip::<V, H, 1, 2>(n, k, ai, rsa, csa, b, rsb, ci, rsc, accumulate, alpha);
                i += 1;
            }
        }
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_body<V: SimdVec, H: SimdVec<Elem = V::Elem>>(
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
            rows::<V, H, 8>(m, n, k, a, rsa, csa, b, rsb, c, rsc, accumulate, alpha)
        } else if bytes >= 32 {
            rows::<V, H, 6>(m, n, k, a, rsa, csa, b, rsb, c, rsc, accumulate, alpha)
        } else {
            rows::<V, H, 4>(m, n, k, a, rsa, csa, b, rsb, c, rsc, accumulate, alpha)
        }
    }
}
tail_variants!(gemm_body, gemm_d, (m: usize, n: usize, k: usize, a: *const E, rsa: isize, csa: isize,
    b: *const E, rsb: isize, c: *mut E, rsc: isize, accumulate: bool, alpha: E) -> ());

/// `C ← alpha·A·B` (`accumulate = false`) or `C ← C + A·B` (`accumulate = true`, `alpha`
/// ignored): `A` is m×k read at `a[i·rsa + p·csa]`, `B` is k×n with rows at `b[p·rsb]`,
/// `C` is m×n with rows at `c[i·rsc]`. Columns are computed in whole vectors, so for `n` not
/// a multiple of [`PAD`] the columns up to `padded(n)` may be read from `B` and written to `C`
/// (with unspecified values). The summation over `p` runs in index order for every element, so
/// the result does not depend on the blocking or on the variant's column tail.
///
/// # Safety
/// All pointers must be valid for the stated shapes and strides with `padded(n)` columns for
/// `B` and `C`; `c` must not alias `a`, `b`; `isa` must be supported.
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
    simd_by_kind!(T, E => unsafe {
        gemm_d::<E>(isa, m, n, k, a.cast(), rsa, csa, b.cast(), rsb, c.cast(), rsc, accumulate,
            *(&alpha as *const T).cast::<E>())
    })
}

/// [`gemm`] on slices with every bound checked: `C ← alpha·A·B` (`accumulate = false`) or
/// `C ← C + A·B` (`accumulate = true`), `A` `m × k` at `a[i·rsa + p·csa]`, `B` `k × n` with
/// rows at `b[p·ldb]`, `C` rows at `c[i·ldc]`; `B` and `C` rows are read and written up to
/// `padded(n)` columns, so `ldb` and `ldc` must be at least that.
///
/// # Panics
/// If a slice is too short for its shape and strides (an internal invariant of the callers:
/// the kernels size their buffers from the same shapes).
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn gemm_checked<T: Real>(
    isa: Isa,
    mnk: (usize, usize, usize),
    a: &[T],
    (rsa, csa): (usize, usize),
    b: &[T],
    ldb: usize,
    c: &mut [T],
    ldc: usize,
    accumulate: bool,
    alpha: T,
) {
    let c_len = c.len();
    // SAFETY: `c` is initialised, so the kernel may read it when accumulating.
    unsafe {
        gemm_bounded(
            isa,
            mnk,
            a,
            (rsa, csa),
            b,
            ldb,
            (c.as_mut_ptr(), c_len),
            ldc,
            accumulate,
            alpha,
        )
    }
}

/// [`gemm_checked`] without accumulation into a `C` not yet written: the kernel writes at
/// least columns `[0, n)` of each of the `m` rows (at most `[0, padded(n))`: how far a vector
/// tail reaches depends on the instruction set) and never reads them, so afterwards columns
/// `[0, n)` are initialised; the caller writes any others it reads.
///
/// # Panics
/// As [`gemm_checked`].
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn gemm_checked_into<T: Real>(
    isa: Isa,
    mnk: (usize, usize, usize),
    a: &[T],
    strides_a: (usize, usize),
    b: &[T],
    ldb: usize,
    c: &mut [MaybeUninit<T>],
    ldc: usize,
    alpha: T,
) {
    let c_len = c.len();
    // SAFETY: without accumulation the kernel only writes C (initialised values).
    unsafe {
        gemm_bounded(
            isa,
            mnk,
            a,
            strides_a,
            b,
            ldb,
            (c.as_mut_ptr().cast::<T>(), c_len),
            ldc,
            false,
            alpha,
        )
    }
}

/// The bounds checks of [`gemm_checked`] and the kernel call, on `C` given as a pointer and
/// length.
///
/// # Safety
/// `c` points to `c.1` elements that are uniquely borrowed (aliasing neither `a` nor `b`);
/// with `accumulate` they must be initialised.
#[allow(clippy::too_many_arguments)]
#[track_caller]
unsafe fn gemm_bounded<T: Real>(
    isa: Isa,
    (m, n, k): (usize, usize, usize),
    a: &[T],
    (rsa, csa): (usize, usize),
    b: &[T],
    ldb: usize,
    (c, c_len): (*mut T, usize),
    ldc: usize,
    accumulate: bool,
    alpha: T,
) {
    if m == 0 || n == 0 {
        return;
    }
    let np = padded(n);
    assert!(
        k == 0 || (m - 1) * rsa + (k - 1) * csa < a.len(),
        "gemm: A bounds"
    );
    assert!(
        k == 0 || ((k - 1) * ldb + np <= b.len() && ldb >= np),
        "gemm: B bounds"
    );
    assert!((m - 1) * ldc + np <= c_len && ldc >= np, "gemm: C bounds");
    // SAFETY: the asserts keep every element the kernel reads (A through its strides, B rows
    // up to the padded width) or writes (C rows up to the padded width) inside the slices; the
    // caller guarantees C is unique (and initialised when accumulating).
    unsafe {
        gemm(
            isa,
            m,
            n,
            k,
            a.as_ptr(),
            rsa as isize,
            csa as isize,
            b.as_ptr(),
            ldb as isize,
            c,
            ldc as isize,
            accumulate,
            alpha,
        );
    }
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
        while j < w && !j.is_multiple_of(lanes) {
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

/// The online-softmax update of one column block `[cb, cb + X::LANES)` (see
/// [`online_softmax_t`]).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn online_t_block<X: SimdVec>(
    cb: usize,
    rows: usize,
    cnt: *const usize,
    mq: usize,
    st: *mut X::Elem,
    mqp: usize,
    m: *mut X::Elem,
    l: *mut X::Elem,
    acct: *mut X::Elem,
    dv: usize,
    alpha_out: *mut X::Elem,
) {
    unsafe {
        let lanes = X::LANES;
        let ninf = X::splat(X::Elem::NEG_INFINITY);
        // Lower clamp for the shift: keeps `−∞ − m` from becoming `−∞ + ∞` while no key has
        // been seen (then every entry is −∞ and exp gives exactly 0). Not a mask value.
        let lowest = X::splat(-X::Elem::MAX);
        let zero = X::splat(X::Elem::ZERO);
        // Rows at or past the block's largest visible count are −∞ in every column: P = 0.
        let lim = if cb < mq {
            (*cnt.add((cb + lanes).min(mq) - 1)).min(rows)
        } else {
            0
        };
        for j in lim..rows {
            zero.store(st.add(j * mqp + cb));
        }
        let rows = lim;
        let mut mt = ninf;
        for j in 0..rows {
            mt = X::load(st.add(j * mqp + cb)).max(mt);
        }
        let m_old = X::load(m.add(cb));
        let m_new = mt.max(m_old);
        let shift = m_new.max(lowest);
        // m ← max(m, max_j s), l ← l·e^{m_old − m} + Σ_j e^{s − m}, acc ← acc·e^{m_old − m}
        let alpha = m_old.sub(shift).exp();
        let mut sum = X::splat(X::Elem::ZERO);
        for j in 0..rows {
            let p = st.add(j * mqp + cb);
            let e = X::load(p).sub(shift).exp();
            e.store(p);
            sum = sum.add(e);
        }
        X::load(l.add(cb)).fma(alpha, sum).store(l.add(cb));
        m_new.store(m.add(cb));
        if !alpha_out.is_null() {
            alpha.store(alpha_out.add(cb));
        }
        for c in 0..dv {
            let a = acct.add(c * mqp + cb);
            X::load(a).mul(alpha).store(a);
        }
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn online_t_body<V: SimdVec, H: SimdVec<Elem = V::Elem>>(
    rows: usize,
    cnt: *const usize,
    mq: usize,
    st: *mut V::Elem,
    mqp: usize,
    m: *mut V::Elem,
    l: *mut V::Elem,
    acct: *mut V::Elem,
    dv: usize,
    alpha_out: *mut V::Elem,
) {
    unsafe {
        // Column blocks up to the last query; the last one in the narrower `H` when that
        // covers it. Columns past it are left as they are.
        let w = V::LANES;
        let mut cb = 0;
        while cb < mq {
            if H::LANES < w && mq - cb <= H::LANES {
                online_t_block::<H>(cb, rows, cnt, mq, st, mqp, m, l, acct, dv, alpha_out);
                cb += H::LANES;
            } else {
                online_t_block::<V>(cb, rows, cnt, mq, st, mqp, m, l, acct, dv, alpha_out);
                cb += w;
            }
        }
    }
}
tail_variants!(online_t_body, online_t_dd, (rows: usize, cnt: *const usize, mq: usize, st: *mut E, mqp: usize, m: *mut E, l: *mut E,
    acct: *mut E, dv: usize, alpha_out: *mut E) -> ());

/// Forward online-softmax update on a transposed score tile `st` (`rows` keys × `mqp` queries,
/// `mqp` a multiple of [`PAD`]; masked entries already −∞; query column `r < cnt.len()` sees at
/// most the first `cnt[r]` key rows, `cnt` non-decreasing), vectorised across queries: per
/// query column, `m ← max(m, maxⱼ s)`, `l ← l·e^{m_old − m} + Σⱼ e^{s − m}`, the transposed
/// accumulator `accᵀ` (`dv` rows × `mqp`) is scaled by `e^{m_old − m}`, and `st` is replaced by
/// `Pᵀ = exp(st − m)` (0 where masked). With `alpha = Some(a)`, the factors `e^{m_old − m}`
/// are also stored in `a` (`mqp` entries), for an accumulator kept in another layout (pass
/// `dv = 0` to leave `acct` alone). Only the vector blocks covering the first `cnt.len()`
/// columns are touched (the same column tail as [`gemm`] with `n = cnt.len()`).
///
/// # Safety
/// `st` holds `rows·mqp`, `m`, `l` (and `alpha`) hold `mqp`, `acct` holds `dv·mqp` elements,
/// `cnt.len() ≤ mqp`; `isa` supported.
#[allow(clippy::too_many_arguments)]
pub unsafe fn online_softmax_t<T: Real>(
    isa: Isa,
    rows: usize,
    cnt: &[usize],
    st: &mut [T],
    mqp: usize,
    m: &mut [T],
    l: &mut [T],
    acct: &mut [T],
    dv: usize,
    alpha: Option<&mut [T]>,
) {
    debug_assert!(
        mqp.is_multiple_of(PAD) && st.len() >= rows * mqp && m.len() >= mqp && l.len() >= mqp
    );
    debug_assert!(acct.len() >= dv * mqp);
    debug_assert!(alpha.as_ref().is_none_or(|a| a.len() >= mqp));
    let alpha = alpha.map_or(std::ptr::null_mut(), |a| a.as_mut_ptr());
    simd_by_kind!(T, E => unsafe {
        online_t_dd::<E>(isa, rows, cnt.as_ptr(), cnt.len(), st.as_mut_ptr().cast(), mqp, m.as_mut_ptr().cast(),
            l.as_mut_ptr().cast(), acct.as_mut_ptr().cast(), dv, alpha.cast())
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

/// Backward recomputation `P = exp(s − lse)` in place on a score tile (`mq` rows of stride
/// `bkp`, a multiple of [`PAD`]; row `r` has `cnt[r]` leading visible entries, element-wise
/// masks already −∞); rows with no visible entry or `lse = −∞` become 0. Returns the largest
/// visible count.
///
/// # Safety
/// Buffers sized `mq·bkp` (`s`) and `mq` (`cnt`, `lse`); `isa` supported.
pub unsafe fn probabilities<T: Real>(
    isa: Isa,
    mq: usize,
    s: &mut [T],
    bkp: usize,
    cnt: &[usize],
    lse: &[T],
) -> usize {
    debug_assert!(s.len() >= mq * bkp && cnt.len() >= mq && lse.len() >= mq);
    simd_by_kind!(T, E => unsafe {
        probs_d::<E>(isa, mq, s.as_mut_ptr().cast(), bkp, cnt.as_ptr(), lse.as_ptr().cast())
    })
}
