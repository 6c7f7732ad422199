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
/// running sums stay in registers eight columns at a time.
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
/// `axpy` row by row), the running sums in registers eight columns at a time.
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
    p.fill(T::ZERO);
    for (c, &qc) in q.iter().enumerate() {
        axpy(qc, &ktr[c * n..c * n + len], p);
    }
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
