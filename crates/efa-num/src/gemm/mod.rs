//! efa's own GEMM: `C ← α·A·B + β·C` with arbitrary (row, column) strides, blocked for the
//! caches, with packed panels and register-tile microkernels for AVX-512, AVX2 + FMA and a
//! portable scalar path, selected at run time by [`crate::simd::active`] (`EFA_SIMD` forces
//! one). `matrixmultiply` stays as the reference ([`reference_gemm`]) and as the
//! implementation on other architectures.
//!
//! Register tiles (`MR` rows × `NR` columns of `C`; vectors along the columns, one broadcast
//! of `A` per row and step of `k`):
//!
//! | variant | f32     | f64 (compensated) | accumulators (f32; f64)      |
//! |---------|---------|-------------------|------------------------------|
//! | AVX-512 | 12 × 32 | 4 × 16            | 24 zmm of 32; 8 + 8 zmm      |
//! | AVX2    | 6 × 16  | 2 × 8             | 12 ymm of 16; 4 + 4 ymm      |
//! | scalar  | 4 × 4   | 4 × 4             | 16 scalars; 16 + 16 scalars  |
//!
//! **f64 sums are compensated.** f64 is the dtype that audits gradients against the
//! double-double reference (`efa audit --precision`), so its products are as accurate as a
//! double-double sum rounded once, up to the condition of the sum: every term goes through an
//! error-free product and TwoSum ([`crate::simd::SimdVec::dot2_step`], Ogita, Rump and Oishi's
//! `Dot2`), the errors are gathered in a second accumulator and added once, and `k` is never
//! split into blocks (a fold into `C` between blocks would round the compensated sum; the A
//! and B blocks shrink with `k` instead). The error is at most `u·|Σ| + γ_k²·Σ|a·b|`, where a
//! plain sum has `γ_k·Σ|a·b|`: on the temperature model at sharp weights, whose first block's
//! scores are sums of products a hundred times larger, this took the f64 error of the
//! training plan's query and key kernels from 1.9e-10 to within a few times the floor that
//! f64 storage alone sets (docs/design.md §3c). It costs about ten operations per term
//! instead of one fused multiply-add (the `gemm_models_f64` bench). f32, the training dtype,
//! keeps the plain fused sums.
//!
//! A core with two 512-bit FMA ports of latency 4 (Sapphire Rapids class) needs at least
//! 2 × 4 = 8 independent FMAs in flight; 24 accumulators cover that three times over and leave
//! registers for the two B vectors and the broadcast. Per step of `k` the AVX-512 tile issues
//! 24 FMAs against 2 vector loads and 12 broadcasts (folded into the FMAs), below the two
//! loads per cycle that two FMAs per cycle allow. On cores that split 512-bit operations in
//! two (Zen 4) the same tile runs at their single 512-bit FMA per cycle. The cache blocks
//! ([`MC`], [`KC_BYTES`], [`NC`]) are derived in their docs.
//!
//! Small products (the models' `[B·N, d] × [d, out]`, `d` 16–128) take the direct path, which
//! reads `A` through its strides instead of packing it; see [`Path`].
//!
//! **Determinism.** Each element of `C` is `Σ_p A[i,p]·B[p,j]` summed in index order within
//! fixed blocks of `k` (a function of `k` and the element type only; f64: one block), then
//! folded into `C` block by block with one fused (or, on the scalar path, the same unfused)
//! formula. Which
//! tile, path ([`Path`]) or thread computes an element does not change it: [`gemm_par`] gives
//! the same bits at any thread count, and equals [`gemm`] on the same variant. Results differ
//! from `matrixmultiply` and between variants by round-off.
//!
//! **Double-double.** For `T = Dd` (the precision reference, [`crate::Dd`]) every entry point
//! ([`gemm`], [`gemm_with`], [`gemm_par`], [`gemm_par_with`], [`reference_gemm`]) runs one
//! plain triple loop in double-double instead (`dd.rs`: each element's sum accumulated in
//! index order in Dd, then `α·sum + β·C`; same contract, one thread, so every entry point,
//! variant and path gives the same bits), and [`tile_shape`] is `(1, 1)`.

mod dd;
mod driver;
mod kernel;
mod pack;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_compensated;
#[cfg(test)]
mod tests_dd;

use crate::dd::cast::{is_dd, to_dd};
use crate::mat::{MatMut, MatRef};
use crate::simd::{self, Isa};
use crate::{simd_by_kind, Real};
use driver::{resolve, run, tile_dims, Problem};
pub use driver::{KC_BYTES, MC, NC};
use rayon::prelude::*;

/// Whether the product packs `A` into panels or reads it in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Chosen per product from the strides of `A`: direct when its rows are contiguous and
    /// under 4 KB apart (the models' `[B·N, d]` activations), or its columns contiguous and at
    /// most 512 bytes apart (a transposed `[B·N, d]` with `d ≤ 128` in f32); packed otherwise
    /// (large leading dimensions such as the 2048³ product, where a strip's rows would share
    /// L1 sets and pages). Measured crossovers are in the driver's documentation.
    Auto,
    /// Pack `A` and `B` (the classic blocked algorithm).
    Packed,
    /// Pack only `B`; read full `MR`-row strips of `A` through its strides (the last partial
    /// strip is packed, so nothing past the matrix is read).
    Direct,
}

/// `C ← α·A·B + β·C` on the variant chosen by [`simd::active`] (single-threaded; the tape
/// calls it from inside rayon tasks). `A` is `m × k`, `B` `k × n`, `C` `m × n`, each read (or
/// written) through its view's strides, which may be any values (transposed operands need no
/// copy: [`MatRef::t`]). β = 0 does not read `C` (NaN contents are overwritten); `k = 0` or
/// α = 0 gives `C ← β·C` without reading `A` or `B`. On other architectures than x86-64 this
/// is [`reference_gemm`].
///
/// # Panics
/// If the shapes do not agree (`A` `m × k`, `B` `k × n`, `C` `m × n`); the message names them.
#[inline]
#[track_caller]
pub fn gemm<T: Real>(alpha: T, a: MatRef<'_, T>, b: MatRef<'_, T>, beta: T, c: MatMut<'_, T>) {
    #[cfg(target_arch = "x86_64")]
    gemm_with(simd::active(), Path::Auto, alpha, a, b, beta, c);
    #[cfg(not(target_arch = "x86_64"))]
    reference_gemm(alpha, a, b, beta, c);
}

/// [`gemm`] on an explicit variant and [`Path`] (for tests and benchmarks). A variant the
/// CPU lacks runs the scalar path.
///
/// # Panics
/// As [`gemm`].
#[inline]
#[track_caller]
pub fn gemm_with<T: Real>(
    isa: Isa,
    path: Path,
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    mut c: MatMut<'_, T>,
) {
    check_shapes("gemm_with", &a, &b, &c);
    if dd_route(alpha, a, b, beta, c.rb_mut()) {
        return;
    }
    let isa = isa.or_scalar();
    simd_by_kind!(T, E => {
        // SAFETY: T is E (same type), so the casts are identities.
        let p = unsafe { Problem::new(same::<T, E>(alpha), a.cast::<E>(), b.cast::<E>(), same::<T, E>(beta), c.cast::<E>()) };
        let direct = resolve(path, &p);
        // SAFETY: the views are valid (their type's guarantee) and C, borrowed uniquely,
        // overlaps neither A nor B; `isa` is supported (checked above).
        unsafe { run(isa, direct, p) }
    })
}

/// [`gemm`] with the rows (or, when `C` has more column tiles than row tiles, the columns) of
/// `C` split into one contiguous part per thread of the current rayon pool; each part runs the
/// single-threaded blocked product. Only `C` is split, never `k`, so the result is bitwise the
/// same at any thread count (and equal to [`gemm`] on the same variant). Run it inside
/// `pool.install(..)` to choose the threads.
///
/// # Panics
/// As [`gemm`].
#[track_caller]
pub fn gemm_par<T: Real>(alpha: T, a: MatRef<'_, T>, b: MatRef<'_, T>, beta: T, c: MatMut<'_, T>) {
    gemm_par_with(simd::active(), Path::Auto, alpha, a, b, beta, c)
}

/// [`gemm_par`] on an explicit variant and [`Path`] (a variant the CPU lacks runs the scalar
/// path). The path is resolved once for the whole product.
///
/// # Panics
/// As [`gemm`].
#[track_caller]
pub fn gemm_par_with<T: Real>(
    isa: Isa,
    path: Path,
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    mut c: MatMut<'_, T>,
) {
    let (m, _, n) = check_shapes("gemm_par_with", &a, &b, &c);
    if dd_route(alpha, a, b, beta, c.rb_mut()) {
        return;
    }
    let isa = isa.or_scalar();
    simd_by_kind!(T, E => {
        // SAFETY: T is E (same type), so the casts are identities.
        let p = unsafe { Problem::new(same::<T, E>(alpha), a.cast::<E>(), b.cast::<E>(), same::<T, E>(beta), c.cast::<E>()) };
        let direct = resolve(path, &p);
        let threads = rayon::current_num_threads().max(1);
        let (mr, nr) = tile_dims::<E>(isa);
        let (mu, nu) = (m.div_ceil(mr), n.div_ceil(nr));
        let (units, unit, by_rows) = if mu >= nu { (mu, mr, true) } else { (nu, nr, false) };
        let per = units.div_ceil(threads.min(units).max(1)).max(1) * unit;
        let len = if by_rows { m } else { n };
        let parts = len.div_ceil(per.max(1));
        if parts <= 1 {
            // SAFETY: valid views, C unique (as in `gemm_with`); `isa` supported.
            unsafe { run(isa, direct, p) };
        } else {
            (0..parts).into_par_iter().for_each(|t| {
                let (s, e) = (t * per, ((t + 1) * per).min(len));
                let q = if by_rows { p.rows(s, e - s) } else { p.cols(s, e - s) };
                // SAFETY: each part is the sub-product of rows (or columns) s..e, inside the
                // views; parts write disjoint parts of C, whose view addresses no element
                // twice, and C is borrowed uniquely for the call.
                unsafe { run(isa, direct, q) };
            });
        }
    })
}

/// The reference: `matrixmultiply::sgemm` / `dgemm` with the contract of [`gemm`] (its own
/// blocking and kernels, AVX2 at most, single-threaded here).
///
/// # Panics
/// As [`gemm`].
#[track_caller]
pub fn reference_gemm<T: Real>(
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    mut c: MatMut<'_, T>,
) {
    check_shapes("reference_gemm", &a, &b, &c);
    if dd_route(alpha, a, b, beta, c.rb_mut()) {
        return;
    }
    simd_by_kind!(T, E => {
        // SAFETY: T is E (same type), so the casts are identities.
        let (alpha, a, b, beta, c) = unsafe { (same::<T, E>(alpha), a.cast::<E>(), b.cast::<E>(), same::<T, E>(beta), c.cast::<E>()) };
        E::mm(alpha, a, b, beta, c)
    })
}

/// `(m, k, n)` of `C ← α·A·B + β·C`.
///
/// # Panics
/// If `A` is not `m × k`, `B` `k × n` and `C` `m × n`.
#[inline]
#[track_caller]
fn check_shapes<T>(
    what: &str,
    a: &MatRef<'_, T>,
    b: &MatRef<'_, T>,
    c: &MatMut<'_, T>,
) -> (usize, usize, usize) {
    assert!(
        a.cols() == b.rows() && a.rows() == c.rows() && b.cols() == c.cols(),
        "{what}: A {} × {} times B {} × {} into C {} × {}",
        a.rows(),
        a.cols(),
        b.rows(),
        b.cols(),
        c.rows(),
        c.cols()
    );
    (a.rows(), a.cols(), b.cols())
}

/// `x` as `E`.
///
/// # Safety
/// `E` must be `T`.
#[inline(always)]
unsafe fn same<T: Copy, E: Copy>(x: T) -> E {
    // SAFETY: the caller guarantees E is T.
    unsafe { *(&x as *const T).cast::<E>() }
}

/// The double-double type's plain loop (`dd::gemm_dd`) when `T` is `Dd`: true if it ran.
#[inline(always)]
fn dd_route<T: Real>(
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    c: MatMut<'_, T>,
) -> bool {
    let (Some(alpha), Some(beta)) = (to_dd(alpha), to_dd(beta)) else {
        return false;
    };
    // SAFETY: T is Dd (`to_dd` succeeded), so the views address Dd values.
    let (a, b, c) = unsafe { (a.cast(), b.cast(), c.cast()) };
    dd::gemm_dd(alpha, a, b, beta, c);
    true
}

/// matrixmultiply's entry for each element type.
trait Reference: Sized {
    fn mm(alpha: Self, a: MatRef<'_, Self>, b: MatRef<'_, Self>, beta: Self, c: MatMut<'_, Self>);
}

impl Reference for f32 {
    fn mm(alpha: f32, a: MatRef<'_, f32>, b: MatRef<'_, f32>, beta: f32, mut c: MatMut<'_, f32>) {
        let (m, k, n) = (a.rows(), a.cols(), b.cols());
        // SAFETY: the views are valid and C (unique) overlaps neither A nor B: matrixmultiply's
        // contract.
        unsafe {
            matrixmultiply::sgemm(
                m,
                k,
                n,
                alpha,
                a.as_ptr(),
                a.rs(),
                a.cs(),
                b.as_ptr(),
                b.rs(),
                b.cs(),
                beta,
                c.as_mut_ptr(),
                c.rs(),
                c.cs(),
            )
        }
    }
}

// The double-double type's "reference" is its own loop (the entry point above takes it before
// the by-kind dispatch; this impl only lets that dispatch type-check for Dd).
impl Reference for crate::Dd {
    fn mm(
        alpha: crate::Dd,
        a: MatRef<'_, crate::Dd>,
        b: MatRef<'_, crate::Dd>,
        beta: crate::Dd,
        c: MatMut<'_, crate::Dd>,
    ) {
        dd::gemm_dd(alpha, a, b, beta, c)
    }
}

impl Reference for f64 {
    fn mm(alpha: f64, a: MatRef<'_, f64>, b: MatRef<'_, f64>, beta: f64, mut c: MatMut<'_, f64>) {
        let (m, k, n) = (a.rows(), a.cols(), b.cols());
        // SAFETY: as for f32.
        unsafe {
            matrixmultiply::dgemm(
                m,
                k,
                n,
                alpha,
                a.as_ptr(),
                a.rs(),
                a.cs(),
                b.as_ptr(),
                b.rs(),
                b.cs(),
                beta,
                c.as_mut_ptr(),
                c.rs(),
                c.cs(),
            )
        }
    }
}

/// The register tile `(MR, NR)` the variant `isa` uses for `T` (what [`gemm_par`] aligns its
/// parts to); `(1, 1)` for Dd, whose loop computes one element at a time.
pub fn tile_shape<T: Real>(isa: Isa) -> (usize, usize) {
    if is_dd::<T>() {
        // The double-double loop computes one element at a time.
        return (1, 1);
    }
    simd_by_kind!(T, E => tile_dims::<E>(isa.or_scalar()))
}
