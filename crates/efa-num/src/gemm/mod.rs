//! efa's own GEMM: `C ← α·A·B + β·C` with arbitrary (row, column) strides, blocked for the
//! caches, with packed panels and register-tile microkernels for AVX-512, AVX2 + FMA and a
//! portable scalar path, selected at run time by [`crate::simd::active`] (`EFA_SIMD` forces
//! one). `matrixmultiply` stays as the reference ([`reference_gemm`]) and as the
//! implementation on other architectures.
//!
//! Register tiles (`MR` rows × `NR` columns of `C`; vectors along the columns, one broadcast
//! of `A` per row and step of `k`):
//!
//! | variant | f32     | f64     | accumulators |
//! |---------|---------|---------|--------------|
//! | AVX-512 | 12 × 32 | 12 × 16 | 24 zmm of 32 |
//! | AVX2    | 6 × 16  | 6 × 8   | 12 ymm of 16 |
//! | scalar  | 4 × 4   | 4 × 4   | 16 scalars   |
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
//! fixed blocks of `k` (a function of `k` and the element type only), then folded into `C`
//! block by block with one fused (or, on the scalar path, the same unfused) formula. Which
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
mod tests_dd;

use crate::dd::cast::{is_dd, to_dd};
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
/// calls it from inside rayon tasks). `A` is `m × k` at `a[i·rsa + p·csa]`, `B` is `k × n` at
/// `b[p·rsb + j·csb]`, `C` is `m × n` at `c[i·rsc + j·csc]`; strides are in elements and may
/// be any values (transposed operands need no copy). β = 0 does not read `C` (NaN or
/// uninitialised contents are overwritten); `k = 0` or α = 0 gives `C ← β·C` without reading
/// `A` or `B`. On other architectures than x86-64 this is [`reference_gemm`].
///
/// # Safety
/// Every address formed from a pointer and its strides over the stated shape must be valid
/// (reads for `a`, `b`; reads and writes for `c`), and `C` must not overlap `A` or `B`, nor
/// address one element twice.
#[allow(clippy::too_many_arguments)]
#[inline]
pub unsafe fn gemm<T: Real>(
    m: usize,
    k: usize,
    n: usize,
    alpha: T,
    a: *const T,
    rsa: isize,
    csa: isize,
    b: *const T,
    rsb: isize,
    csb: isize,
    beta: T,
    c: *mut T,
    rsc: isize,
    csc: isize,
) {
    // SAFETY: forwarded contract; `active()` is supported by construction.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        gemm_with(
            simd::active(),
            Path::Auto,
            m,
            k,
            n,
            alpha,
            a,
            rsa,
            csa,
            b,
            rsb,
            csb,
            beta,
            c,
            rsc,
            csc,
        );
        #[cfg(not(target_arch = "x86_64"))]
        reference_gemm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc);
    }
}

/// [`gemm`] on an explicit variant and [`Path`] (for tests and benchmarks). A variant the
/// CPU lacks runs the scalar path.
///
/// # Safety
/// As for [`gemm`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_with<T: Real>(
    isa: Isa,
    path: Path,
    m: usize,
    k: usize,
    n: usize,
    alpha: T,
    a: *const T,
    rsa: isize,
    csa: isize,
    b: *const T,
    rsb: isize,
    csb: isize,
    beta: T,
    c: *mut T,
    rsc: isize,
    csc: isize,
) {
    // SAFETY: forwarded contract.
    if unsafe { dd_route(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc) } {
        return;
    }
    let isa = isa.or_scalar();
    simd_by_kind!(T, E => {
        // SAFETY: T is E (same type), so the casts are identities.
        let (alpha, beta) = unsafe { (*(&alpha as *const T).cast::<E>(), *(&beta as *const T).cast::<E>()) };
        let p = Problem { m, k, n, alpha, a: a.cast::<E>(), rsa, csa, b: b.cast::<E>(), rsb, csb, beta, c: c.cast::<E>(), rsc, csc };
        let direct = resolve(path, &p);
        // SAFETY: forwarded contract; `isa` is supported (checked above).
        unsafe { run(isa, direct, p) }
    })
}

/// [`gemm`] with the rows (or, when `C` has more column tiles than row tiles, the columns) of
/// `C` split into one contiguous part per thread of the current rayon pool; each part runs the
/// single-threaded blocked product. Only `C` is split, never `k`, so the result is bitwise the
/// same at any thread count (and equal to [`gemm`] on the same variant). Run it inside
/// `pool.install(..)` to choose the threads.
///
/// # Safety
/// As for [`gemm`]; additionally `C` must be safe to write from other threads (it is not
/// shared with anything else during the call).
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_par<T: Real>(
    m: usize,
    k: usize,
    n: usize,
    alpha: T,
    a: *const T,
    rsa: isize,
    csa: isize,
    b: *const T,
    rsb: isize,
    csb: isize,
    beta: T,
    c: *mut T,
    rsc: isize,
    csc: isize,
) {
    // SAFETY: forwarded contract.
    unsafe {
        gemm_par_with(
            simd::active(),
            Path::Auto,
            m,
            k,
            n,
            alpha,
            a,
            rsa,
            csa,
            b,
            rsb,
            csb,
            beta,
            c,
            rsc,
            csc,
        )
    }
}

/// [`gemm_par`] on an explicit variant and [`Path`] (a variant the CPU lacks runs the scalar
/// path). The path is resolved once for the whole product.
///
/// # Safety
/// As for [`gemm_par`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_par_with<T: Real>(
    isa: Isa,
    path: Path,
    m: usize,
    k: usize,
    n: usize,
    alpha: T,
    a: *const T,
    rsa: isize,
    csa: isize,
    b: *const T,
    rsb: isize,
    csb: isize,
    beta: T,
    c: *mut T,
    rsc: isize,
    csc: isize,
) {
    // SAFETY: forwarded contract.
    if unsafe { dd_route(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc) } {
        return;
    }
    let isa = isa.or_scalar();
    simd_by_kind!(T, E => {
        // SAFETY: T is E (same type), so the casts are identities.
        let (alpha, beta) = unsafe { (*(&alpha as *const T).cast::<E>(), *(&beta as *const T).cast::<E>()) };
        let p = Problem { m, k, n, alpha, a: a.cast::<E>(), rsa, csa, b: b.cast::<E>(), rsb, csb, beta, c: c.cast::<E>(), rsc, csc };
        let direct = resolve(path, &p);
        let threads = rayon::current_num_threads().max(1);
        let (mr, nr) = tile_dims::<E>(isa);
        let (mu, nu) = (m.div_ceil(mr), n.div_ceil(nr));
        let (units, unit, by_rows) = if mu >= nu { (mu, mr, true) } else { (nu, nr, false) };
        let per = units.div_ceil(threads.min(units).max(1)).max(1) * unit;
        let len = if by_rows { m } else { n };
        let parts = len.div_ceil(per.max(1));
        if parts <= 1 {
            // SAFETY: forwarded contract; `isa` supported.
            unsafe { run(isa, direct, p) };
        } else {
            (0..parts).into_par_iter().for_each(|t| {
                let (s, e) = (t * per, ((t + 1) * per).min(len));
                let q = if by_rows { p.rows(s, e - s) } else { p.cols(s, e - s) };
                // SAFETY: each part is the sub-product of rows (or columns) s..e, inside the
                // caller's matrices; parts write disjoint parts of C.
                unsafe { run(isa, direct, q) };
            });
        }
    })
}

/// The reference: `matrixmultiply::sgemm` / `dgemm` with the same contract as [`gemm`]
/// (its own blocking and kernels, AVX2 at most, single-threaded here).
///
/// # Safety
/// As for [`gemm`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn reference_gemm<T: Real>(
    m: usize,
    k: usize,
    n: usize,
    alpha: T,
    a: *const T,
    rsa: isize,
    csa: isize,
    b: *const T,
    rsb: isize,
    csb: isize,
    beta: T,
    c: *mut T,
    rsc: isize,
    csc: isize,
) {
    // SAFETY: forwarded contract.
    if unsafe { dd_route(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc) } {
        return;
    }
    simd_by_kind!(T, E => {
        // SAFETY: T is E; forwarded contract (matrixmultiply's is the same).
        unsafe {
            let (alpha, beta) = (*(&alpha as *const T).cast::<E>(), *(&beta as *const T).cast::<E>());
            let (a, b, c) = (a.cast::<E>(), b.cast::<E>(), c.cast::<E>());
            reference_e(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc)
        }
    })
}

/// The double-double type's plain loop (`dd::gemm_dd`) when `T` is `Dd`: true if it ran.
///
/// # Safety
/// As [`gemm`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn dd_route<T: Real>(
    m: usize,
    k: usize,
    n: usize,
    alpha: T,
    a: *const T,
    rsa: isize,
    csa: isize,
    b: *const T,
    rsb: isize,
    csb: isize,
    beta: T,
    c: *mut T,
    rsc: isize,
    csc: isize,
) -> bool {
    let (Some(alpha), Some(beta)) = (to_dd(alpha), to_dd(beta)) else {
        return false;
    };
    // SAFETY: T is Dd, so the pointers address Dd values; forwarded contract.
    unsafe {
        dd::gemm_dd(
            m,
            k,
            n,
            alpha,
            a.cast(),
            rsa,
            csa,
            b.cast(),
            rsb,
            csb,
            beta,
            c.cast(),
            rsc,
            csc,
        )
    };
    true
}

/// matrixmultiply's entry for each element type.
trait Reference: Sized {
    #[allow(clippy::too_many_arguments)]
    unsafe fn mm(
        m: usize,
        k: usize,
        n: usize,
        alpha: Self,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        beta: Self,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    );
}

impl Reference for f32 {
    unsafe fn mm(
        m: usize,
        k: usize,
        n: usize,
        alpha: f32,
        a: *const f32,
        rsa: isize,
        csa: isize,
        b: *const f32,
        rsb: isize,
        csb: isize,
        beta: f32,
        c: *mut f32,
        rsc: isize,
        csc: isize,
    ) {
        // SAFETY: forwarded contract.
        unsafe {
            matrixmultiply::sgemm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc)
        }
    }
}

// The double-double type's "reference" is its own loop (the entry point above takes it before
// the by-kind dispatch; this impl only lets that dispatch type-check for Dd).
impl Reference for crate::Dd {
    unsafe fn mm(
        m: usize,
        k: usize,
        n: usize,
        alpha: crate::Dd,
        a: *const crate::Dd,
        rsa: isize,
        csa: isize,
        b: *const crate::Dd,
        rsb: isize,
        csb: isize,
        beta: crate::Dd,
        c: *mut crate::Dd,
        rsc: isize,
        csc: isize,
    ) {
        // SAFETY: forwarded contract.
        unsafe { dd::gemm_dd(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc) }
    }
}

impl Reference for f64 {
    unsafe fn mm(
        m: usize,
        k: usize,
        n: usize,
        alpha: f64,
        a: *const f64,
        rsa: isize,
        csa: isize,
        b: *const f64,
        rsb: isize,
        csb: isize,
        beta: f64,
        c: *mut f64,
        rsc: isize,
        csc: isize,
    ) {
        // SAFETY: forwarded contract.
        unsafe {
            matrixmultiply::dgemm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc)
        }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn reference_e<E: Reference>(
    m: usize,
    k: usize,
    n: usize,
    alpha: E,
    a: *const E,
    rsa: isize,
    csa: isize,
    b: *const E,
    rsb: isize,
    csb: isize,
    beta: E,
    c: *mut E,
    rsc: isize,
    csc: isize,
) {
    // SAFETY: forwarded contract.
    unsafe { E::mm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc) }
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
