//! The op's row kernels: K-wide dot products and updates, a directly computed softmax row and
//! the register-blocked running sums (leave-one-out and plain).

use efa_num::sum::dot2_step;
use efa_num::Real;

/// `Σᵢ aᵢ·bᵢ` with eight accumulators (lane `l` takes elements `l, l + 8, …`), summed in a
/// fixed tree, then the tail in order: the same bits on every instruction set.
#[inline(always)]
pub(super) fn dot<T: Real>(a: &[T], b: &[T]) -> T {
    const L: usize = 8;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [T::ZERO; L];
    let (ca, cb) = (a.chunks_exact(L), b.chunks_exact(L));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        // Whole blocks of eight as arrays: one vector multiply and add per block.
        let (x, y): (&[T; L], &[T; L]) = (x.try_into().expect("8"), y.try_into().expect("8"));
        let mut p = [T::ZERO; L];
        for l in 0..L {
            p[l] = x[l] * y[l];
        }
        for l in 0..L {
            acc[l] += p[l];
        }
    }
    let mut tail = T::ZERO;
    for (&x, &y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7])) + tail
}

/// Rows `x(j)` (`K` wide) weighted by `w(j)`, `j < len`: `out[j] = Σ_{i≠j} w(i)·x(i)` for every
/// `j` (`out` `[len, K]`), from the suffix sums (stored first) and the prefix sums (added in
/// front), each a running sum in `j` order; `out[j] = pre + suf`, never a difference. The
/// running sums stay in registers [`L`] columns at a time.
#[inline(always)]
pub(super) fn loo_rows<'a, T: Real + 'a>(
    len: usize,
    kd: usize,
    w: impl Fn(usize) -> T,
    x: impl Fn(usize) -> &'a [T],
    out: &mut [T],
) {
    let mut c = 0;
    while c + L <= kd {
        let mut acc = [T::ZERO; L];
        for j in (0..len).rev() {
            let o: &mut [T; L] = (&mut out[j * kd + c..j * kd + c + L])
                .try_into()
                .expect("L");
            *o = acc;
            let (wj, xj): (T, &[T; L]) = (w(j), x(j)[c..c + L].try_into().expect("L"));
            for l in 0..L {
                acc[l] += wj * xj[l];
            }
        }
        acc = [T::ZERO; L];
        for j in 0..len {
            let o: &mut [T; L] = (&mut out[j * kd + c..j * kd + c + L])
                .try_into()
                .expect("L");
            for l in 0..L {
                o[l] = acc[l] + o[l];
            }
            let (wj, xj): (T, &[T; L]) = (w(j), x(j)[c..c + L].try_into().expect("L"));
            for l in 0..L {
                acc[l] += wj * xj[l];
            }
        }
        c += L;
    }
    // Columns past the last whole block, one at a time.
    for c in c..kd {
        let mut a = T::ZERO;
        for j in (0..len).rev() {
            out[j * kd + c] = a;
            a += w(j) * x(j)[c];
        }
        a = T::ZERO;
        for j in 0..len {
            out[j * kd + c] = a + out[j * kd + c];
            a += w(j) * x(j)[c];
        }
    }
}

/// Columns per register block of [`loo_rows`] and [`add_rows`].
pub(super) const L: usize = 16;

/// `out ← out + Σ_j w(j)·x(j)` over `j < len` in `j` order (per element the same sums as
/// `axpy` row by row), the running sums in registers [`L`] columns at a time.
#[inline(always)]
pub(super) fn add_rows<'a, T: Real + 'a>(
    len: usize,
    w: impl Fn(usize) -> T,
    x: impl Fn(usize) -> &'a [T],
    out: &mut [T],
) {
    let whole = out.len() / L * L;
    let (blocks, rest) = out.split_at_mut(whole);
    for (b, o) in blocks.chunks_exact_mut(L).enumerate() {
        let o: &mut [T; L] = o.try_into().expect("L");
        let mut acc = *o;
        for j in 0..len {
            let (wj, xj): (T, &[T; L]) = (w(j), x(j)[b * L..b * L + L].try_into().expect("L"));
            for l in 0..L {
                acc[l] += wj * xj[l];
            }
        }
        *o = acc;
    }
    for (c, o) in rest.iter_mut().enumerate() {
        for j in 0..len {
            *o += w(j) * x(j)[whole + c];
        }
    }
}

/// `out[j] = Σ_c w[c]·x[c·stride + j]` for `j < out.len()`: per element the chain of [`axpy`]
/// applied column by column from zero (`0 + w₀x₀ + w₁x₁ + …`, each a product, then a sum), in
/// blocks of [`L`] outputs held in registers. The last block reads up to `L − 1` elements past
/// `out.len()` in each row of `x` (their lanes are computed and dropped), so the fast path
/// needs `x` to hold `(w.len() − 1)·stride` plus `out.len()` rounded up to `L`; a shorter `x`
/// takes the columns one at a time (the same values).
#[inline(always)]
pub(super) fn combine<T: Real>(w: &[T], x: &[T], stride: usize, out: &mut [T]) {
    columns(
        w,
        x,
        stride,
        out,
        T::ZERO,
        |wc, xc, acc| acc + wc * xc,
        |s| s,
    );
}

/// Scores `out[j] = Σ_c q[c]·x[c·stride + j]`, as [`combine`] but each step one fused
/// multiply-add (`fma(q_c, x_c, acc)`, one rounding per term): the scores of sharp attention
/// cancel products far larger than themselves, and each rounding moves a probability. In f64
/// the sums are compensated ([`efa_num::sum::dot2_step`]), as every f64 product is.
#[inline(always)]
pub(super) fn scores<T: Real>(w: &[T], x: &[T], stride: usize, out: &mut [T]) {
    if efa_num::sum::compensated::<T>() {
        let start = (T::ZERO, T::ZERO);
        columns(w, x, stride, out, start, dot2_step, |(s, e)| s + e);
    } else {
        columns(
            w,
            x,
            stride,
            out,
            T::ZERO,
            |wc, xc, acc| wc.mul_add(xc, acc),
            |s| s,
        );
    }
}

/// The loops of [`combine`] and [`scores`]: `acc ← step(w[c], x[c][j], acc)` for every column
/// `c` in order, from `start`, then `out[j] = finish(acc)`.
#[inline(always)]
fn columns<T: Real, A: Copy>(
    w: &[T],
    x: &[T],
    stride: usize,
    out: &mut [T],
    start: A,
    step: impl Fn(T, T, A) -> A,
    finish: impl Fn(A) -> T,
) {
    let len = out.len();
    let padded = len.div_ceil(L) * L;
    if w.is_empty() || x.len() < (w.len() - 1) * stride + padded {
        for (j, o) in out.iter_mut().enumerate() {
            let acc = w
                .iter()
                .enumerate()
                .fold(start, |acc, (c, &wc)| step(wc, x[c * stride + j], acc));
            *o = finish(acc);
        }
        return;
    }
    for j0 in (0..len).step_by(L) {
        let mut acc = [start; L];
        for (c, &wc) in w.iter().enumerate() {
            let xs: &[T; L] = x[c * stride + j0..][..L].try_into().expect("L");
            for l in 0..L {
                acc[l] = step(wc, xs[l], acc[l]);
            }
        }
        let n = L.min(len - j0);
        for (o, &a) in out[j0..j0 + n].iter_mut().zip(&acc) {
            *o = finish(a);
        }
    }
}

/// One score `Σ_c q[c]·k[c]` with the bits of [`scores`] (fused multiply-adds in `c` order;
/// compensated in f64).
#[inline(always)]
pub(super) fn score1<T: Real>(q: &[T], k: &[T]) -> T {
    let terms = q.iter().zip(k);
    if efa_num::sum::compensated::<T>() {
        let (s, e) = terms.fold((T::ZERO, T::ZERO), |acc, (&a, &b)| dot2_step(a, b, acc));
        s + e
    } else {
        terms.fold(T::ZERO, |acc, (&a, &b)| a.mul_add(b, acc))
    }
}

/// `y ← y + α·x`.
#[inline(always)]
pub(super) fn axpy<T: Real>(alpha: T, x: &[T], y: &mut [T]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y += alpha * x;
    }
}

/// That the rows are sixteen `f32` wide and AVX-512 runs (only [`k16`] makes one with
/// `on = true`): then [`dot_k`], [`axpy_k`] and [`mix_k`] take one vector register per row.
#[derive(Clone, Copy, Debug)]
pub(super) struct K16 {
    on: bool,
}

/// [`K16`] for rows of `kd` elements of `T` under the instruction set `isa`: on for `f32`,
/// `kd = 16` and AVX-512 selected and present.
#[inline(always)]
pub(super) fn k16<T: Real>(isa: efa_num::simd::Isa, kd: usize) -> K16 {
    use efa_num::simd::Isa;
    K16 {
        on: cfg!(target_arch = "x86_64")
            && kd == 16
            && isa == Isa::Avx512
            && isa.is_supported()
            && is_f32::<T>(),
    }
}

/// Whether `T` is `f32` (`Real` is `f32` or `f64`).
#[inline(always)]
fn is_f32<T: Real>() -> bool {
    use efa_num::simd::{elem_kind, ElemKind};
    elem_kind::<T>() == ElemKind::F32
}

/// [`dot`] (the same bits); with `k16` on (see [`k16`]), `T = f32` and both rows sixteen
/// long, in one AVX-512 register: the eight accumulators are the two halves' sums
/// `(0 + pₗ) + pₗ₊₈`, then the same tree.
#[inline(always)]
pub(super) fn dot_k<T: Real>(k16: K16, a: &[T], b: &[T]) -> T {
    #[cfg(target_arch = "x86_64")]
    if k16.on && is_f32::<T>() && a.len() == 16 && b.len() == 16 {
        // SAFETY: `k16.on` holds only with AVX-512 present (see `k16`), `T` is `f32`, and both
        // rows hold 16.
        let d = unsafe { x86::dot16(a.as_ptr().cast(), b.as_ptr().cast()) };
        return T::from_f64(f64::from(d));
    }
    let _ = k16;
    dot(a, b)
}

/// [`axpy`] (the same bits); with `k16` on, `T = f32` and both rows sixteen long, in one
/// AVX-512 register.
#[inline(always)]
pub(super) fn axpy_k<T: Real>(k16: K16, alpha: T, x: &[T], y: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if k16.on && is_f32::<T>() && x.len() == 16 && y.len() == 16 {
        // SAFETY: as in `dot_k`; `y` is a distinct borrow of 16.
        unsafe {
            x86::axpy16(
                alpha.to_f64() as f32,
                x.as_ptr().cast(),
                y.as_mut_ptr().cast(),
            )
        };
        return;
    }
    let _ = k16;
    axpy(alpha, x, y)
}

/// `out = r·a + p·v` element by element (two products, then their sum); with `k16` on,
/// `T = f32` and rows sixteen long, in one AVX-512 register (the same bits).
#[inline(always)]
pub(super) fn mix_k<T: Real>(k16: K16, (r, a): (T, &[T]), (p, v): (T, &[T]), out: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if k16.on && is_f32::<T>() && a.len() == 16 && v.len() == 16 && out.len() == 16 {
        // SAFETY: as in `dot_k`; `out` is a distinct borrow of 16.
        unsafe {
            x86::mix16(
                (r.to_f64() as f32, a.as_ptr().cast()),
                (p.to_f64() as f32, v.as_ptr().cast()),
                out.as_mut_ptr().cast(),
            )
        };
        return;
    }
    let _ = k16;
    for ((o, &a), &v) in out.iter_mut().zip(a).zip(v) {
        *o = r * a + p * v;
    }
}

#[cfg(target_arch = "x86_64")]
use efa_num::simd::row16 as x86;

/// The softmax row of query `q` (one head, `K = q.len()`) over `len` keys: the base keys
/// transposed in `ktr` (`[K, n]`, key `j` in column `j`) with key `tg` replaced by `kt`;
/// `p[j]` for `j < len` (scores along the keys, their maximum, `exp`, then `1/Σ` in order).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn direct_probs<T: Real>(
    isa: efa_num::simd::Isa,
    q: &[T],
    ktr: &[T],
    n: usize,
    len: usize,
    (tg, kt): (usize, &[T]),
    scale: T,
    p: &mut [T],
) {
    let p = &mut p[..len];
    scores(q, ktr, n, p);
    if let Some(x) = p.get_mut(tg) {
        *x = score1(q, kt);
    }
    let mut m = T::NEG_INFINITY;
    for x in p.iter_mut() {
        *x *= scale;
        if *x > m {
            m = *x;
        }
    }
    for x in p.iter_mut() {
        *x -= m;
    }
    efa_num::simd::exp_slice_with(isa, p);
    let mut z = T::ZERO;
    for &x in p.iter() {
        z += x;
    }
    let inv = T::ONE / z;
    for x in p.iter_mut() {
        *x *= inv;
    }
}

/// `out[j] = Σ_{i≠j} x[i]` for `j < x.len()`: the suffix sum stored first, then the prefix sum
/// added in front (the scalar companion of [`loo_rows`]).
#[inline(always)]
pub(super) fn loo_scalars<T: Real>(x: &[T], out: &mut [T]) {
    let mut z = T::ZERO;
    for (o, &v) in out.iter_mut().zip(x).rev() {
        *o = z;
        z += v;
    }
    z = T::ZERO;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = z + *o;
        z += v;
    }
}

#[cfg(test)]
mod tests {
    use super::{axpy, combine, L};
    use efa_num::Real;

    /// Both paths of `combine` (padded rows read in whole blocks, and `axpy` column by column
    /// for an `x` without the padding) give the bits of `axpy` column by column from zero.
    fn same_as_axpy<T: Real>() {
        let mut u = efa_check::unit_values(7);
        let mut next = || T::from_f64(u.next().expect("endless") * 4.0 - 2.0);
        for len in [1, 5, L - 1, L, L + 1, 44] {
            for k in [1, 3, 16] {
                let stride = len + 3;
                let w: Vec<T> = (0..k).map(|_| next()).collect();
                let x: Vec<T> = (0..(k - 1) * stride + len.div_ceil(L) * L)
                    .map(|_| next())
                    .collect();
                let mut want = vec![T::ZERO; len];
                for (c, &wc) in w.iter().enumerate() {
                    axpy(wc, &x[c * stride..c * stride + len], &mut want);
                }
                let bits = |v: &[T]| v.iter().map(|a| a.to_f64().to_bits()).collect::<Vec<_>>();
                for short in [false, true] {
                    let xs = if short {
                        &x[..(k - 1) * stride + len]
                    } else {
                        &x[..]
                    };
                    let mut got = vec![T::from_f64(9.0); len];
                    combine(&w, xs, stride, &mut got);
                    assert_eq!(bits(&got), bits(&want), "len {len} k {k} short {short}");
                }
            }
        }
    }

    #[test]
    fn combine_gives_the_bits_of_axpy_by_columns() {
        same_as_axpy::<f32>();
        same_as_axpy::<f64>();
    }

    /// The f64 scores (both paths of `scores`, and `score1`) are the exact sums rounded within
    /// the compensated bound `u·|Σ| + γₖ²·Σ|q·x|` on scores that cancel to ~1e-11 of their
    /// terms (the first block's scores at sharp weights cancel products far larger than
    /// themselves), where one fused multiply-add per term misses it.
    #[test]
    fn f64_scores_are_compensated_sums() {
        use super::{score1, scores};
        use efa_num::Dd;
        let mut u = efa_check::unit_values(5);
        let mut next = || u.next().expect("endless") * 2.0 - 1.0;
        let (k, len) = (32, 37);
        let stride = len + 5;
        // Terms in cancelling pairs: column c + k/2 repeats column c's query, negated key,
        // perturbed by ~1e-11.
        let h = k / 2;
        let w: Vec<f64> = (0..k)
            .map(|c| if c < h { 1e3 * next() } else { 0.0 })
            .collect();
        let w: Vec<f64> = (0..k)
            .map(|c| if c < h { w[c] } else { w[c - h] })
            .collect();
        let mut x = vec![0.0; (k - 1) * stride + len.div_ceil(L) * L];
        for c in 0..h {
            for j in 0..len {
                let v = 1e3 * next();
                x[c * stride + j] = v;
                x[(c + h) * stride + j] = -v * (1.0 + 1e-11 * next());
            }
        }
        let (eps, gamma) = (f64::EPSILON / 2.0, k as f64 * f64::EPSILON / 2.0);
        let mut plain_misses = 0;
        let mut got = vec![9.0; len];
        scores(&w, &x, stride, &mut got);
        let mut got_short = vec![9.0; len];
        scores(&w, &x[..(k - 1) * stride + len], stride, &mut got_short);
        for j in 0..len {
            let col: Vec<f64> = (0..k).map(|c| x[c * stride + j]).collect();
            let (mut exact, mut mag, mut plain) = (Dd::ZERO, 0.0, 0.0f64);
            for (&a, &b) in w.iter().zip(&col) {
                exact += Dd::from_f64(a) * Dd::from_f64(b);
                mag += (a * b).abs();
                plain = a.mul_add(b, plain);
            }
            let exact = exact.to_f64();
            let tol = 2.0 * eps * exact.abs() + gamma * gamma * mag;
            assert!(mag > 1e6 * exact.abs(), "score {j} does not cancel");
            plain_misses += usize::from((plain - exact).abs() > tol);
            for (what, v) in [
                ("scores", got[j]),
                ("short", got_short[j]),
                ("score1", score1(&w, &col)),
            ] {
                assert!(
                    (v - exact).abs() <= tol,
                    "{what} {j}: {v:e}, exact {exact:e}"
                );
            }
        }
        assert!(
            plain_misses > len / 2,
            "plain sums meet the bound: the data do not test it"
        );
    }

    /// The sixteen-wide AVX-512 rows give the bits of the generic `dot`, `axpy` and `r·a + p·v`,
    /// zeros of either sign, infinities and NaN included.
    #[test]
    fn k16_rows_give_the_bits_of_the_generic_rows() {
        use super::{axpy_k, dot, dot_k, k16, mix_k};
        let isa = efa_num::simd::Isa::Avx512;
        assert!(!k16::<f64>(isa, 16).on && !k16::<f32>(isa, 8).on);
        assert!(!k16::<f32>(efa_num::simd::Isa::Avx2, 16).on);
        let on = k16::<f32>(isa, 16);
        if !on.on {
            eprintln!("no AVX-512 here: the sixteen-wide rows are not used, nothing to compare");
            return;
        }
        let off = super::K16 { on: false };
        let mut u = efa_check::unit_values(11);
        let special = [
            0.0f32,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-40,
            -3e38,
        ];
        for case in 0..400 {
            let mut row = |k: usize| -> Vec<f32> {
                (0..16)
                    .map(|c| {
                        let x = u.next().expect("endless");
                        if case % 4 == 0 && (c + k + case).is_multiple_of(5) {
                            special[(c * 7 + case + k) % special.len()]
                        } else if case % 4 == 1 && c % 3 == 0 {
                            -0.0
                        } else {
                            (x * 8.0 - 4.0) as f32
                        }
                    })
                    .collect()
            };
            let (a, b, y0) = (row(0), row(1), row(2));
            let (want, got) = (dot(&a, &b), dot_k(on, &a, &b));
            let same = got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan());
            assert!(same, "dot, case {case}: {got} vs {want} for {a:?} {b:?}");
            let alpha = a[case % 16];
            let (mut yw, mut yg) = (y0.clone(), y0.clone());
            super::axpy(alpha, &b, &mut yw);
            axpy_k(on, alpha, &b, &mut yg);
            // Bits, every NaN as one (Rust does not fix a NaN's payload).
            let bits = |v: &[f32]| {
                v.iter()
                    .map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() })
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(&yg), bits(&yw), "axpy, case {case}");
            let (r, p) = (b[case % 16], y0[(case + 3) % 16]);
            let (mut mw, mut mg) = (vec![9.0f32; 16], vec![9.0f32; 16]);
            mix_k(off, (r, &a), (p, &y0), &mut mw);
            mix_k(on, (r, &a), (p, &y0), &mut mg);
            let by_hand: Vec<f32> = a.iter().zip(&y0).map(|(&x, &v)| r * x + p * v).collect();
            assert_eq!(bits(&mw), bits(&by_hand), "mix, generic, case {case}");
            assert_eq!(bits(&mg), bits(&mw), "mix, case {case}");
        }
    }
}
