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
use efa_num::{simd_by_kind, simd_variants, MatMut, MatRef, Real};
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

/// Layer norm of the rows of `x` (`rows × d`) into `xhat`, `y` (`rows × d`) and `rstd`
/// (`rows`), gain and shift `gb` (`d` each): see [`ln_rows`].
///
/// # Safety
/// `V`'s instruction set enabled; the views' rows contiguous (unit column stride), `xhat` and
/// `y` of `x`'s shape; `gb` valid for `d` reads each, `rstd` for `rows` writes.
#[inline(always)]
unsafe fn ln_body<V: SimdVec>(
    x: MatRef<'_, V::Elem>,
    gb: (*const V::Elem, *const V::Elem),
    eps: V::Elem,
    mut xhat: MatMut<'_, V::Elem>,
    mut y: MatMut<'_, V::Elem>,
    rstd: *mut V::Elem,
) {
    let (rows, d) = (x.rows(), x.cols());
    // SAFETY: the dispatcher's caller guarantees `V`'s instruction set, the views (`x`, `xhat`,
    // `y` rows × d with contiguous rows), `d` elements at each of `gb` and `rows` at `rstd`;
    // every access below stays inside those rows (the sixteen-row path only for `V` = AVX-512
    // f32, see `lanes16`).
    unsafe {
        // Four rows at a time, their steps interleaved (each row is one long chain of
        // dependent reductions, a square root and a division; the other rows' steps fill its
        // waits), then the rest one at a time. Each row's operations are unchanged.
        let mut i = 0;
        #[cfg(target_arch = "x86_64")]
        if lanes16::<V>(d) {
            // Sixteen rows reduced side by side (AVX-512 in f32; the same bits).
            let rows16 = lanes::ROWS;
            while i + rows16 <= rows {
                lanes::ln16(
                    x.block(i, 0, rows16, d).cast(),
                    (gb.0.cast(), gb.1.cast()),
                    *(&eps as *const V::Elem).cast::<f32>(),
                    xhat.rb_mut().block(i, 0, rows16, d).cast(),
                    y.rb_mut().block(i, 0, rows16, d).cast(),
                    rstd.add(i).cast(),
                );
                i += rows16;
            }
        }
        while i + 4 <= rows {
            ln_group::<V, 4>(i, x, gb, eps, xhat.rb_mut(), y.rb_mut(), rstd);
            i += 4;
        }
        while i < rows {
            ln_group::<V, 1>(i, x, gb, eps, xhat.rb_mut(), y.rb_mut(), rstd);
            i += 1;
        }
    }
}

/// Rows `[i, i + R)` of [`ln_body`], their steps interleaved.
#[inline(always)]
unsafe fn ln_group<V: SimdVec, const R: usize>(
    i: usize,
    x: MatRef<'_, V::Elem>,
    (g, b): (*const V::Elem, *const V::Elem),
    eps: V::Elem,
    mut xhat: MatMut<'_, V::Elem>,
    mut y: MatMut<'_, V::Elem>,
    rstd: *mut V::Elem,
) {
    let d = x.cols();
    let (x, ldx) = (x.as_ptr(), x.rs() as usize);
    let (ldh, xhat) = (xhat.rs() as usize, xhat.as_mut_ptr());
    let (ldy, y) = (y.rs() as usize, y.as_mut_ptr());
    // SAFETY: the caller (`ln_body`) passes rows `i..i + R` inside its own contract: `d`
    // elements per row at `x`, `xhat`, `y` and one `rstd` per row.
    unsafe {
        let one = V::Elem::ONE;
        let inv_d = one / V::Elem::from_usize(d);
        let xs: [*const V::Elem; R] = std::array::from_fn(|t| x.add((i + t) * ldx));
        let hs: [*mut V::Elem; R] = std::array::from_fn(|t| xhat.add((i + t) * ldh));
        let ys: [*mut V::Elem; R] = std::array::from_fn(|t| y.add((i + t) * ldy));
        // The vector bodies in loops, not `from_fn` closures (compiled without the
        // dispatcher's instruction set, they may be left out of line).
        let mut mu = [V::Elem::ZERO; R];
        for (m, &x) in mu.iter_mut().zip(&xs) {
            *m = bodies::sum_body::<V>(x, d) * inv_d;
        }
        for t in 0..R {
            for k in 0..d {
                *hs[t].add(k) = *xs[t].add(k) - mu[t];
            }
        }
        let mut var = [V::Elem::ZERO; R];
        for (v, &h) in var.iter_mut().zip(&hs) {
            *v = bodies::dot_body::<V>(h, h, d) * inv_d;
        }
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
simd_variants!(ln_body, ln_d, (x: MatRef<'_, E>, gb: (*const E, *const E), eps: E,
    xhat: MatMut<'_, E>, y: MatMut<'_, E>, rstd: *mut E) -> ());

/// A layer norm's gain `γ` and shift `β` (`d` entries each) and its `ε`.
#[derive(Clone, Copy, Debug)]
pub(super) struct LnParams<'a, T> {
    /// The gain `γ`: its length is the row width `d`.
    pub g: &'a [T],
    /// The shift `β` (at least `d` entries).
    pub b: &'a [T],
    /// `ε`, added to the variance.
    pub eps: T,
}

/// Panics unless the views are `x`'s shape with contiguous rows (`what` names the kernel in
/// the message).
#[track_caller]
fn check_rows<T>(what: &str, x: &MatRef<'_, T>, others: &[(usize, usize, isize)]) {
    let ok = x.cs() == 1
        && x.rs() >= 0
        && others
            .iter()
            .all(|&(r, c, cs)| (r, c, cs) == (x.rows(), x.cols(), 1));
    assert!(
        ok,
        "{what}: views must be {} × {} with contiguous rows",
        x.rows(),
        x.cols()
    );
}

/// Whether `rows` rows of `d` at stride `ld` fit `len` elements.
fn fits(len: usize, ld: usize, rows: usize, d: usize) -> bool {
    rows == 0 || (d <= ld && (rows - 1) * ld + d <= len)
}

/// Layer norm of the rows of `x` (`rows × d`, `d = g.len()`, contiguous rows): per row
/// `μ = Σx/d`, `σ² = Σ(x − μ)²/d`, `r = 1/√(σ² + ε)`, `x̂ = (x − μ)·r` (into `xhat`),
/// `y = x̂∘g + b` (into `y`, both `rows × d`), `r` into `rstd[i]`. The values of
/// `dense::ln_row` row by row.
///
/// # Panics
/// If the shapes do not agree or a buffer is too short (an internal invariant of the callers).
#[cfg(test)]
#[track_caller]
pub(super) fn ln_rows<T: Real>(
    isa: Isa,
    x: MatRef<'_, T>,
    ln: LnParams<'_, T>,
    xhat: MatMut<'_, T>,
    y: MatMut<'_, T>,
    rstd: &mut [T],
) {
    let (rows, d) = (x.rows(), x.cols());
    check_rows(
        "ln_rows",
        &x,
        &[
            (xhat.rows(), xhat.cols(), xhat.cs()),
            (y.rows(), y.cols(), y.cs()),
        ],
    );
    assert!(
        ln.g.len() == d && ln.b.len() >= d && rstd.len() >= rows,
        "ln_rows: sizes"
    );
    let isa = isa.or_scalar();
    // SAFETY: the views' elements are inside their buffers (their constructors' checks), the
    // asserts give contiguous rows of `x`'s shape, `d` elements of `g`, `b` and `rows` of
    // `rstd`; T is E, so the casts are identities; `isa` is supported.
    simd_by_kind!(T, E => unsafe {
        ln_d::<E>(isa, x.cast(), (ln.g.as_ptr().cast(), ln.b.as_ptr().cast()),
            *(&ln.eps as *const T).cast::<E>(), xhat.cast(), y.cast(), rstd.as_mut_ptr().cast())
    })
}

/// [`ln_rows`] into buffers not yet written, each exactly `rows` rows (`xhat` `rows × ldh`,
/// `y` `rows × ldy`, `rstd` `rows`): the same values, and zeros on the padding columns
/// `[d, ld)` of `xhat` and `y`, so every element is written (no zero-fill pass first). Returns
/// `x̂` and `r` initialised (`y` is initialised too, for the caller that owns it).
///
/// # Panics
/// If a buffer does not have exactly its rows' length, or `x` has not `d = g.len()` columns
/// in contiguous rows.
#[track_caller]
pub(super) fn ln_rows_into<'h, 'r, T: Real>(
    isa: Isa,
    x: MatRef<'_, T>,
    ln: LnParams<'_, T>,
    (xhat, ldh): (&'h mut [MaybeUninit<T>], usize),
    (y, ldy): (&mut [MaybeUninit<T>], usize),
    rstd: &'r mut [MaybeUninit<T>],
) -> (&'h mut [T], &'r mut [T]) {
    let (rows, d) = (x.rows(), x.cols());
    check_rows("ln_rows_into", &x, &[]);
    assert!(
        ln.g.len() == d
            && ln.b.len() >= d
            && rstd.len() == rows
            && xhat.len() == rows * ldh
            && y.len() == rows * ldy
            && d <= ldh
            && d <= ldy,
        "ln_rows_into: sizes"
    );
    let isa = isa.or_scalar();
    let xv = MatMut::row_major(&mut *xhat, rows, d, ldh);
    let yv = MatMut::row_major(&mut *y, rows, d, ldy);
    // SAFETY: the views' elements are inside their buffers (their constructors' checks), with
    // contiguous rows of `x`'s shape; `g`, `b` have `d` elements and `rstd` `rows`; T is E and
    // `MaybeUninit<E>` has its layout, so the casts keep the layout; the kernel reads of
    // `xhat`, `y`, `rstd` only elements it has written; `isa` is supported.
    let () = simd_by_kind!(T, E => unsafe {
        ln_d::<E>(isa, x.cast(), (ln.g.as_ptr().cast(), ln.b.as_ptr().cast()),
            *(&ln.eps as *const T).cast::<E>(), xv.cast(), yv.cast(),
            rstd.as_mut_ptr().cast())
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

/// `dg += Σᵢ dyᵢ∘x̂ᵢ`, `db += Σᵢ dyᵢ` and `dyᵢ ← dyᵢ∘g` (the cotangent read at `src`, rows at
/// stride `lds`, perhaps `dx`'s own storage; the result written into `dx`) for the `d` columns
/// of the `rows` rows of `dx` and `xhat`, one block of columns at a time with the parameter
/// gradients in registers (rows in order: each element's sums are those of a row-by-row loop,
/// without a chain of stores and reloads through `dg`, `db` from one row to the next).
///
/// # Safety
/// As [`ln_back_body`], with `src` its cotangent rows.
#[inline(always)]
unsafe fn ln_back_params<V: SimdVec>(
    (src, lds): (*const V::Elem, usize),
    mut dx: MatMut<'_, V::Elem>,
    xhat: MatRef<'_, V::Elem>,
    g: *const V::Elem,
    (dg, db): (*mut V::Elem, *mut V::Elem),
) {
    let (rows, d) = (dx.rows(), dx.cols());
    let (ldx, dx) = (dx.rs() as usize, dx.as_mut_ptr());
    let (xhat, ldh) = (xhat.as_ptr(), xhat.rs() as usize);
    // SAFETY: the dispatcher's caller guarantees `V`'s instruction set, `rows` rows of `d`
    // elements at `src`, `dx`, `xhat` (their strides) and `d` elements at `g`, `dg`, `db`; the
    // column blocks stay below `d`.
    unsafe {
        let w = V::LANES;
        let mut j = 0;
        while j < d {
            let n = (d - j).min(w);
            // `load_part`, an #[inline(always)] function, not a closure: a closure is compiled
            // without the instruction set and, left out of line, calls each intrinsic
            // (docs/design.md §3b).
            let gv = load_part::<V>(g.add(j), n);
            let (mut sg, mut sb) = (load_part::<V>(dg.add(j), n), load_part::<V>(db.add(j), n));
            for i in 0..rows {
                let row = dx.add(i * ldx + j);
                let dy = load_part::<V>(src.add(i * lds + j), n);
                sg = sg.add(dy.mul(load_part::<V>(xhat.add(i * ldh + j), n)));
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
/// The first `m ≤ V::LANES` elements at `p` as a vector, zeros after them.
///
/// # Safety
/// `p` is readable for `m` elements; `V`'s instruction set is enabled.
#[inline(always)]
unsafe fn load_part<V: SimdVec>(p: *const V::Elem, m: usize) -> V {
    // SAFETY: the caller guarantees `m` readable elements and the instruction set; a whole
    // vector is read only when `m` is its lane count.
    unsafe {
        if m == V::LANES {
            V::load(p)
        } else {
            V::load_first(p, m, V::Elem::ZERO)
        }
    }
}

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
            let mut s = [V::splat(V::Elem::ZERO); 4];
            for (t, x) in s.iter_mut().enumerate() {
                *x = V::load(acc.add(j + t * w));
            }
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
            let mut s = load_part::<V>(acc.add(j), m);
            for i in 0..rows {
                s = s.add(load_part::<V>(c.add(i * ldc + j), m));
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

/// Backward of [`ln_body`] for the cotangent rows at `src` (or, for `None`, in `dx` itself):
/// see [`ln_back_rows`].
///
/// # Safety
/// `V`'s instruction set enabled; the views' rows contiguous (unit column stride), `src`,
/// `xhat` of `dx`'s shape (`rows × d`); `rstd` valid for `rows` reads, `g` for `d` reads,
/// `dg` and `db` for `d` reads and writes.
#[inline(always)]
unsafe fn ln_back_body<V: SimdVec>(
    src: Option<MatRef<'_, V::Elem>>,
    mut dx: MatMut<'_, V::Elem>,
    xhat: MatRef<'_, V::Elem>,
    rstd: *const V::Elem,
    g: *const V::Elem,
    dgb: (*mut V::Elem, *mut V::Elem),
) {
    let (rows, d) = (dx.rows(), dx.cols());
    // One pointer for `dx`, from which the in-place reads derive too.
    let src = match src {
        Some(s) => (s.as_ptr(), s.rs() as usize),
        None => (dx.as_mut_ptr().cast_const(), dx.rs() as usize),
    };
    // SAFETY: the dispatcher's caller guarantees `V`'s instruction set and rows `0..rows` of
    // `d` elements at `dx` and `xhat` with one `rstd` per row; every access stays inside them
    // (the sixteen-row path only for `V` = AVX-512 f32).
    unsafe {
        let inv_d = V::Elem::ONE / V::Elem::from_usize(d);
        // forward computed y = x̂∘g + b: dg += dy∘x̂, db += dy, dx̂ = ĝ = dy∘g (in place).
        ln_back_params::<V>(src, dx.rb_mut(), xhat, g, dgb);
        // forward computed x̂ = (x − μ)·r: dx = r·(ĝ − mean(ĝ) − x̂·mean(ĝ∘x̂)). Four rows at
        // a time, their steps interleaved (each row's operations unchanged).
        let mut i = 0;
        #[cfg(target_arch = "x86_64")]
        if lanes16::<V>(d) {
            let rows16 = lanes::ROWS;
            while i + rows16 <= rows {
                lanes::ln_back16(
                    dx.rb_mut().block(i, 0, rows16, d).cast(),
                    xhat.block(i, 0, rows16, d).cast(),
                    rstd.add(i).cast(),
                );
                i += rows16;
            }
        }
        while i + 4 <= rows {
            ln_back_group::<V, 4>(i, inv_d, dx.rb_mut(), xhat, rstd);
            i += 4;
        }
        while i < rows {
            ln_back_group::<V, 1>(i, inv_d, dx.rb_mut(), xhat, rstd);
            i += 1;
        }
    }
}

/// Rows `[i, i + R)` of the second step of [`ln_back_body`], their steps interleaved.
#[inline(always)]
unsafe fn ln_back_group<V: SimdVec, const R: usize>(
    i: usize,
    inv_d: V::Elem,
    mut dx: MatMut<'_, V::Elem>,
    xhat: MatRef<'_, V::Elem>,
    rstd: *const V::Elem,
) {
    let d = dx.cols();
    let (ldx, dx) = (dx.rs() as usize, dx.as_mut_ptr());
    let (xhat, ldh) = (xhat.as_ptr(), xhat.rs() as usize);
    // SAFETY: the caller (`ln_back_body`) passes rows `i..i + R` inside its own contract: `d`
    // elements per row at `dx` and `xhat`, one `rstd` per row.
    unsafe {
        let rows: [*mut V::Elem; R] = std::array::from_fn(|t| dx.add((i + t) * ldx));
        let hs: [*const V::Elem; R] = std::array::from_fn(|t| xhat.add((i + t) * ldh));
        // The vector bodies in loops, not `from_fn` closures (see `ln_group`).
        let (mut mgh, mut mghx) = ([V::Elem::ZERO; R], [V::Elem::ZERO; R]);
        for t in 0..R {
            mgh[t] = bodies::sum_body::<V>(rows[t], d) * inv_d;
            mghx[t] = bodies::dot_body::<V>(rows[t], hs[t], d) * inv_d;
        }
        for t in 0..R {
            let r = *rstd.add(i + t);
            for k in 0..d {
                let v = *rows[t].add(k);
                *rows[t].add(k) = r * (v - mgh[t] - *hs[t].add(k) * mghx[t]);
            }
        }
    }
}
simd_variants!(ln_back_body, ln_back_d, (src: Option<MatRef<'_, E>>, dx: MatMut<'_, E>,
    xhat: MatRef<'_, E>, rstd: *const E, g: *const E, dgb: (*mut E, *mut E)) -> ());

/// Backward of [`ln_rows`] for the cotangent rows `dy` (`rows × d`, `d = g.len()`), rows in
/// order: `dg += dy∘x̂`, `db += dy`, and each row becomes `dx = r·(ĝ − mean(ĝ) − x̂·mean(ĝ∘x̂))`
/// with `ĝ = dy∘g`: in place, or with `from` the cotangent read from there (`dy`'s shape) and
/// `dy` only written. `saved` holds the forward's `x̂` (`dy`'s shape) and `r` (`rows`
/// entries). The values of `dense::ln_back_in_place` row by row.
///
/// # Panics
/// If the shapes do not agree or a buffer is too short (an internal invariant of the callers).
#[track_caller]
pub(super) fn ln_back_rows<T: Real>(
    isa: Isa,
    from: Option<MatRef<'_, T>>,
    dy: MatMut<'_, T>,
    (xhat, rstd): (MatRef<'_, T>, &[T]),
    g: &[T],
    (dg, db): (&mut [T], &mut [T]),
) {
    let (rows, d) = (dy.rows(), dy.cols());
    let shape = |v: &MatRef<'_, T>| (v.rows(), v.cols(), v.cs());
    let from_shape = from.as_ref().map_or(shape(&xhat), shape);
    check_rows("ln_back_rows", &dy.rb(), &[shape(&xhat), from_shape]);
    assert!(
        g.len() == d && dg.len() >= d && db.len() >= d && rstd.len() >= rows,
        "ln_back_rows: sizes"
    );
    let isa = isa.or_scalar();
    // SAFETY: the views' elements are inside their buffers (their constructors' checks), with
    // contiguous rows of `dy`'s shape (`from` a shared borrow, so it cannot alias `dy`, which is
    // then only written; without it the kernel reads `dy`'s own elements, each before it is
    // written); `g`, `dg`, `db` have `d` elements and `rstd` `rows`; T is E, so the casts are
    // identities; `isa` is supported.
    simd_by_kind!(T, E => unsafe {
        ln_back_d::<E>(isa, from.map(|f| f.cast()), dy.cast(), xhat.cast(),
            rstd.as_ptr().cast(), g.as_ptr().cast(),
            (dg.as_mut_ptr().cast(), db.as_mut_ptr().cast()))
    })
}

#[cfg(test)]
mod tests;
