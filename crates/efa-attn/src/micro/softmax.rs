//! Row kernels of the softmax: the forward's online update on transposed score tiles, the
//! backward's recomputation of the probabilities and its `dS = P ∘ (dP − d)` rows.

use super::{padded, PAD};
use efa_num::simd::{bodies, Isa, SimdVec};
use efa_num::{simd_by_kind, simd_variants, Real};

mod cols;
pub use cols::{ds_cols, softmax_cols, softmax_cols_again, softmax_cols_keep};

#[inline(always)]
unsafe fn ds_body<V: SimdVec>(p: *const V::Elem, dp: *mut V::Elem, d: V::Elem, n: usize) {
    // SAFETY: the caller (the `ds_d` dispatcher's caller, or `ds_rows_body`) guarantees `V`'s
    // instruction set and `p`, `dp` valid for `n` elements; vectors cover `j .. j + w` only
    // while `j + w ≤ n`, the tail single elements `j < n`.
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
    // A variant the CPU lacks runs as the scalar path.
    let isa = isa.or_scalar();
    // SAFETY: `n` is at most both lengths, so both pointers are valid for `n` elements, and
    // `dp` is a unique borrow distinct from `p`; `E` is `T` itself, so the casts keep type and
    // alignment; `isa` is supported (`or_scalar` above).
    simd_by_kind!(T, E => unsafe {
        ds_d::<E>(isa, p.as_ptr().cast(), dp.as_mut_ptr().cast(), *(&d as *const T).cast::<E>(), n)
    })
}

#[inline(always)]
unsafe fn softmax_rows_body<V: SimdVec>(p: *mut V::Elem, ld: usize, rows: usize, n: usize) {
    // SAFETY: the dispatcher's caller (`softmax_rows`) guarantees `V`'s instruction set and
    // that row `r < rows`, at `p + r·ld`, is valid for `n` elements (asserted there); the row
    // bodies are called on rows `r`, `r + 1 < rows` (`r + 2 ≤ rows`) or the last `r < rows`,
    // each with `n` elements.
    unsafe {
        // Two rows at a time, their steps interleaved: each row's steps form one long chain of
        // dependent operations (reductions, the tail's sequential sum, a division), and the
        // second row's fill the first's waits. Each row's operations are unchanged.
        let mut r = 0;
        while r + 2 <= rows {
            let (x, y) = (p.add(r * ld), p.add((r + 1) * ld));
            let (mx, my) = (bodies::max_body::<V>(x, n), bodies::max_body::<V>(y, n));
            let zx = bodies::exp_sub_sum_body::<V>(x, n, mx);
            let zy = bodies::exp_sub_sum_body::<V>(y, n, my);
            bodies::scale_body::<V>(V::Elem::ONE / zx, x, n);
            bodies::scale_body::<V>(V::Elem::ONE / zy, y, n);
            r += 2;
        }
        if r < rows {
            let row = p.add(r * ld);
            let m = bodies::max_body::<V>(row, n);
            let z = bodies::exp_sub_sum_body::<V>(row, n, m);
            bodies::scale_body::<V>(V::Elem::ONE / z, row, n);
        }
    }
}
simd_variants!(softmax_rows_body, softmax_rows_d, (p: *mut E, ld: usize, rows: usize, n: usize) -> ());

/// In place softmax of the first `n` entries of `rows` rows at stride `ld` of `p`:
/// `xⱼ ← exp(xⱼ − m) / z` with `m = efa_num::simd::max_with(isa, x)` and
/// `z = efa_num::simd::exp_sub_sum_with(isa, x, m)`, scaled by `scale_with(isa, 1/z, x)`. The
/// same bits as those three calls per row, in one dispatched call for all rows.
///
/// # Panics
/// If `p` is too short for the rows (`(rows − 1)·ld + n` elements) or `n > ld`.
#[track_caller]
pub fn softmax_rows<T: Real>(isa: Isa, p: &mut [T], ld: usize, rows: usize, n: usize) {
    if rows == 0 {
        return;
    }
    assert!(
        n <= ld && (rows - 1) * ld + n <= p.len(),
        "softmax_rows: {rows} rows of {n} at stride {ld} in {} elements",
        p.len()
    );
    let isa = isa.or_scalar();
    // SAFETY: the assert keeps every row's first `n` entries inside `p`; `isa` is supported.
    simd_by_kind!(T, E => unsafe { softmax_rows_d::<E>(isa, p.as_mut_ptr().cast(), ld, rows, n) })
}

#[inline(always)]
unsafe fn ds_rows_body<V: SimdVec>(
    p: *const V::Elem,
    dp: *mut V::Elem,
    ld: usize,
    rows: usize,
    n: usize,
) {
    // SAFETY: the dispatcher's caller (`ds_rows`) guarantees `V`'s instruction set and that row
    // `r < rows` of `p` and of `dp` (at `r·ld`) is valid for `n` elements (asserted there, in
    // distinct borrows); the bodies run on rows `r`, `r + 1 < rows` or the last `r < rows`.
    unsafe {
        // Two rows at a time (as in `softmax_rows_body`); each row's operations are unchanged.
        let mut r = 0;
        while r + 2 <= rows {
            let (px, dx) = (p.add(r * ld), dp.add(r * ld));
            let (py, dy) = (p.add((r + 1) * ld), dp.add((r + 1) * ld));
            let (d0, d1) = (
                bodies::dot_body::<V>(px, dx, n),
                bodies::dot_body::<V>(py, dy, n),
            );
            ds_body::<V>(px, dx, d0, n);
            ds_body::<V>(py, dy, d1, n);
            r += 2;
        }
        if r < rows {
            let (pr, dr) = (p.add(r * ld), dp.add(r * ld));
            let d = bodies::dot_body::<V>(pr, dr, n);
            ds_body::<V>(pr, dr, d, n);
        }
    }
}
simd_variants!(ds_rows_body, ds_rows_d, (p: *const E, dp: *mut E, ld: usize, rows: usize, n: usize) -> ());

/// The softmax backward `dS = P ∘ (dP − D)` over the first `n` entries of `rows` rows at
/// stride `ld`, in place in `dp`: per row `d = efa_num::simd::dot_with(isa, p, dp)`, then
/// [`ds_row`]`(isa, p, dp, d)`. The same bits as those two calls per row, in one dispatched
/// call for all rows.
///
/// # Panics
/// If `p` or `dp` is too short for the rows or `n > ld`.
#[track_caller]
pub fn ds_rows<T: Real>(isa: Isa, p: &[T], dp: &mut [T], ld: usize, rows: usize, n: usize) {
    if rows == 0 {
        return;
    }
    let need = (rows - 1) * ld + n;
    assert!(
        n <= ld && need <= p.len() && need <= dp.len(),
        "ds_rows: {rows} rows of {n} at stride {ld} in {} and {} elements",
        p.len(),
        dp.len()
    );
    let isa = isa.or_scalar();
    // SAFETY: the assert keeps every row's first `n` entries inside both slices (distinct
    // borrows, so they do not alias); `isa` is supported.
    simd_by_kind!(T, E => unsafe {
        ds_rows_d::<E>(isa, p.as_ptr().cast(), dp.as_mut_ptr().cast(), ld, rows, n)
    })
}

/// Sets row `[from, w)` to `x` (scalar until lane-aligned, then whole vectors).
#[inline(always)]
unsafe fn fill<V: SimdVec>(row: *mut V::Elem, from: usize, w: usize, x: V::Elem) {
    // SAFETY: the caller (`probs_body`) runs this with `V`'s instruction set enabled, `row`
    // valid for `w` elements and `w` a multiple of PAD (`bkp`, or `padded(c) ≤ bkp`), which
    // `lanes` divides: single stores at `j < w`, then whole vectors from a multiple of
    // `lanes`, which end exactly at `w`.
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

/// The buffers of [`online_softmax_t`] for its bodies: the score tile `st` (`rows` keys ×
/// `mqp`), its `mq` query columns' counts `cnt`, the statistics `m`, `l`, the transposed
/// accumulator `acct` (`dv` rows × `mqp`) and `alpha_out` (null when not wanted).
#[derive(Clone, Copy)]
struct OnlineT<E> {
    rows: usize,
    cnt: *const usize,
    mq: usize,
    st: *mut E,
    mqp: usize,
    m: *mut E,
    l: *mut E,
    acct: *mut E,
    dv: usize,
    alpha_out: *mut E,
}

/// The online-softmax update of one column block `[cb, cb + X::LANES)` (see
/// [`online_softmax_t`]).
#[inline(always)]
unsafe fn online_t_block<X: SimdVec>(cb: usize, t: OnlineT<X::Elem>) {
    let OnlineT {
        rows,
        cnt,
        mq,
        st,
        mqp,
        m,
        l,
        acct,
        dv,
        alpha_out,
    } = t;
    // SAFETY: the caller (`online_t_body`) runs this with `X`'s instruction set enabled, for a
    // block start `cb < mq` that is a multiple of `lanes`, with `mq = cnt.len() ≤ mqp` and
    // `mqp` a multiple of PAD, which `lanes` divides: the block's columns `cb .. cb + lanes`
    // end within `mqp`. So `cnt` is read at `min(cb + lanes, mq) − 1 < mq`, `st` at rows
    // `j < rows` (`rows·mqp` elements), `m`, `l` and `alpha_out` (if not null) at the block's
    // columns (`mqp` elements each), `acct` at rows `c < dv` (`dv·mqp` elements): the sizes of
    // `online_softmax_t`'s contract.
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
        // Four running maxima side by side, then combined: the same maximum (a NaN entry is
        // passed over by `max` in any order), without one long chain of dependent steps.
        let mut mx = [ninf; 4];
        let mut j = 0;
        while j + 4 <= rows {
            for (t, m) in mx.iter_mut().enumerate() {
                *m = X::load(st.add((j + t) * mqp + cb)).max(*m);
            }
            j += 4;
        }
        while j < rows {
            mx[0] = X::load(st.add(j * mqp + cb)).max(mx[0]);
            j += 1;
        }
        let mt = mx[0].max(mx[1]).max(mx[2].max(mx[3]));
        let m_old = X::load(m.add(cb));
        let m_new = mt.max(m_old);
        let shift = m_new.max(lowest);
        // m ← max(m, max_j s), l ← l·e^{m_old − m} + Σ_j e^{s − m}, acc ← acc·e^{m_old − m}
        let alpha = m_old.sub(shift).exp();
        let sum = efa_num::simd::bodies::exp_shift_strided::<X>(st.add(cb), mqp, rows, shift);
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
unsafe fn online_t_body<V: SimdVec, H: SimdVec<Elem = V::Elem>>(t: OnlineT<V::Elem>) {
    // SAFETY: the dispatcher's caller (`online_softmax_t`) guarantees the instruction sets of
    // `V` and `H` and its buffer sizes. Blocks start at `cb < mq`; `cb` is a multiple of `w`
    // (hence of `H::LANES`, which divides it) because only the last block may be a narrower
    // `H` one, so each block gets the aligned start `online_t_block` needs.
    unsafe {
        // Column blocks up to the last query; the last one in the narrower `H` when that
        // covers it. Columns past it are left as they are.
        let w = V::LANES;
        let mut cb = 0;
        while cb < t.mq {
            if H::LANES < w && t.mq - cb <= H::LANES {
                online_t_block::<H>(cb, t);
                cb += H::LANES;
            } else {
                online_t_block::<V>(cb, t);
                cb += w;
            }
        }
    }
}
efa_num::simd_tail_variants!(online_t_body, online_t_dd, (t: OnlineT<E>) -> ());

/// Forward online-softmax update on a transposed score tile `st` (`rows` keys × `mqp` queries,
/// `mqp` a multiple of [`PAD`]; masked entries already −∞; query column `r < cnt.len()` sees at
/// most the first `cnt[r]` key rows, `cnt` non-decreasing), vectorised across queries: per
/// query column, `m ← max(m, maxⱼ s)`, `l ← l·e^{m_old − m} + Σⱼ e^{s − m}`, the transposed
/// accumulator `accᵀ` (`dv` rows × `mqp`) is scaled by `e^{m_old − m}`, and `st` is replaced by
/// `Pᵀ = exp(st − m)` (0 where masked). With `alpha = Some(a)`, the factors `e^{m_old − m}`
/// are also stored in `a` (`mqp` entries), for an accumulator kept in another layout (pass
/// `dv = 0` to leave `acct` alone). Only the vector blocks covering the first `cnt.len()`
/// columns are touched (the same column tail as [`super::gemm`] with `n = cnt.len()`).
///
/// # Safety
/// `st` holds `rows·mqp`, `m`, `l` (and `alpha`) hold `mqp`, `acct` holds `dv·mqp` elements,
/// `cnt.len() ≤ mqp`, `mqp` is a multiple of [`PAD`]; `isa` supported.
pub unsafe fn online_softmax_t<T: Real>(
    isa: Isa,
    cnt: &[usize],
    (st, rows, mqp): (&mut [T], usize, usize),
    (m, l): (&mut [T], &mut [T]),
    (acct, dv): (&mut [T], usize),
    alpha: Option<&mut [T]>,
) {
    debug_assert!(
        mqp.is_multiple_of(PAD) && st.len() >= rows * mqp && m.len() >= mqp && l.len() >= mqp
    );
    debug_assert!(acct.len() >= dv * mqp);
    debug_assert!(alpha.as_ref().is_none_or(|a| a.len() >= mqp));
    let alpha = alpha.map_or(std::ptr::null_mut(), |a| a.as_mut_ptr());
    // SAFETY: the caller guarantees `isa` is supported and the buffer sizes, `cnt.len() ≤ mqp`
    // and `mqp` a multiple of PAD (this function's contract); the slices are distinct borrows,
    // and `E` is `T` itself, so the casts keep type and alignment.
    simd_by_kind!(T, E => unsafe {
        let t = OnlineT {
            rows,
            cnt: cnt.as_ptr(),
            mq: cnt.len(),
            st: st.as_mut_ptr().cast(),
            mqp,
            m: m.as_mut_ptr().cast(),
            l: l.as_mut_ptr().cast(),
            acct: acct.as_mut_ptr().cast(),
            dv,
            alpha_out: alpha.cast(),
        };
        online_t_dd::<E>(isa, t)
    })
}

/// `exp(x − lse)` in place on the `K` vectors `v0 .. v0 + K` of a row whose first `c`
/// entries are visible, formed side by side ([`SimdVec::exp_each`]: lane for lane the one
/// vector `exp`); a vector reaching past `c` reads its visible entries with the other lanes −∞
/// and is stored whole.
///
/// # Safety
/// `V`'s instruction set enabled; `row` valid for `(v0 + K)·LANES` elements, and vector `v0`
/// starts below `c` (so every vector holds a visible entry).
#[inline(always)]
unsafe fn row_exp<V: SimdVec, const K: usize>(row: *mut V::Elem, v0: usize, c: usize, vl: V) {
    // SAFETY: the caller guarantees the instruction set and `(v0 + K)·LANES` valid elements;
    // vector `v` reads its `min(LANES, c − v·LANES) ≥ 1` visible entries (a whole vector, or
    // `load_first` of fewer than LANES) and stores LANES elements inside that range.
    unsafe {
        let lanes = V::LANES;
        let ninf = V::Elem::NEG_INFINITY;
        let mut x = [vl; K];
        for (t, x) in x.iter_mut().enumerate() {
            let at = (v0 + t) * lanes;
            let v = if at + lanes <= c {
                V::load(row.add(at))
            } else {
                V::load_first(row.add(at), c - at, ninf)
            };
            *x = v.sub(vl);
        }
        for (t, e) in V::exp_each(x).into_iter().enumerate() {
            e.store(row.add((v0 + t) * lanes));
        }
    }
}

#[inline(always)]
unsafe fn probs_body<V: SimdVec>(
    mq: usize,
    s: *mut V::Elem,
    bkp: usize,
    cnt: *const usize,
    lse: *const V::Elem,
) -> usize {
    // SAFETY: the dispatcher's caller (`probabilities`) guarantees `V`'s instruction set, `mq`
    // rows of `bkp` elements at `s` with `bkp` a multiple of PAD, `mq` entries of `cnt` and
    // `lse`, and every `cnt[r] ≤ bkp`. So for row `r < mq` with `c ≥ 1` visible entries:
    // `row_exp` gets vectors `v0 .. v0 + K ≤ nv = ⌈c / lanes⌉`, each starting below `c`, and
    // `nv·lanes ≤ padded(c) ≤ bkp` (lanes divide PAD) elements of the row; the `hidden`
    // stores run from `nv·lanes`, a multiple of `lanes`, up to `w = min(padded(c), bkp)`, a
    // multiple of `lanes`; `fill` gets `w` and `bkp` as it needs.
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
            // exp(s − lse) on the vectors holding the visible entries, in groups of four side
            // by side (`row_exp`); the vector holding the last ones reads them with the rest
            // of its lanes −∞ (a masked load where there is one, instead of storing −∞
            // element by element and reloading the row, which stalls on store forwarding).
            // Vectors past it are exp(−∞ − lse).
            let lanes = V::LANES;
            let nv = c.div_ceil(lanes);
            let vl = V::splat(lse);
            let mut v0 = 0;
            while v0 + 4 <= nv {
                row_exp::<V, 4>(row, v0, c, vl);
                v0 += 4;
            }
            match nv - v0 {
                1 => row_exp::<V, 1>(row, v0, c, vl),
                2 => row_exp::<V, 2>(row, v0, c, vl),
                3 => row_exp::<V, 3>(row, v0, c, vl),
                _ => {}
            }
            let mut j = nv * lanes;
            if j < w {
                // exp(−∞ − lse): `lse` is not −∞ here, so the argument is −∞ (exp gives
                // exactly 0) unless `lse` is NaN; only then is the exponential formed.
                let hidden = if lse.is_nan() {
                    V::splat(ninf).sub(vl).exp()
                } else {
                    V::splat(V::Elem::ZERO)
                };
                while j < w {
                    hidden.store(row.add(j));
                    j += lanes;
                }
            }
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
/// Buffers sized `mq·bkp` (`s`) and `mq` (`cnt`, `lse`); `bkp` a multiple of [`PAD`] and every
/// `cnt[r] ≤ bkp`; `isa` supported.
pub unsafe fn probabilities<T: Real>(
    isa: Isa,
    mq: usize,
    s: &mut [T],
    bkp: usize,
    cnt: &[usize],
    lse: &[T],
) -> usize {
    debug_assert!(s.len() >= mq * bkp && cnt.len() >= mq && lse.len() >= mq);
    // SAFETY: the caller guarantees `isa` is supported, the buffer sizes, `bkp` a multiple of
    // PAD and `cnt[r] ≤ bkp` (this function's contract); `E` is `T` itself, so the casts keep
    // type and alignment.
    simd_by_kind!(T, E => unsafe {
        probs_d::<E>(isa, mq, s.as_mut_ptr().cast(), bkp, cnt.as_ptr(), lse.as_ptr().cast())
    })
}
