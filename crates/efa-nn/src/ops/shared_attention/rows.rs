//! The op's row kernels: K-wide dot products and updates, a directly computed softmax row and
//! the register-blocked running sums (leave-one-out and plain).

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
/// takes `axpy` column by column (the same values).
#[inline(always)]
pub(super) fn combine<T: Real>(w: &[T], x: &[T], stride: usize, out: &mut [T]) {
    let len = out.len();
    let padded = len.div_ceil(L) * L;
    if w.is_empty() || x.len() < (w.len() - 1) * stride + padded {
        out.fill(T::ZERO);
        for (c, &wc) in w.iter().enumerate() {
            axpy(wc, &x[c * stride..c * stride + len], out);
        }
        return;
    }
    for j0 in (0..len).step_by(L) {
        let mut acc = [T::ZERO; L];
        for (c, &wc) in w.iter().enumerate() {
            let xs: &[T; L] = x[c * stride + j0..][..L].try_into().expect("L");
            for l in 0..L {
                acc[l] += wc * xs[l];
            }
        }
        let n = L.min(len - j0);
        out[j0..j0 + n].copy_from_slice(&acc[..n]);
    }
}

/// `y ← y + α·x`.
#[inline(always)]
pub(super) fn axpy<T: Real>(alpha: T, x: &[T], y: &mut [T]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y += alpha * x;
    }
}

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
    combine(q, ktr, n, p);
    if let Some(x) = p.get_mut(tg) {
        *x = dot(q, kt);
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
}
