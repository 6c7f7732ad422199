//! Attention microkernels on packed tiles, with the run-time dispatch of `efa_num::simd`.
//!
//! [`gemm`] computes `C (+)= A·B` on strided views ([`MatRef`] `A` and `B`, [`MatMut`] `C`)
//! where `A` is read one scalar at a time through arbitrary (row, column) strides — so
//! transposed operands such as `Pᵀ` or `dSᵀ` cost nothing extra — and `B`, `C` have contiguous
//! rows whose width is a multiple of [`PAD`] (tiles are padded with zeros). The register block is `MR` rows × `NR` vectors: 8×2 for AVX-512 (16 of 32 zmm
//! accumulators), 6×2 for AVX2 (12 of 16 ymm), 4×2 for the scalar path. A column count that
//! is not a multiple of the vector width ends in one vector; on AVX-512 that last vector is a
//! 256-bit one when it covers the rest (50 queries: three zmm and one ymm instead of four zmm),
//! which halves its cost on cores that execute 512-bit operations as two halves. In f64 every
//! element's sum is compensated, as `efa_num::gemm`'s f64 sums are (`SimdVec::dot2_step`: an
//! error-free product and sum per term, the errors added once at the end), in 4 × 2 blocks
//! (two accumulators per element), so that the attention kernel and the fused block, which
//! form their products here, keep the digits of the tape's products in the audit dtype.
//!
//! The softmax row kernels the tiles go through between products are in `micro/softmax.rs`,
//! small per-block row kernels (scaled copies, row dot products) in `micro/rows.rs` (both
//! re-exported here).

use efa_num::simd::{Isa, SimdVec};
use efa_num::sum::compensated;
use efa_num::{simd_by_kind, MatMut, MatRef, Real};

use efa_num::simd_tail_variants as tail_variants;

/// Tile widths are rounded up to a multiple of this (16 elements: a 64-byte f32 or a
/// 128-byte f64 row chunk; every variant's lane count divides it).
pub const PAD: usize = 16;

/// `n` rounded up to a multiple of [`PAD`].
#[inline]
pub fn padded(n: usize) -> usize {
    n.div_ceil(PAD) * PAD
}

/// What an accumulating product adds to its sums: rows `i` at `ci[i·rsi]` (up to the padded
/// width; `rsi = 0` repeats one row). With `last` false the sums start from `ci` (C's own
/// rows: `C ← C + A·B` in one chain per element; `cb` is null); with `last` true the products
/// are summed first and then added, the row `cb` when it is not null and then the rows `ci`,
/// `((A·B) + cb) + ci` (a linear layer's `x·W + b` and its residual, in the order of the
/// composition: three roundings, as separate passes would give).
#[derive(Clone, Copy)]
struct Init<E> {
    ci: *const E,
    rsi: isize,
    cb: *const E,
    last: bool,
}

impl<E> Init<E> {
    /// Rows at `ci[i·rsi]`, nothing added.
    fn rows(ci: *const E, rsi: isize) -> Self {
        Init {
            ci,
            rsi,
            cb: std::ptr::null(),
            last: false,
        }
    }

    /// The same starting values from row `i`, column `j` on.
    ///
    /// # Safety
    /// The offsets stay inside the buffers.
    #[inline(always)]
    unsafe fn at(self, i: usize, j: usize) -> Self {
        // SAFETY: the caller guarantees row `i`, column `j` lie inside the rows `ci` names (and
        // column `j` inside the row `cb` when it is not null), this function's contract.
        unsafe {
            Init {
                ci: self.ci.offset(i as isize * self.rsi).add(j),
                rsi: self.rsi,
                cb: if self.cb.is_null() {
                    self.cb
                } else {
                    self.cb.add(j)
                },
                last: self.last,
            }
        }
    }
}

/// One product's operands for the kernels below, from the block's first row and column:
/// A read at `a[i·rsa + p·csa]`, B's rows at `b[p·rsb]`, C's rows at `c[i·rsc]`, the starting
/// rows `init` (read when `accumulate`), and `alpha` (applied when not accumulating).
#[derive(Clone, Copy)]
struct Tile<E> {
    a: *const E,
    rsa: isize,
    csa: isize,
    b: *const E,
    rsb: isize,
    c: *mut E,
    rsc: isize,
    init: Init<E>,
    accumulate: bool,
    alpha: E,
}

impl<E: Copy> Tile<E> {
    /// The same product from row `i`, column `j` on: A's row `i`, B's column `j`, C's and the
    /// starting rows' element `(i, j)`.
    ///
    /// # Safety
    /// The offsets stay inside the operands.
    #[inline(always)]
    unsafe fn at(self, i: usize, j: usize) -> Self {
        // SAFETY: the caller guarantees row `i` of A, C and `init` and column `j` of B, C and
        // `init` lie inside them, this function's contract.
        unsafe {
            Tile {
                a: self.a.offset(i as isize * self.rsa),
                b: self.b.add(j),
                c: self.c.offset(i as isize * self.rsc).add(j),
                init: self.init.at(i, j),
                ..self
            }
        }
    }
}

#[inline(always)]
unsafe fn block<V: SimdVec, const MR: usize, const NR: usize>(k: usize, t: Tile<V::Elem>) {
    let Tile {
        c,
        rsc,
        init,
        accumulate,
        alpha,
        ..
    } = t;
    // SAFETY: the caller (`strip`) runs this with `V`'s instruction set enabled and passes
    // `MR` rows of A (read at `a[i·rsa + p·csa]`, `p < k`), `k` rows of B at stride `rsb` and
    // `MR` rows of C at stride `rsc` (and, when accumulating, of `init`), every row valid for
    // the block's `NR·w` columns: they end within `padded(n)`, the width `gemm`'s caller
    // guarantees for B, C and the starting rows. The loads, the splats of A's elements and
    // the stores below touch exactly those elements; C does not alias A or B.
    unsafe {
        let w = V::LANES;
        let zero = V::splat(V::Elem::ZERO);
        let mut acc = [[zero; NR]; MR];
        if accumulate && !init.last {
            for (i, row) in acc.iter_mut().enumerate() {
                for (j, x) in row.iter_mut().enumerate() {
                    *x = V::load(init.ci.offset(i as isize * init.rsi).add(j * w));
                }
            }
        }
        if compensated::<V::Elem>() {
            compensated_steps(k, &mut acc, t);
        } else {
            fused_steps(k, &mut acc, t);
        }
        let va = V::splat(alpha);
        let scaled = !accumulate && alpha != V::Elem::ONE;
        let late = accumulate && init.last;
        for (i, row) in acc.iter().enumerate() {
            for (j, x) in row.iter().enumerate() {
                let at = j * w;
                let mut x = if scaled { x.mul(va) } else { *x };
                if late {
                    if !init.cb.is_null() {
                        x = x.add(V::load(init.cb.add(at)));
                    }
                    x = x.add(V::load(init.ci.offset(i as isize * init.rsi).add(at)));
                }
                x.store(c.offset(i as isize * rsc).add(at));
            }
        }
    }
}

/// The `k` steps of a block in f64: compensated sums (`SimdVec::dot2_step`), as
/// `efa_num::gemm` sums f64 products (docs/design.md §3c); same index order, the errors added
/// once at the end.
///
/// # Safety
/// As [`block`]: `V`'s instruction set, `MR` rows of A and `k` rows of B valid for the
/// block's `NR` vectors.
#[inline(always)]
unsafe fn compensated_steps<V: SimdVec, const MR: usize, const NR: usize>(
    k: usize,
    acc: &mut [[V; NR]; MR],
    t: Tile<V::Elem>,
) {
    // SAFETY: the caller's contract ([`block`]): A's element (i, p) at
    // `a + i·rsa + p·csa` for i < MR, p < k, and B's rows `b + p·rsb` valid for NR vectors.
    unsafe {
        let (w, zero) = (V::LANES, V::splat(V::Elem::ZERO));
        // One pointer per row of A, each stepped by `csa`: the addresses of a step do not
        // depend on one another (computing row i's as row i−1's plus `rsa` made a serial chain
        // of additions that bounded the one-vector blocks at about one FMA per cycle).
        let mut ap = [t.a; MR];
        for (i, p) in ap.iter_mut().enumerate() {
            *p = t.a.offset(i as isize * t.rsa);
        }
        let mut bp = t.b;
        let mut err = [[zero; NR]; MR];
        for _ in 0..k {
            let mut bv = [zero; NR];
            for (j, x) in bv.iter_mut().enumerate() {
                *x = V::load(bp.add(j * w));
            }
            for ((row, erow), p) in acc.iter_mut().zip(err.iter_mut()).zip(ap.iter_mut()) {
                let av = V::splat(**p);
                for ((x, e), &bj) in row.iter_mut().zip(erow.iter_mut()).zip(&bv) {
                    av.dot2_step(bj, x, e);
                }
                *p = p.offset(t.csa);
            }
            bp = bp.offset(t.rsb);
        }
        for (row, erow) in acc.iter_mut().zip(&err) {
            for (x, &e) in row.iter_mut().zip(erow) {
                *x = x.add(e);
            }
        }
    }
}

/// The `k` steps of a block in f32 (one fused multiply-add per term, in index order), with A's
/// addresses formed as its strides allow. A's rows along k (`csa = 1`: `Q`, `K`, `dO`, `dS` read
/// in place): each row's pointer stays put and four steps per pass read it at immediate offsets.
/// A's columns along its rows (`rsa = 1`: `Pᵀ`, `dSᵀ`): a step's `MR` elements are adjacent,
/// at immediate offsets from one pointer. Otherwise one pointer per row, stepped by `csa`. With
/// the pointers stepped in every case, LLVM recomputed the rows' addresses from one of them at
/// every step: 29 instructions per 12 multiply-adds of the AVX2 6 × 2 block, 24 with these
/// forms. The same products in the same order: the same bits.
///
/// # Safety
/// As [`compensated_steps`].
#[inline(always)]
unsafe fn fused_steps<V: SimdVec, const MR: usize, const NR: usize>(
    k: usize,
    acc: &mut [[V; NR]; MR],
    t: Tile<V::Elem>,
) {
    // SAFETY: the caller's contract ([`block`]): A's element (i, p) at
    // `a + i·rsa + p·csa` for i < MR, p < k, and B's rows `b + p·rsb` valid for NR vectors;
    // each form below reads exactly those elements (`p + u < k` in the four-step passes).
    unsafe {
        let mut rows = [t.a; MR];
        for (i, r) in rows.iter_mut().enumerate() {
            *r = t.a.offset(i as isize * t.rsa);
        }
        let mut bp = t.b;
        let mut p = 0;
        if t.csa == 1 {
            while p + 4 <= k {
                for u in 0..4 {
                    let mut av = [V::Elem::ZERO; MR];
                    for (x, r) in av.iter_mut().zip(&rows) {
                        *x = *r.add(p + u);
                    }
                    fused_step(acc, bp.offset(u as isize * t.rsb), av);
                }
                bp = bp.offset(4 * t.rsb);
                p += 4;
            }
            // The last `k mod 4` steps by the general form, from column `p`.
            for r in rows.iter_mut() {
                *r = r.add(p);
            }
        } else if t.rsa == 1 {
            // `rows[i]` is `rows[0] + i`: one pointer, stepped by `csa`.
            while p < k {
                let mut av = [V::Elem::ZERO; MR];
                for (i, x) in av.iter_mut().enumerate() {
                    *x = *rows[0].add(i);
                }
                fused_step(acc, bp, av);
                rows[0] = rows[0].offset(t.csa);
                bp = bp.offset(t.rsb);
                p += 1;
            }
        }
        while p < k {
            let mut av = [V::Elem::ZERO; MR];
            for (x, r) in av.iter_mut().zip(rows.iter_mut()) {
                *x = **r;
                *r = r.offset(t.csa);
            }
            fused_step(acc, bp, av);
            bp = bp.offset(t.rsb);
            p += 1;
        }
    }
}

/// One f32 step: `acc[i][j] ← a[i]·B[j] + acc[i][j]` with B's `NR` vectors at `bp`.
///
/// # Safety
/// `V`'s instruction set enabled; `bp` valid for `NR` vectors.
#[inline(always)]
unsafe fn fused_step<V: SimdVec, const MR: usize, const NR: usize>(
    acc: &mut [[V; NR]; MR],
    bp: *const V::Elem,
    a: [V::Elem; MR],
) {
    // SAFETY: the caller guarantees the instruction set and `NR` vectors at `bp`.
    unsafe {
        let mut bv = [V::splat(V::Elem::ZERO); NR];
        for (j, x) in bv.iter_mut().enumerate() {
            *x = V::load(bp.add(j * V::LANES));
        }
        for (row, &x) in acc.iter_mut().zip(&a) {
            let av = V::splat(x);
            for (x, &bj) in row.iter_mut().zip(&bv) {
                *x = av.fma(bj, *x);
            }
        }
    }
}

/// All column blocks of an `MR`-row strip covering the first `nu` columns: `NR`-vector blocks,
/// then single vectors, and a last block of the narrower `H` when it covers the rest.
#[inline(always)]
unsafe fn strip<V: SimdVec, H: SimdVec<Elem = V::Elem>, const MR: usize, const NR: usize>(
    nu: usize,
    k: usize,
    t: Tile<V::Elem>,
) {
    // SAFETY: the caller (`rows`) runs this with the instruction sets of `V` and `H` enabled,
    // with `MR` rows of A, C (and `init`) inside the matrices and B, C and the starting rows
    // valid to `padded(nu)` columns. Every block below starts at a column `j < nu` that is a
    // multiple of its own vector width, which divides PAD, so it ends at or before
    // `padded(nu)`: the `NR·w` blocks while `j + NR·w ≤ nu`, one-vector blocks of `w` or of
    // `H::LANES` after that, and the three-vector block only when `nu > 2w`, where
    // `padded(nu)`, a multiple of `w`, is at least `3w`. `t.at(0, j)` stays in the operands.
    unsafe {
        let w = V::LANES;
        let mut j = 0;
        // Exactly three vectors whose last is a whole one (e.g. 44 keys of f32 on AVX-512): one
        // 8 × 3 block (24 accumulators) instead of an 8 × 2 and an 8 × 1 block, so every step
        // loads one row of A for three vectors of B. The same columns are written.
        let half = if H::LANES < w { H::LANES } else { 0 };
        if MR == 8 && NR == 2 && nu > 2 * w + half && nu <= 3 * w {
            block::<V, MR, 3>(k, t);
            return;
        }
        while j + NR * w <= nu {
            block::<V, MR, NR>(k, t.at(0, j));
            j += NR * w;
        }
        while j < nu {
            if H::LANES < w && nu - j <= H::LANES {
                block::<H, MR, 1>(k, t.at(0, j));
                j += H::LANES;
            } else {
                block::<V, MR, 1>(k, t.at(0, j));
                j += w;
            }
        }
    }
}

#[inline(always)]
unsafe fn rows<V: SimdVec, H: SimdVec<Elem = V::Elem>, const MR: usize>(
    (m, n, k): (usize, usize, usize),
    t: Tile<V::Elem>,
) {
    // SAFETY: the caller (`gemm_body`) guarantees the instruction sets of `V` and `H` and
    // `gemm`'s contract: `m` rows of A, C and the starting rows, `padded(n)` columns of B and
    // C. Each strip takes rows `i .. i + R` with `i + R ≤ m` (12 while `i + 12 ≤ m`, `MR`
    // while `i + MR ≤ m`, then 4, 2 or 1 while that many are left), so the row offsets of
    // A, C and `init` stay inside their matrices.
    unsafe {
        let mut i = 0;
        // Rows of one vector (e.g. a 16-wide head in f32 on AVX-512): 12-row strips keep twelve
        // independent FMA chains in flight instead of eight (one FMA per row and step).
        if MR >= 8 && n <= V::LANES {
            while i + 12 <= m {
                strip::<V, H, 12, 1>(n, k, t.at(i, 0));
                i += 12;
            }
        }
        while i + MR <= m {
            strip::<V, H, MR, 2>(n, k, t.at(i, 0));
            i += MR;
        }
        // Remainder rows in blocks of 4, 2, 1.
        while i < m {
            let ti = t.at(i, 0);
            let left = m - i;
            if left >= 4 && MR > 4 {
                strip::<V, H, 4, 2>(n, k, ti);
                i += 4;
            } else if left >= 2 {
                strip::<V, H, 2, 2>(n, k, ti);
                i += 2;
            } else {
                strip::<V, H, 1, 2>(n, k, ti);
                i += 1;
            }
        }
    }
}

#[inline(always)]
unsafe fn gemm_body<V: SimdVec, H: SimdVec<Elem = V::Elem>>(
    mnk: (usize, usize, usize),
    t: Tile<V::Elem>,
) {
    // SAFETY: the dispatcher's caller (`gemm`, `gemm_from`) guarantees the instruction sets of
    // `V` and `H` and the bounds `rows` needs (`gemm`'s contract); `MR` only picks the
    // register block.
    unsafe {
        let bytes = V::LANES * std::mem::size_of::<V::Elem>();
        if compensated::<V::Elem>() {
            // Two accumulators per element: 4 × 2 vectors (16 registers).
            rows::<V, H, 4>(mnk, t)
        } else if bytes >= 64 {
            rows::<V, H, 8>(mnk, t)
        } else if bytes >= 32 {
            rows::<V, H, 6>(mnk, t)
        } else {
            rows::<V, H, 4>(mnk, t)
        }
    }
}
tail_variants!(gemm_body, gemm_d, (mnk: (usize, usize, usize), t: Tile<E>) -> ());

/// The shape `(m, n, k)` of `C (+)= A·B` with views `a` (`m × k`), `b` (`k × n`), `c`
/// (`m × n`); checks, in debug builds, that the views agree and that B's and C's rows are
/// contiguous.
#[inline(always)]
fn shape<T>(a: &MatRef<'_, T>, b: &MatRef<'_, T>, c: &MatMut<'_, T>) -> (usize, usize, usize) {
    let (m, n, k) = (c.rows(), c.cols(), a.cols());
    debug_assert!(
        a.rows() == m && b.rows() == k && b.cols() == n,
        "gemm: A {a:?}, B {b:?}, C {c:?} do not agree"
    );
    debug_assert!(
        n <= 1 || (b.cs() == 1 && c.cs() == 1),
        "gemm: B and C need contiguous rows"
    );
    (m, n, k)
}

/// `C ← alpha·A·B` (`accumulate = false`) or `C ← C + A·B` (`accumulate = true`, `alpha`
/// ignored) on views: `A` is `m × k` read element by element through its strides (any), `B`
/// is `k × n` and `C` is `m × n`, both with contiguous rows (column stride 1). Columns are
/// computed in whole vectors, so for `n` not a multiple of [`PAD`] the columns up to
/// `padded(n)` may be read from `B`'s rows and written to `C`'s (with unspecified values). The
/// summation over `p` runs in index order for every element, so the result does not depend on
/// the blocking or on the variant's column tail.
///
/// # Safety
/// The views' rows of `B` and `C` must be valid (readable; for `C` writable) up to `padded(n)`
/// columns, past the views' own `n`; `c` must not alias `a`, `b` (a view built by a safe
/// constructor guarantees that); `isa` must be supported.
#[inline]
pub unsafe fn gemm<T: Real>(
    isa: Isa,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    mut c: MatMut<'_, T>,
    accumulate: bool,
    alpha: T,
) {
    let mnk = shape(&a, &b, &c);
    let (rsc, cp) = (c.rs(), c.as_mut_ptr());
    // SAFETY: the caller guarantees `isa` is supported, A, B and C valid for the shapes and
    // strides with `padded(n)` columns of B and C, and C not aliasing A or B (this function's
    // contract); the starting rows are C's own (`Init::rows(c, rsc)`, read before they are
    // overwritten, in the same block). `E` is `T` itself, so the casts keep type and
    // alignment and the `alpha` read is of an initialised `E`.
    simd_by_kind!(T, E => unsafe {
        let t = Tile {
            a: a.as_ptr().cast(),
            rsa: a.rs(),
            csa: a.cs(),
            b: b.as_ptr().cast(),
            rsb: b.rs(),
            c: cp.cast(),
            rsc,
            init: Init::rows(cp.cast_const().cast(), rsc),
            accumulate,
            alpha: *(&alpha as *const T).cast::<E>(),
        };
        gemm_d::<E>(isa, mnk, t)
    })
}

/// `C ← ((A·B) + cb) + ci` on [`gemm`]'s views: the products summed over `p` in index order
/// from zero, then the row `cb` added when it is not null, then the rows of `ci` (row `i` at
/// `ci[i·rsi]`, up to `padded(n)` columns; `rsi = 0` adds the same vector to every row): the
/// bits of a product, a bias and a residual added in separate passes, in one.
///
/// # Safety
/// As [`gemm`]; `ci` valid for reads of the rows it names, and `cb`, when not null, for reads
/// of `padded(n)` elements.
#[inline]
pub(crate) unsafe fn gemm_from<T: Real>(
    isa: Isa,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    mut c: MatMut<'_, T>,
    (ci, rsi): (*const T, isize),
    cb: *const T,
) {
    let mnk = shape(&a, &b, &c);
    let (rsc, cp) = (c.rs(), c.as_mut_ptr());
    // SAFETY: the caller guarantees `gemm`'s contract, that `ci` is readable for the rows it
    // names up to `padded(n)` columns and `cb`, when not null, for `padded(n)` elements (this
    // function's contract); `E` is `T` itself, so the casts keep type and alignment.
    simd_by_kind!(T, E => unsafe {
        let t = Tile {
            a: a.as_ptr().cast(),
            rsa: a.rs(),
            csa: a.cs(),
            b: b.as_ptr().cast(),
            rsb: b.rs(),
            c: cp.cast(),
            rsc,
            init: Init { ci: ci.cast(), rsi, cb: cb.cast(), last: true },
            accumulate: true,
            alpha: E::ONE,
        };
        gemm_d::<E>(isa, mnk, t)
    })
}

/// `dst[c·ldd + r] = src[r·ld + c0 + c]` for `r < rows`, `c < w`, and zero for
/// `rows ≤ r < ldd`: the columns `[c0, c0 + w)` of a row-major block into the rows of a padded
/// buffer (the attention's transposed operands). With AVX-512 in f32 and `ldd` a multiple of
/// 16, 16 × 16 tiles are transposed in registers. Only data moves, so every variant gives the
/// same values.
///
/// # Panics
/// If `src` or `dst` is too short for the shape, or `ldd < rows`.
#[allow(clippy::too_many_arguments)]
pub fn transpose_cols<T: Real>(
    isa: Isa,
    src: &[T],
    ld: usize,
    c0: usize,
    w: usize,
    rows: usize,
    dst: &mut [T],
    ldd: usize,
) {
    if rows == 0 || w == 0 {
        dst[..w * ldd].fill(T::ZERO);
        return;
    }
    use ndarray::ShapeBuilder;
    let view =
        ndarray::ArrayView2::from_shape((rows, w).strides((ld, 1)), src.get(c0..).unwrap_or(&[]))
            .expect("transpose_cols: src too short for rows × w at stride ld");
    crate::problem::pack_cols(isa.or_scalar(), &view, 0, rows, dst, ldd);
}

mod checked;
mod rows;
mod softmax;
pub use checked::{gemm_checked, gemm_checked_bias_into, gemm_checked_from, gemm_checked_into};
pub use rows::{dot_rows, scale_rows};
pub use softmax::{
    ds_cols, ds_row, ds_rows, online_softmax_t, probabilities, softmax_cols, softmax_cols_again,
    softmax_cols_keep, softmax_rows,
};

#[cfg(test)]
mod tests;
