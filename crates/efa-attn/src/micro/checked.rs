//! The micro kernel on slices: every bound checked, then [`gemm`] (or its start-row variant).
//! Operands come as (slice, layout) pairs: `A` as `(a, (rsa, csa))`, element `(i, p)` at
//! `a[i·rsa + p·csa]`; `B` as `(b, ldb)` and `C` as `(c, ldc)`, row-major at those strides.

use super::{gemm, gemm_from, padded};
use efa_num::simd::Isa;
use efa_num::{MatMut, MatRef, Real};
use std::mem::MaybeUninit;

/// [`gemm`] on slices with every bound checked: `C ← alpha·A·B` (`accumulate = false`) or
/// `C ← C + A·B` (`accumulate = true`), `A` `m × k` at `a[i·rsa + p·csa]`, `B` `k × n` with
/// rows at `b[p·ldb]`, `C` rows at `c[i·ldc]`; `B` and `C` rows are read and written up to
/// `padded(n)` columns, so `ldb` and `ldc` must be at least that.
///
/// # Panics
/// If a slice is too short for its shape and strides (an internal invariant of the callers:
/// the kernels size their buffers from the same shapes).
#[track_caller]
pub fn gemm_checked<T: Real>(
    isa: Isa,
    mnk: (usize, usize, usize),
    a: (&[T], (usize, usize)),
    b: (&[T], usize),
    (c, ldc): (&mut [T], usize),
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
            b,
            (c.as_mut_ptr(), c_len, ldc),
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
#[track_caller]
pub fn gemm_checked_into<T: Real>(
    isa: Isa,
    mnk: (usize, usize, usize),
    a: (&[T], (usize, usize)),
    b: (&[T], usize),
    (c, ldc): (&mut [MaybeUninit<T>], usize),
    alpha: T,
) {
    let c_len = c.len();
    // SAFETY: without accumulation the kernel only writes C (initialised values).
    unsafe {
        gemm_bounded(
            isa,
            mnk,
            a,
            b,
            (c.as_mut_ptr().cast::<T>(), c_len, ldc),
            false,
            alpha,
        )
    }
}

/// `C ← A·B + bias` row by row into a `C` not yet written (`bias` repeated on every row): the
/// same bits as [`gemm_checked_into`] followed by a pass adding the bias (every sum adds the
/// products over `p` in index order from zero, then its bias element: the order of a linear
/// layer written as a product and a broadcast sum), without that pass. `bias` holds at least
/// `padded(n)` elements (its padding columns, usually zeros, go to the padding columns of
/// `C`). Columns `[0, n)` of every row are written (at most `[0, padded(n))`, as
/// [`gemm_checked_into`]) and never read.
///
/// # Panics
/// As [`gemm_checked`], or if `bias` is shorter than `padded(n)`.
#[track_caller]
pub fn gemm_checked_bias_into<T: Real>(
    isa: Isa,
    mnk: (usize, usize, usize),
    a: (&[T], (usize, usize)),
    b: (&[T], usize),
    bias: &[T],
    (c, ldc): (&mut [MaybeUninit<T>], usize),
) {
    let c_len = c.len();
    // SAFETY: C is uniquely borrowed and only written (its starting values come from `bias`),
    // with initialised values.
    unsafe {
        gemm_started(
            isa,
            mnk,
            a,
            b,
            ((bias, 0), None),
            (c.as_mut_ptr().cast::<T>(), c_len, ldc),
        )
    }
}

/// `C ← (A·B + bias) + S` row by row (`S` rows at `s[i·lds]`, `start = (s, lds)`): the
/// products summed over `p` in index order from zero, then `bias`, then the same row of `S`
/// added: the same bits as the product, a pass adding the bias and a pass adding `S` (a
/// linear layer and its residual, in the composition's order), in one. `S` rows and `bias`
/// are read up to `padded(n)` columns (so `lds ≥ padded(n)`); `C` as [`gemm_checked`].
///
/// # Panics
/// As [`gemm_checked`], or if `S` or `bias` is too short.
#[track_caller]
pub fn gemm_checked_from<T: Real>(
    isa: Isa,
    mnk: (usize, usize, usize),
    a: (&[T], (usize, usize)),
    b: (&[T], usize),
    (start, bias): ((&[T], usize), &[T]),
    (c, ldc): (&mut [T], usize),
) {
    let c_len = c.len();
    // SAFETY: C is a unique borrow (it cannot alias the shared operands).
    unsafe {
        gemm_started(
            isa,
            mnk,
            a,
            b,
            (start, Some(bias)),
            (c.as_mut_ptr(), c_len, ldc),
        )
    }
}

/// The checked views of `A` and `B` (after [`check_bounds`]).
#[inline]
#[track_caller]
fn views<'a, T>(
    (m, n, k): (usize, usize, usize),
    (a, (rsa, csa)): (&'a [T], (usize, usize)),
    (b, ldb): (&'a [T], usize),
) -> (MatRef<'a, T>, MatRef<'a, T>) {
    (
        MatRef::new(a, m, k, rsa as isize, csa as isize),
        MatRef::row_major(b, k, n, ldb),
    )
}

/// The checks and the kernel call of [`gemm_checked_bias_into`] and [`gemm_checked_from`]:
/// the rows of `C` are the products plus `bias` (when given) plus the rows of `start` (at its
/// stride; 0 repeats one row), both read up to `padded(n)` columns.
///
/// # Safety
/// `c` points to `c.1` elements that are uniquely borrowed (aliasing neither operand).
#[track_caller]
unsafe fn gemm_started<T: Real>(
    isa: Isa,
    (m, n, k): (usize, usize, usize),
    a: (&[T], (usize, usize)),
    b: (&[T], usize),
    ((start, lds), bias): ((&[T], usize), Option<&[T]>),
    (c, c_len, ldc): (*mut T, usize, usize),
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
    check_bounds((m, n, k), a, b, (c_len, ldc));
    let (a, b) = views((m, n, k), a, b);
    // A variant the CPU lacks runs as the scalar path (the public safe callers pass any `isa`).
    let isa = isa.or_scalar();
    // SAFETY: the checks keep every element read (A, B, the start rows, the bias) or written
    // (C rows up to the padded width) inside the slices; the caller guarantees C is unique;
    // `isa` is supported (`or_scalar` above).
    unsafe {
        gemm_from(
            isa,
            a,
            b,
            MatMut::from_raw_parts(c, m, n, ldc as isize, 1),
            (start.as_ptr(), lds as isize),
            bias.map_or(std::ptr::null(), |b| b.as_ptr()),
        );
    }
}

/// The bounds of [`gemm_checked`]'s operands (`C` given by its length and row stride).
#[track_caller]
fn check_bounds<T>(
    (m, n, k): (usize, usize, usize),
    (a, (rsa, csa)): (&[T], (usize, usize)),
    (b, ldb): (&[T], usize),
    (c_len, ldc): (usize, usize),
) {
    let np = padded(n);
    assert!(
        k == 0 || (m - 1) * rsa + (k - 1) * csa < a.len(),
        "gemm: A bounds"
    );
    assert!(
        k == 0 || ((k - 1) * ldb + np <= b.len() && ldb >= np),
        "gemm: B bounds"
    );
    assert!((m - 1) * ldc + np <= c_len && ldc >= np, "gemm: C bounds");
}

/// The bounds checks of [`gemm_checked`] and the kernel call, on `C` given as a pointer,
/// length and row stride.
///
/// # Safety
/// `c` points to `c.1` elements that are uniquely borrowed (aliasing neither `a` nor `b`);
/// with `accumulate` they must be initialised.
#[track_caller]
unsafe fn gemm_bounded<T: Real>(
    isa: Isa,
    (m, n, k): (usize, usize, usize),
    a: (&[T], (usize, usize)),
    b: (&[T], usize),
    (c, c_len, ldc): (*mut T, usize, usize),
    accumulate: bool,
    alpha: T,
) {
    if m == 0 || n == 0 {
        return;
    }
    check_bounds((m, n, k), a, b, (c_len, ldc));
    let (a, b) = views((m, n, k), a, b);
    // A variant the CPU lacks runs as the scalar path (the public safe callers pass any `isa`).
    let isa = isa.or_scalar();
    // SAFETY: the checks keep every element the kernel reads (A through its strides, B rows
    // up to the padded width) or writes (C rows up to the padded width) inside the slices; the
    // caller guarantees C is unique (and initialised when accumulating); `isa` is supported
    // (`or_scalar` above).
    unsafe {
        gemm(
            isa,
            a,
            b,
            MatMut::from_raw_parts(c, m, n, ldc as isize, 1),
            accumulate,
            alpha,
        );
    }
}
