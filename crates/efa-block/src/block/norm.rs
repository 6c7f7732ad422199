//! The block's layer norms over whole chunks of rows, one dispatched call per chunk: forward
//! ([`ln_rows_into`], into unwritten buffers) and backward ([`ln_back_rows`]), and the bias
//! gradients' column sums ([`col_sums`]). Each row runs exactly the arithmetic of the per-row
//! formulas (`dense::ln_row`, `dense::ln_back_in_place`, kept as the tests' reference, with the
//! row loop `dense::col_sums`): the two sums per row on the same `efa_num::simd` bodies as
//! `sum_with` / `dot_with`, every element-wise step and every running sum over rows with the
//! operations of the reference in its order (vectorised across columns or interleaved across
//! rows), so the values are the same bits; what goes is the per-row dispatch of those calls
//! and the chains of stores and reloads through the parameter gradients.

use efa_num::simd::{bodies, Isa, SimdVec};
use efa_num::{simd_by_kind, simd_variants, Real};
use std::mem::MaybeUninit;

#[cfg(target_arch = "x86_64")]
use efa_num::simd::ln16 as lanes;

/// Whether `V` is the AVX-512 f32 vector (sixteen lanes of four bytes: only that variant is
/// compiled with AVX-512) and rows of width `d` take the sixteen-row kernels.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn lanes16<V: SimdVec>(d: usize) -> bool {
    V::LANES == 16 && std::mem::size_of::<V::Elem>() == 4 && lanes::fits(d)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn ln_body<V: SimdVec>(
    rows: usize,
    d: usize,
    x: *const V::Elem,
    ldx: usize,
    g: *const V::Elem,
    b: *const V::Elem,
    eps: V::Elem,
    xhat: *mut V::Elem,
    ldh: usize,
    y: *mut V::Elem,
    ldy: usize,
    rstd: *mut V::Elem,
) {
    // SAFETY: the dispatcher's caller guarantees `V`'s instruction set and rows `0..rows` of
    // width `d` at `x`, `xhat`, `y` (strides `ldx`, `ldh`, `ldy`), `d` elements at `g`, `b` and
    // `rows` at `rstd`; every access below stays inside those rows (the sixteen-row path only
    // for `V` = AVX-512 f32, see `lanes16`).
    unsafe {
        // Four rows at a time, their steps interleaved (each row is one long chain of
        // dependent reductions, a square root and a division; the other rows' steps fill its
        // waits), then the rest one at a time. Each row's operations are unchanged.
        let mut i = 0;
        #[cfg(target_arch = "x86_64")]
        if lanes16::<V>(d) {
            // Sixteen rows reduced side by side (AVX-512 in f32; the same bits).
            let at = |p: *const V::Elem, r: usize, ld: usize| p.add(r * ld).cast::<f32>();
            while i + lanes::ROWS <= rows {
                lanes::ln16(
                    d,
                    at(x, i, ldx),
                    ldx,
                    g.cast(),
                    b.cast(),
                    *(&eps as *const V::Elem).cast::<f32>(),
                    at(xhat, i, ldh).cast_mut(),
                    ldh,
                    at(y, i, ldy).cast_mut(),
                    ldy,
                    rstd.add(i).cast(),
                );
                i += lanes::ROWS;
            }
        }
        while i + 4 <= rows {
            ln_group::<V, 4>(i, d, x, ldx, g, b, eps, xhat, ldh, y, ldy, rstd);
            i += 4;
        }
        while i < rows {
            ln_group::<V, 1>(i, d, x, ldx, g, b, eps, xhat, ldh, y, ldy, rstd);
            i += 1;
        }
    }
}

/// Rows `[i, i + R)` of [`ln_body`], their steps interleaved.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn ln_group<V: SimdVec, const R: usize>(
    i: usize,
    d: usize,
    x: *const V::Elem,
    ldx: usize,
    g: *const V::Elem,
    b: *const V::Elem,
    eps: V::Elem,
    xhat: *mut V::Elem,
    ldh: usize,
    y: *mut V::Elem,
    ldy: usize,
    rstd: *mut V::Elem,
) {
    // SAFETY: the caller (`ln_body`) passes rows `i..i + R` inside its own contract: `d`
    // elements per row at `x`, `xhat`, `y` and one `rstd` per row.
    unsafe {
        let one = V::Elem::ONE;
        let inv_d = one / V::Elem::from_usize(d);
        let xs: [*const V::Elem; R] = std::array::from_fn(|t| x.add((i + t) * ldx));
        let hs: [*mut V::Elem; R] = std::array::from_fn(|t| xhat.add((i + t) * ldh));
        let ys: [*mut V::Elem; R] = std::array::from_fn(|t| y.add((i + t) * ldy));
        let mu: [V::Elem; R] = std::array::from_fn(|t| bodies::sum_body::<V>(xs[t], d) * inv_d);
        for t in 0..R {
            for k in 0..d {
                *hs[t].add(k) = *xs[t].add(k) - mu[t];
            }
        }
        let var: [V::Elem; R] =
            std::array::from_fn(|t| bodies::dot_body::<V>(hs[t], hs[t], d) * inv_d);
        let r: [V::Elem; R] = std::array::from_fn(|t| one / (var[t] + eps).sqrt());
        for t in 0..R {
            for k in 0..d {
                let hk = *hs[t].add(k) * r[t];
                *hs[t].add(k) = hk;
                *ys[t].add(k) = hk * *g.add(k) + *b.add(k);
            }
            *rstd.add(i + t) = r[t];
        }
    }
}
simd_variants!(ln_body, ln_d, (rows: usize, d: usize, x: *const E, ldx: usize, g: *const E,
    b: *const E, eps: E, xhat: *mut E, ldh: usize, y: *mut E, ldy: usize, rstd: *mut E) -> ());

/// Whether `rows` rows of `d` at stride `ld` fit `len` elements.
fn fits(len: usize, ld: usize, rows: usize, d: usize) -> bool {
    rows == 0 || (d <= ld && (rows - 1) * ld + d <= len)
}

/// Layer norm of `rows` rows of `x` (stride `ldx`, `d = g.len()` entries each): per row
/// `μ = Σx/d`, `σ² = Σ(x − μ)²/d`, `r = 1/√(σ² + ε)`, `x̂ = (x − μ)·r` (into `xhat`, stride
/// `ldh`), `y = x̂∘g + b` (into `y`, stride `ldy`), `r` into `rstd[i]`. The values of
/// `dense::ln_row` row by row.
///
/// # Panics
/// If a buffer is too short for its rows (an internal invariant of the callers).
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub(super) fn ln_rows<T: Real>(
    isa: Isa,
    rows: usize,
    (x, ldx): (&[T], usize),
    g: &[T],
    b: &[T],
    eps: T,
    (xhat, ldh): (&mut [T], usize),
    (y, ldy): (&mut [T], usize),
    rstd: &mut [T],
) {
    let d = g.len();
    assert!(
        b.len() >= d
            && rstd.len() >= rows
            && fits(x.len(), ldx, rows, d)
            && fits(xhat.len(), ldh, rows, d)
            && fits(y.len(), ldy, rows, d),
        "ln_rows: sizes"
    );
    let isa = isa.or_scalar();
    // SAFETY: the assert keeps every row's first `d` entries of `x`, `xhat`, `y` and the first
    // `rows` of `rstd` inside their slices (distinct borrows: no aliasing); `isa` is supported.
    simd_by_kind!(T, E => unsafe {
        ln_d::<E>(isa, rows, d, x.as_ptr().cast(), ldx, g.as_ptr().cast(), b.as_ptr().cast(),
            *(&eps as *const T).cast::<E>(), xhat.as_mut_ptr().cast(), ldh, y.as_mut_ptr().cast(), ldy,
            rstd.as_mut_ptr().cast())
    })
}

/// [`ln_rows`] into buffers not yet written, each exactly `rows` rows (`xhat` `rows × ldh`,
/// `y` `rows × ldy`, `rstd` `rows`): the same values, and zeros on the padding columns
/// `[d, ld)` of `xhat` and `y`, so every element is written (no zero-fill pass first). Returns
/// `x̂` and `r` initialised (`y` is initialised too, for the caller that owns it).
///
/// # Panics
/// If a buffer does not have exactly its rows' length, or `x` is too short.
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub(super) fn ln_rows_into<'h, 'r, T: Real>(
    isa: Isa,
    rows: usize,
    (x, ldx): (&[T], usize),
    g: &[T],
    b: &[T],
    eps: T,
    (xhat, ldh): (&'h mut [MaybeUninit<T>], usize),
    (y, ldy): (&mut [MaybeUninit<T>], usize),
    rstd: &'r mut [MaybeUninit<T>],
) -> (&'h mut [T], &'r mut [T]) {
    let d = g.len();
    assert!(
        b.len() >= d
            && rstd.len() == rows
            && xhat.len() == rows * ldh
            && y.len() == rows * ldy
            && d <= ldh
            && d <= ldy
            && fits(x.len(), ldx, rows, d),
        "ln_rows_into: sizes"
    );
    let isa = isa.or_scalar();
    // SAFETY: the assert keeps every row's first `d` entries of `x`, `xhat`, `y` and the first
    // `rows` of `rstd` inside their slices (distinct borrows: no aliasing); `isa` is supported;
    // the kernel reads of `xhat`, `y`, `rstd` only elements it has written.
    let () = simd_by_kind!(T, E => unsafe {
        ln_d::<E>(isa, rows, d, x.as_ptr().cast(), ldx, g.as_ptr().cast(), b.as_ptr().cast(),
            *(&eps as *const T).cast::<E>(), xhat.as_mut_ptr().cast(), ldh,
            y.as_mut_ptr().cast(), ldy, rstd.as_mut_ptr().cast())
    });
    for (buf, ld) in [(&mut *xhat, ldh), (&mut *y, ldy)] {
        for row in buf.chunks_exact_mut(ld.max(1)) {
            for v in &mut row[d..] {
                v.write(T::ZERO);
            }
        }
    }
    // SAFETY: the kernel wrote columns [0, d) of every row and every `rstd` entry, the loop
    // above the padding columns; `MaybeUninit<T>` has the layout of `T`.
    unsafe {
        (
            &mut *(xhat as *mut [MaybeUninit<T>] as *mut [T]),
            &mut *(rstd as *mut [MaybeUninit<T>] as *mut [T]),
        )
    }
}

/// `dg += Σᵢ dyᵢ∘x̂ᵢ`, `db += Σᵢ dyᵢ` and `dyᵢ ← dyᵢ∘g` (the cotangent read at `src`, the result written at `dx`) for the first `d` columns of `rows`
/// rows, one block of columns at a time with the parameter gradients in registers (rows in
/// order: each element's sums are those of a row-by-row loop, without a chain of stores and
/// reloads through `dg`, `db` from one row to the next).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn ln_back_params<V: SimdVec>(
    rows: usize,
    d: usize,
    src: *const V::Elem,
    lds: usize,
    dx: *mut V::Elem,
    ldx: usize,
    xhat: *const V::Elem,
    ldh: usize,
    g: *const V::Elem,
    dg: *mut V::Elem,
    db: *mut V::Elem,
) {
    // SAFETY: the dispatcher's caller guarantees `V`'s instruction set, `rows` rows of `d`
    // elements at `src`, `dx`, `xhat` (their strides) and `d` elements at `g`, `dg`, `db`; the
    // column blocks stay below `d`.
    unsafe {
        let w = V::LANES;
        let mut j = 0;
        while j < d {
            let n = (d - j).min(w);
            let load = |p: *const V::Elem| {
                if n == w {
                    V::load(p)
                } else {
                    V::load_first(p, n, V::Elem::ZERO)
                }
            };
            let gv = load(g.add(j));
            let (mut sg, mut sb) = (load(dg.add(j)), load(db.add(j)));
            for i in 0..rows {
                let row = dx.add(i * ldx + j);
                let dy = load(src.add(i * lds + j));
                sg = sg.add(dy.mul(load(xhat.add(i * ldh + j))));
                sb = sb.add(dy);
                let out = dy.mul(gv);
                if n == w {
                    out.store(row);
                } else {
                    out.store_first(row, n);
                }
            }
            if n == w {
                sg.store(dg.add(j));
                sb.store(db.add(j));
            } else {
                sg.store_first(dg.add(j), n);
                sb.store_first(db.add(j), n);
            }
            j += n;
        }
    }
}

/// `acc[j] += Σ_{i<rows} c[i][j]` for `j < n`, rows in order, one block of columns at a time
/// with the sums in registers.
#[inline(always)]
unsafe fn col_sums_body<V: SimdVec>(
    acc: *mut V::Elem,
    n: usize,
    c: *const V::Elem,
    ldc: usize,
    rows: usize,
) {
    // SAFETY: the dispatcher's caller guarantees `V`'s instruction set, `rows` rows of `n`
    // elements at `c` (stride `ldc`) and `n` at `acc`; the column blocks stay below `n`.
    unsafe {
        let w = V::LANES;
        let mut j = 0;
        // Four vectors of columns at a time (four independent chains of additions).
        while j + 4 * w <= n {
            let mut s = [0, 1, 2, 3].map(|t| V::load(acc.add(j + t * w)));
            for i in 0..rows {
                let r = c.add(i * ldc + j);
                for (t, x) in s.iter_mut().enumerate() {
                    *x = x.add(V::load(r.add(t * w)));
                }
            }
            for (t, x) in s.iter().enumerate() {
                x.store(acc.add(j + t * w));
            }
            j += 4 * w;
        }
        while j < n {
            let m = (n - j).min(w);
            let load = |p: *const V::Elem| {
                if m == w {
                    V::load(p)
                } else {
                    V::load_first(p, m, V::Elem::ZERO)
                }
            };
            let mut s = load(acc.add(j));
            for i in 0..rows {
                s = s.add(load(c.add(i * ldc + j)));
            }
            if m == w {
                s.store(acc.add(j));
            } else {
                s.store_first(acc.add(j), m);
            }
            j += m;
        }
    }
}
simd_variants!(col_sums_body, col_sums_d, (acc: *mut E, n: usize, c: *const E, ldc: usize,
    rows: usize) -> ());

/// `acc[j] += Σ_{i<rows} c[i][j]` for `j < acc.len()` (rows of `c` at stride `ldc`), rows in
/// order for every element.
///
/// # Panics
/// If `c` is too short for the rows.
#[track_caller]
pub(super) fn col_sums<T: Real>(isa: Isa, acc: &mut [T], c: &[T], ldc: usize, rows: usize) {
    let n = acc.len();
    assert!(fits(c.len(), ldc, rows, n), "col_sums: sizes");
    let isa = isa.or_scalar();
    // SAFETY: the assert keeps every row's first `n` entries inside `c`; `acc` has `n`
    // elements and does not alias `c`; `isa` is supported.
    simd_by_kind!(T, E => unsafe {
        col_sums_d::<E>(isa, acc.as_mut_ptr().cast(), n, c.as_ptr().cast(), ldc, rows)
    })
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn ln_back_body<V: SimdVec>(
    rows: usize,
    d: usize,
    src: *const V::Elem,
    lds: usize,
    dx: *mut V::Elem,
    ldx: usize,
    xhat: *const V::Elem,
    ldh: usize,
    rstd: *const V::Elem,
    g: *const V::Elem,
    dg: *mut V::Elem,
    db: *mut V::Elem,
) {
    // SAFETY: the dispatcher's caller guarantees `V`'s instruction set and rows `0..rows` of
    // `d` elements at `dx` and `xhat` (strides `ldx`, `ldh`) with one `rstd` per row; every
    // access stays inside them (the sixteen-row path only for `V` = AVX-512 f32).
    unsafe {
        let inv_d = V::Elem::ONE / V::Elem::from_usize(d);
        // forward computed y = x̂∘g + b: dg += dy∘x̂, db += dy, dx̂ = ĝ = dy∘g (in place).
        ln_back_params::<V>(rows, d, src, lds, dx, ldx, xhat, ldh, g, dg, db);
        // forward computed x̂ = (x − μ)·r: dx = r·(ĝ − mean(ĝ) − x̂·mean(ĝ∘x̂)). Four rows at
        // a time, their steps interleaved (each row's operations unchanged).
        let mut i = 0;
        #[cfg(target_arch = "x86_64")]
        if lanes16::<V>(d) {
            while i + lanes::ROWS <= rows {
                lanes::ln_back16(
                    d,
                    dx.add(i * ldx).cast(),
                    ldx,
                    xhat.add(i * ldh).cast(),
                    ldh,
                    rstd.add(i).cast(),
                );
                i += lanes::ROWS;
            }
        }
        while i + 4 <= rows {
            ln_back_group::<V, 4>(i, d, inv_d, dx, ldx, xhat, ldh, rstd);
            i += 4;
        }
        while i < rows {
            ln_back_group::<V, 1>(i, d, inv_d, dx, ldx, xhat, ldh, rstd);
            i += 1;
        }
    }
}

/// Rows `[i, i + R)` of the second step of [`ln_back_body`], their steps interleaved.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn ln_back_group<V: SimdVec, const R: usize>(
    i: usize,
    d: usize,
    inv_d: V::Elem,
    dx: *mut V::Elem,
    ldx: usize,
    xhat: *const V::Elem,
    ldh: usize,
    rstd: *const V::Elem,
) {
    // SAFETY: the caller (`ln_back_body`) passes rows `i..i + R` inside its own contract: `d`
    // elements per row at `dx` and `xhat`, one `rstd` per row.
    unsafe {
        let rows: [*mut V::Elem; R] = std::array::from_fn(|t| dx.add((i + t) * ldx));
        let hs: [*const V::Elem; R] = std::array::from_fn(|t| xhat.add((i + t) * ldh));
        let mgh: [V::Elem; R] = std::array::from_fn(|t| bodies::sum_body::<V>(rows[t], d) * inv_d);
        let mghx: [V::Elem; R] =
            std::array::from_fn(|t| bodies::dot_body::<V>(rows[t], hs[t], d) * inv_d);
        for t in 0..R {
            let r = *rstd.add(i + t);
            for k in 0..d {
                let v = *rows[t].add(k);
                *rows[t].add(k) = r * (v - mgh[t] - *hs[t].add(k) * mghx[t]);
            }
        }
    }
}
simd_variants!(ln_back_body, ln_back_d, (rows: usize, d: usize, src: *const E, lds: usize,
    dx: *mut E, ldx: usize,
    xhat: *const E, ldh: usize, rstd: *const E, g: *const E, dg: *mut E, db: *mut E) -> ());

/// Backward of [`ln_rows`] for the cotangent rows `dy` (stride `ldx`, `d = g.len()` entries
/// each), rows in order: `dg += dy∘x̂`, `db += dy`, and each row becomes
/// `dx = r·(ĝ − mean(ĝ) − x̂·mean(ĝ∘x̂))` with `ĝ = dy∘g`: in place, or with `from` the
/// cotangent read from there (rows at its stride) and `dy` only written (its first `d`
/// columns). The values of `dense::ln_back_in_place` row by row.
///
/// # Panics
/// If a buffer is too short for its rows (an internal invariant of the callers).
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub(super) fn ln_back_rows<T: Real>(
    isa: Isa,
    rows: usize,
    from: Option<(&[T], usize)>,
    (dy, ldx): (&mut [T], usize),
    (xhat, ldh): (&[T], usize),
    rstd: &[T],
    g: &[T],
    dg: &mut [T],
    db: &mut [T],
) {
    let d = g.len();
    assert!(
        dg.len() >= d
            && db.len() >= d
            && rstd.len() >= rows
            && fits(dy.len(), ldx, rows, d)
            && fits(xhat.len(), ldh, rows, d)
            && from.is_none_or(|(f, lds)| fits(f.len(), lds, rows, d)),
        "ln_back_rows: sizes"
    );
    let isa = isa.or_scalar();
    // One mutable pointer for `dy`, from which the in-place reads derive too.
    let out = dy.as_mut_ptr();
    let (src, lds) = match from {
        Some((f, lds)) => (f.as_ptr(), lds),
        None => (out.cast_const(), ldx),
    };
    // SAFETY: the assert keeps every access inside its slice (`from` is a shared borrow, so
    // it cannot alias `dy`, which is then only written; otherwise `src` is `dy`'s own pointer,
    // each element read before it is written); `isa` is supported.
    simd_by_kind!(T, E => unsafe {
        ln_back_d::<E>(isa, rows, d, src.cast(), lds, out.cast(), ldx,
            xhat.as_ptr().cast(), ldh,
            rstd.as_ptr().cast(), g.as_ptr().cast(), dg.as_mut_ptr().cast(),
            db.as_mut_ptr().cast())
    })
}

#[cfg(test)]
mod tests;
