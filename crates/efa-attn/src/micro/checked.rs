//! The micro kernel on slices: every bound checked, then [`gemm`] (or its start-row variant).

use super::{gemm, gemm_from, padded};
use efa_num::simd::Isa;
use efa_num::Real;
use std::mem::MaybeUninit;

/// [`gemm`] on slices with every bound checked: `C ← alpha·A·B` (`accumulate = false`) or
/// `C ← C + A·B` (`accumulate = true`), `A` `m × k` at `a[i·rsa + p·csa]`, `B` `k × n` with
/// rows at `b[p·ldb]`, `C` rows at `c[i·ldc]`; `B` and `C` rows are read and written up to
/// `padded(n)` columns, so `ldb` and `ldc` must be at least that.
///
/// # Panics
/// If a slice is too short for its shape and strides (an internal invariant of the callers:
/// the kernels size their buffers from the same shapes).
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn gemm_checked<T: Real>(
    isa: Isa,
    mnk: (usize, usize, usize),
    a: &[T],
    (rsa, csa): (usize, usize),
    b: &[T],
    ldb: usize,
    c: &mut [T],
    ldc: usize,
    accumulate: bool,
    alpha: T,
) {
    let c_len = c.len();
    // SAFETY: `c` is initialised, so the kernel may read it when accumulating.
    unsafe {
        gemm_bounded(
            isa,
            mnk,
            a,
            (rsa, csa),
            b,
            ldb,
            (c.as_mut_ptr(), c_len),
            ldc,
            accumulate,
            alpha,
        )
    }
}

/// [`gemm_checked`] without accumulation into a `C` not yet written: the kernel writes at
/// least columns `[0, n)` of each of the `m` rows (at most `[0, padded(n))`: how far a vector
/// tail reaches depends on the instruction set) and never reads them, so afterwards columns
/// `[0, n)` are initialised; the caller writes any others it reads.
///
/// # Panics
/// As [`gemm_checked`].
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn gemm_checked_into<T: Real>(
    isa: Isa,
    mnk: (usize, usize, usize),
    a: &[T],
    strides_a: (usize, usize),
    b: &[T],
    ldb: usize,
    c: &mut [MaybeUninit<T>],
    ldc: usize,
    alpha: T,
) {
    let c_len = c.len();
    // SAFETY: without accumulation the kernel only writes C (initialised values).
    unsafe {
        gemm_bounded(
            isa,
            mnk,
            a,
            strides_a,
            b,
            ldb,
            (c.as_mut_ptr().cast::<T>(), c_len),
            ldc,
            false,
            alpha,
        )
    }
}

/// `C ← bias + A·B` row by row into a `C` not yet written (`bias` repeated on every row): the
/// same bits as writing the bias rows and then accumulating with [`gemm_checked`] (every sum
/// starts from its bias element and adds the products over `p` in index order), without the
/// pass that writes the bias rows first. `bias` holds at least `padded(n)` elements (its
/// padding columns, usually zeros, start the padding columns of `C`). Columns `[0, n)` of every
/// row are written (at most `[0, padded(n))`, as [`gemm_checked_into`]) and never read.
///
/// # Panics
/// As [`gemm_checked`], or if `bias` is shorter than `padded(n)`.
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn gemm_checked_bias_into<T: Real>(
    isa: Isa,
    mnk: (usize, usize, usize),
    a: &[T],
    strides_a: (usize, usize),
    b: &[T],
    ldb: usize,
    bias: &[T],
    c: &mut [MaybeUninit<T>],
    ldc: usize,
) {
    let c_len = c.len();
    // SAFETY: C is uniquely borrowed and only written (its starting values come from `bias`),
    // with initialised values.
    unsafe {
        gemm_started(
            isa,
            mnk,
            (a, strides_a),
            (b, ldb),
            ((bias, 0), None),
            (c.as_mut_ptr().cast::<T>(), c_len),
            ldc,
        )
    }
}

/// `C ← (S + bias) + A·B` row by row: each row of `C` starts from the same row of `S` (rows at
/// `s[i·lds]`) plus `bias`, then adds the products: the same bits as writing `S + bias` into
/// `C` and accumulating with [`gemm_checked`], without that pass. `S` rows and `bias` are read
/// up to `padded(n)` columns (so `lds ≥ padded(n)`); `C` as [`gemm_checked`].
///
/// # Panics
/// As [`gemm_checked`], or if `S` or `bias` is too short.
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn gemm_checked_from<T: Real>(
    isa: Isa,
    mnk: (usize, usize, usize),
    a: &[T],
    strides_a: (usize, usize),
    b: &[T],
    ldb: usize,
    start: (&[T], usize),
    bias: &[T],
    c: &mut [T],
    ldc: usize,
) {
    let c_len = c.len();
    // SAFETY: C is a unique borrow (it cannot alias the shared operands).
    unsafe {
        gemm_started(
            isa,
            mnk,
            (a, strides_a),
            (b, ldb),
            (start, Some(bias)),
            (c.as_mut_ptr(), c_len),
            ldc,
        )
    }
}

/// The checks and the kernel call of [`gemm_checked_bias_into`] and [`gemm_checked_from`]:
/// rows of `C` start from the rows of `start` (at its stride; 0 repeats one row) plus `bias`,
/// both read up to `padded(n)` columns.
///
/// # Safety
/// `c` points to `c.1` elements that are uniquely borrowed (aliasing neither operand).
#[track_caller]
unsafe fn gemm_started<T: Real>(
    isa: Isa,
    (m, n, k): (usize, usize, usize),
    (a, (rsa, csa)): (&[T], (usize, usize)),
    (b, ldb): (&[T], usize),
    ((start, lds), bias): ((&[T], usize), Option<&[T]>),
    (c, c_len): (*mut T, usize),
    ldc: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    let np = padded(n);
    assert!(bias.is_none_or(|b| b.len() >= np), "gemm: bias bounds");
    assert!(
        (lds == 0 || lds >= np) && (m - 1) * lds + np <= start.len(),
        "gemm: start bounds"
    );
    check_bounds((m, n, k), a.len(), (rsa, csa), b.len(), ldb, c_len, ldc);
    // A variant the CPU lacks runs as the scalar path (the public safe callers pass any `isa`).
    let isa = isa.or_scalar();
    // SAFETY: the checks keep every element read (A, B, the start rows, the bias) or written
    // (C rows up to the padded width) inside the slices; the caller guarantees C is unique;
    // `isa` is supported (`or_scalar` above).
    unsafe {
        gemm_from(
            isa,
            (m, n, k),
            (a.as_ptr(), rsa as isize, csa as isize),
            (b.as_ptr(), ldb as isize),
            (c, ldc as isize),
            (start.as_ptr(), lds as isize),
            bias.map_or(std::ptr::null(), |b| b.as_ptr()),
        );
    }
}

/// The bounds of [`gemm_checked`]'s operands.
#[track_caller]
fn check_bounds(
    (m, n, k): (usize, usize, usize),
    a_len: usize,
    (rsa, csa): (usize, usize),
    b_len: usize,
    ldb: usize,
    c_len: usize,
    ldc: usize,
) {
    let np = padded(n);
    assert!(
        k == 0 || (m - 1) * rsa + (k - 1) * csa < a_len,
        "gemm: A bounds"
    );
    assert!(
        k == 0 || ((k - 1) * ldb + np <= b_len && ldb >= np),
        "gemm: B bounds"
    );
    assert!((m - 1) * ldc + np <= c_len && ldc >= np, "gemm: C bounds");
}

/// The bounds checks of [`gemm_checked`] and the kernel call, on `C` given as a pointer and
/// length.
///
/// # Safety
/// `c` points to `c.1` elements that are uniquely borrowed (aliasing neither `a` nor `b`);
/// with `accumulate` they must be initialised.
#[allow(clippy::too_many_arguments)]
#[track_caller]
unsafe fn gemm_bounded<T: Real>(
    isa: Isa,
    (m, n, k): (usize, usize, usize),
    a: &[T],
    (rsa, csa): (usize, usize),
    b: &[T],
    ldb: usize,
    (c, c_len): (*mut T, usize),
    ldc: usize,
    accumulate: bool,
    alpha: T,
) {
    if m == 0 || n == 0 {
        return;
    }
    check_bounds((m, n, k), a.len(), (rsa, csa), b.len(), ldb, c_len, ldc);
    // A variant the CPU lacks runs as the scalar path (the public safe callers pass any `isa`).
    let isa = isa.or_scalar();
    // SAFETY: the checks keep every element the kernel reads (A through its strides, B rows
    // up to the padded width) or writes (C rows up to the padded width) inside the slices; the
    // caller guarantees C is unique (and initialised when accumulating); `isa` is supported
    // (`or_scalar` above).
    unsafe {
        gemm(
            isa,
            m,
            n,
            k,
            a.as_ptr(),
            rsa as isize,
            csa as isize,
            b.as_ptr(),
            ldb as isize,
            c,
            ldc as isize,
            accumulate,
            alpha,
        );
    }
}
