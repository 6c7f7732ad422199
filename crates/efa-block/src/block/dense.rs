//! Row-major building blocks of the block op: weights packed once per call, the
//! [`efa_attn::micro::gemm_checked`] kernel, and the per-row steps
//! (bias and residual initialisation, column sums, layer norm and its backward).
//!
//! Activations live in row-major buffers whose row stride is the width rounded up to the
//! kernel's padding ([`padded`]); the padding columns are kept at zero by every writer, so a
//! buffer can serve as a right-hand operand (the kernel reads whole padded rows).

use efa_attn::micro::{gemm_checked, gemm_checked_bias_into, padded};
use efa_num::pool::Buf;
use efa_num::simd::Isa;
use efa_num::Real;
use std::mem::MaybeUninit;

/// A matrix copied into a padded row-major buffer (`rows × ld`, zero padding columns): the
/// right-hand operand layout of [`mm`].
#[derive(Clone, Debug)]
pub(super) struct Packed<T> {
    pub(super) data: Vec<T>,
    pub(super) ld: usize,
}

impl<T: Real> Packed<T> {
    /// `w` (`rows × cols`, row-major) with rows padded to `padded(cols)`.
    pub(super) fn new(w: &[T], rows: usize, cols: usize) -> Self {
        Self::from_fn(rows, cols, |r, c| w[r * cols + c])
    }

    /// `wᵀ` for `w` `rows × cols`: `cols × padded(rows)`.
    pub(super) fn transposed(w: &[T], rows: usize, cols: usize) -> Self {
        Self::from_fn(cols, rows, |r, c| w[c * cols + r])
    }

    /// `[a | b]` for `a`, `b` both `rows × cols`: `rows × padded(2·cols)`.
    pub(super) fn side_by_side(a: &[T], b: &[T], rows: usize, cols: usize) -> Self {
        Self::from_fn(rows, 2 * cols, |r, c| {
            if c < cols {
                a[r * cols + c]
            } else {
                b[r * cols + c - cols]
            }
        })
    }

    fn from_fn(rows: usize, cols: usize, f: impl Fn(usize, usize) -> T) -> Self {
        let ld = padded(cols.max(1));
        let mut data = vec![T::ZERO; rows * ld];
        for r in 0..rows {
            for c in 0..cols {
                data[r * ld + c] = f(r, c);
            }
        }
        Packed { data, ld }
    }
}

/// `C ← A·B` (`acc = false`) or `C ← C + A·B` (`acc = true`) on the micro kernel: `A` `m × k`
/// at `a[i·rsa + p·csa]` (`strides = (rsa, csa)`), `B` `k × n` with rows at `b[p·ldb]`, `C`
/// rows at `c[i·ldc]`. `B` and `C` rows are read and written up to `padded(n)` columns (the
/// padding of `C` receives `A·(B's padding)`, zero for zero-padded operands). Sums run over `p`
/// in index order.
pub(super) fn mm<T: Real>(
    isa: Isa,
    mnk: (usize, usize, usize),
    (a, strides): (&[T], (usize, usize)),
    (b, ldb): (&[T], usize),
    (c, ldc): (&mut [T], usize),
    acc: bool,
) {
    gemm_checked(isa, mnk, (a, strides), (b, ldb), (c, ldc), acc, T::ONE);
}

/// `C ← A·B + bias` row by row ([`gemm_checked_bias_into`]: the bits of [`mm`] followed by a
/// pass adding the bias, as a linear layer's product and broadcast sum, without that pass) into
/// `c` not yet written, exactly `m × ldc` elements: the columns `[0, n)` from the product, zeros
/// on the padding; returns them initialised. `A` is read as in [`mm`]; `bias` holds
/// `padded(n)` elements (see [`padded_bias`]).
pub(super) fn mm_bias_into<'a, T: Real>(
    isa: Isa,
    (m, n, k): (usize, usize, usize),
    (a, strides): (&[T], (usize, usize)),
    b: &Packed<T>,
    bias: &[T],
    (c, ldc): (&'a mut [MaybeUninit<T>], usize),
) -> &'a mut [T] {
    assert!(
        c.len() == m * ldc && ldc >= padded(n.max(1)),
        "mm_bias_into: sizes"
    );
    gemm_checked_bias_into(
        isa,
        (m, n, k),
        (a, strides),
        (&b.data, b.ld),
        bias,
        (c, ldc),
    );
    for row in c.chunks_exact_mut(ldc.max(1)) {
        for y in &mut row[n..] {
            y.write(T::ZERO);
        }
    }
    // SAFETY: the product wrote columns [0, n) of every row (all `m` rows of `ldc` cover `c`),
    // the loop above the rest.
    unsafe { &mut *(c as *mut [MaybeUninit<T>] as *mut [T]) }
}

/// `bias` followed by zeros up to `padded(len)` (the bias row of [`mm_bias_into`]).
pub(super) fn padded_bias<T: Real>(bias: &[T]) -> Vec<T> {
    let mut v = bias.to_vec();
    v.resize(ld(bias.len()), T::ZERO);
    v
}

/// `c[i][j] ← (c[i][j] + bias[j]) + add[i][j]` for `j < bias.len()`, rows `i < rows`, the
/// padding left as it is: a product's bias and residual added in the composition's order (the
/// fallback of `gemm_checked_from`'s one pass); `add` is a row-major matrix with its row
/// stride.
pub(super) fn add_bias_rows<T: Real>(
    c: &mut [T],
    ldc: usize,
    rows: usize,
    bias: &[T],
    (add, lda): (&[T], usize),
) {
    let n = bias.len();
    for i in 0..rows {
        let row = &mut c[i * ldc..i * ldc + n];
        for ((y, &b), &x) in row.iter_mut().zip(bias).zip(&add[i * lda..i * lda + n]) {
            *y = (*y + b) + x;
        }
    }
}

/// `acc[j] += Σ_{i<rows} c[i][j]` for `j < acc.len()`, rows in order: the reference of
/// `norm::col_sums`.
#[cfg(test)]
pub(super) fn col_sums<T: Real>(acc: &mut [T], c: &[T], ldc: usize, rows: usize) {
    for i in 0..rows {
        for (a, &x) in acc.iter_mut().zip(&c[i * ldc..]) {
            *a += x;
        }
    }
}

/// Layer norm of one row `x` (`d = g.len()` entries): `μ = Σx/d`, `σ² = Σ(x − μ)²/d`,
/// `r = 1/√(σ² + ε)`, `x̂ = (x − μ)·r` (into `xhat`), `y = x̂∘g + b` (into `y`); returns `r`.
/// The tape's `layer_norm` formulas; the two sums run on the SIMD kernels (several partial
/// sums, so they may differ from a sequential sum in the last bits). The reference of
/// `norm::ln_rows`.
#[cfg(test)]
pub(super) fn ln_row<T: Real>(
    isa: Isa,
    x: &[T],
    g: &[T],
    b: &[T],
    eps: T,
    xhat: &mut [T],
    y: &mut [T],
) -> T {
    let d = g.len();
    let (x, xhat, y, b) = (&x[..d], &mut xhat[..d], &mut y[..d], &b[..d]);
    let inv_d = T::ONE / T::from_usize(d);
    let mu = efa_num::simd::sum_with(isa, x) * inv_d;
    for (c, &v) in xhat.iter_mut().zip(x) {
        *c = v - mu;
    }
    let var = efa_num::simd::dot_with(isa, xhat, xhat) * inv_d;
    let r = T::ONE / (var + eps).sqrt();
    for (((h, o), &gk), &bk) in xhat.iter_mut().zip(y.iter_mut()).zip(g).zip(b) {
        *h *= r;
        *o = *h * gk + bk;
    }
    r
}

/// Backward of [`ln_row`] in place for the cotangent `row` of one row: `dg += dy∘x̂`,
/// `db += dy`, and `row ← dx = r·(ĝ − mean(ĝ) − x̂·mean(ĝ∘x̂))` with `ĝ = dy∘g`. The
/// reference of `norm::ln_back_rows`.
#[cfg(test)]
pub(super) fn ln_back_in_place<T: Real>(
    isa: Isa,
    row: &mut [T],
    xhat: &[T],
    r: T,
    g: &[T],
    dg: &mut [T],
    db: &mut [T],
) {
    let d = g.len();
    let (row, xhat, dg, db) = (&mut row[..d], &xhat[..d], &mut dg[..d], &mut db[..d]);
    let inv_d = T::ONE / T::from_usize(d);
    // forward computed y = x̂∘g + b, so dg += dy∘x̂, db += dy, dx̂ = ĝ = dy∘g (in place)
    for ((((dy, &h), &gk), dgk), dbk) in row.iter_mut().zip(xhat).zip(g).zip(dg).zip(db) {
        *dgk += *dy * h;
        *dbk += *dy;
        *dy *= gk;
    }
    // forward computed x̂ = (x − μ)·r, so dx = r·(dx̂ − mean(dx̂) − x̂·mean(dx̂∘x̂))
    let mgh = efa_num::simd::sum_with(isa, row) * inv_d;
    let mghx = efa_num::simd::dot_with(isa, row, xhat) * inv_d;
    for (v, &h) in row.iter_mut().zip(xhat) {
        *v = r * (*v - mgh - h * mghx);
    }
}

/// `padded(n)` for widths of at least one (0 stays one padded block, so strides are never 0).
pub(super) fn ld(n: usize) -> usize {
    padded(n.max(1))
}

/// At least `n` elements of `v` (grown with zeros), as a slice of exactly `n`.
pub(super) fn grow<T: Real>(v: &mut Buf<T>, n: usize) -> &mut [T] {
    v.grow(n, T::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u64) -> Vec<f64> {
        efa_check::unit_values(seed)
            .take(n)
            .map(|u| u * 4.0 - 2.0)
            .collect()
    }

    fn same_as_mm_then_bias<T: Real>() {
        for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
            for (m, n, k) in [
                (1, 1, 1),
                (5, 7, 3),
                (13, 16, 32),
                (44, 64, 32),
                (37, 33, 9),
                (3, 0, 4),
                (4, 5, 0),
            ] {
                let ldc = ld(n) + 16;
                let seed = (m * 10_000 + n * 100 + k) as u64;
                let cast = |v: Vec<f64>| v.into_iter().map(T::from_f64).collect::<Vec<T>>();
                let a = cast(values(m * k.max(1), seed));
                let w = cast(values(k * n, seed + 1));
                let bias = cast(values(n, seed + 2));
                let packed = Packed::new(&w, k, n);
                // The product, then the bias added (zeros on the padding).
                let mut want = vec![T::ZERO; m * ldc];
                mm(
                    isa,
                    (m, n, k),
                    (&a, (k, 1)),
                    (&packed.data, packed.ld),
                    (&mut want, ldc),
                    false,
                );
                for row in want.chunks_exact_mut(ldc.max(1)) {
                    for (y, &b) in row.iter_mut().zip(&bias) {
                        *y += b;
                    }
                    row[n..].fill(T::ZERO);
                }
                let mut got = vec![MaybeUninit::<T>::uninit(); m * ldc];
                let pb = padded_bias(&bias);
                let got = mm_bias_into(isa, (m, n, k), (&a, (k, 1)), &packed, &pb, (&mut got, ldc));
                let bits = |x: &[T]| x.iter().map(|v| v.to_f64().to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(got), bits(&want), "{isa:?} m {m} n {n} k {k}");
            }
        }
    }

    #[test]
    fn bias_folded_products_give_the_bits_of_the_product_then_the_bias() {
        same_as_mm_then_bias::<f32>();
        same_as_mm_then_bias::<f64>();
    }
}
