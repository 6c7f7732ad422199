//! Strided matrix views: [`MatRef`] (read) and [`MatMut`] (read and write), `rows × cols`
//! elements with element `(i, j)` at `ptr + i·rs + j·cs` (strides in elements, any sign), the
//! operand type of [`crate::gemm`] and of the row kernels that take matrices instead of
//! `(pointer, leading dimension)` lists.
//!
//! A view is a pointer, two dimensions and two strides passed by value (no allocation, no
//! indirection): its accessors are `#[inline(always)]`, so a kernel that unpacks its views
//! compiles to the code of the argument list it replaces.
//!
//! **Validity.** A view built by a safe constructor ([`MatRef::new`], [`MatMut::new`] and
//! their row-major shorthands) addresses only elements inside its slice (checked; a misuse
//! panics with a message naming the shape), and a [`MatMut`] addresses no element twice (its
//! strides do not let two index pairs meet), so writing every element of it is race-free even
//! from several threads over disjoint index ranges. The borrow of the slice gives the rest: a
//! `MatMut` aliases nothing else while it lives. Views over raw pointers
//! ([`MatRef::from_raw_parts`], [`MatMut::from_raw_parts`]) are `unsafe` to build, their caller
//! guaranteeing the same; functions taking views may therefore rely on them.
//!
//! ```
//! use efa_num::mat::{MatMut, MatRef};
//! // A 2×3 row-major matrix; its transpose is the same storage read with swapped strides.
//! let a = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0];
//! let v = MatRef::row_major(&a, 2, 3, 3);
//! assert_eq!((v.rows(), v.cols(), v.rs(), v.cs()), (2, 3, 3, 1));
//! assert_eq!(v.t().get(2, 1), 6.0);
//! let mut c = [0.0f64; 4];
//! let mut w = MatMut::row_major(&mut c, 2, 2, 2);
//! w.set(1, 0, 7.0);
//! assert_eq!(c, [0.0, 0.0, 7.0, 0.0]);
//! ```

use std::marker::PhantomData;

/// The lowest and highest offsets (in elements, from the first element) a `rows × cols` view
/// at strides `(rs, cs)` addresses; `None` when it addresses nothing (a zero dimension).
fn span(rows: usize, cols: usize, rs: isize, cs: isize) -> Option<(i128, i128)> {
    if rows == 0 || cols == 0 {
        return None;
    }
    let (r, c) = (
        (rows - 1) as i128 * rs as i128,
        (cols - 1) as i128 * cs as i128,
    );
    Some((r.min(0) + c.min(0), r.max(0) + c.max(0)))
}

/// Panics unless every element of a `rows × cols` view at `(rs, cs)` from the start of a slice
/// of `len` elements lies inside it.
#[inline]
#[track_caller]
fn check_inside(what: &str, len: usize, rows: usize, cols: usize, rs: isize, cs: isize) {
    if rows == 0 || cols == 0 {
        return;
    }
    // The usual case, non-negative strides, in plain (checked) arithmetic: the last element is
    // the furthest.
    if rs >= 0 && cs >= 0 {
        let last = (rows - 1)
            .checked_mul(rs as usize)
            .zip((cols - 1).checked_mul(cs as usize))
            .and_then(|(r, c)| r.checked_add(c));
        if last.is_some_and(|last| last < len) {
            return;
        }
    }
    check_span(what, len, rows, cols, rs, cs);
}

/// [`check_inside`] for any strides (a negative stride along a dimension of one index stays
/// inside), without overflow; the panic names the offsets the view addresses.
#[cold]
#[track_caller]
fn check_span(what: &str, len: usize, rows: usize, cols: usize, rs: isize, cs: isize) {
    if let Some((lo, hi)) = span(rows, cols, rs, cs) {
        assert!(
            lo >= 0 && hi < len as i128,
            "{what}: a {rows} × {cols} view at strides ({rs}, {cs}) addresses offsets \
             {lo}..={hi}, outside the slice of {len} elements"
        );
    }
}

/// Whether two distinct index pairs of a `rows × cols` view at `(rs, cs)` address the same
/// element. Sufficient test for distinctness: along each dimension of more than one index the
/// stride is not 0, and the smaller stride's whole extent stays below the larger stride (so the
/// "inner" dimension's elements fit between two steps of the "outer" one).
#[inline]
fn overlaps(rows: usize, cols: usize, rs: isize, cs: isize) -> bool {
    if rows == 0 || cols == 0 {
        // Addresses nothing.
        return false;
    }
    match (rows > 1, cols > 1) {
        (false, false) => false,
        (true, false) => rs == 0,
        (false, true) => cs == 0,
        (true, true) => {
            let (r, c) = (rs.unsigned_abs(), cs.unsigned_abs());
            let ((inner, n), outer) = if c <= r {
                ((c, cols), r)
            } else {
                ((r, rows), c)
            };
            inner == 0
                || inner
                    .checked_mul(n - 1)
                    .is_none_or(|extent| extent >= outer)
        }
    }
}

/// A read-only `rows × cols` matrix: element `(i, j)` at `ptr + i·rs + j·cs`. `Copy`; borrows
/// its storage for `'a` (see the [module docs](self) for what a view guarantees).
pub struct MatRef<'a, T> {
    ptr: *const T,
    rows: usize,
    cols: usize,
    rs: isize,
    cs: isize,
    _life: PhantomData<&'a T>,
}

impl<T> Clone for MatRef<'_, T> {
    #[inline(always)]
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for MatRef<'_, T> {}

// SAFETY: a `MatRef` is a shared borrow of `T`s (as `&'a [T]`), which is `Send` and `Sync`
// when `T: Sync`.
unsafe impl<T: Sync> Send for MatRef<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for MatRef<'_, T> {}

impl<T> std::fmt::Debug for MatRef<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MatRef({} × {} at strides ({}, {}))",
            self.rows, self.cols, self.rs, self.cs
        )
    }
}

impl<'a, T> MatRef<'a, T> {
    /// `rows × cols` elements of `data`, element `(i, j)` at `data[i·rs + j·cs]`.
    ///
    /// # Panics
    /// If an addressed element lies outside `data` (a negative stride reaches before its
    /// start unless its dimension is 1). A view with a zero dimension fits any slice.
    #[inline]
    #[track_caller]
    pub fn new(data: &'a [T], rows: usize, cols: usize, rs: isize, cs: isize) -> Self {
        check_inside("MatRef::new", data.len(), rows, cols, rs, cs);
        MatRef {
            ptr: data.as_ptr(),
            rows,
            cols,
            rs,
            cs,
            _life: PhantomData,
        }
    }

    /// `rows × cols` row-major elements of `data`, row `i` from `data[i·ld]`.
    ///
    /// # Panics
    /// As [`MatRef::new`].
    #[inline]
    #[track_caller]
    pub fn row_major(data: &'a [T], rows: usize, cols: usize, ld: usize) -> Self {
        Self::new(data, rows, cols, ld as isize, 1)
    }

    /// A view over raw storage.
    ///
    /// # Safety
    /// For `'a`, every element `ptr + i·rs + j·cs` (`i < rows`, `j < cols`) must be readable
    /// (inside one allocation, initialised) and not written through anything else.
    #[inline(always)]
    pub unsafe fn from_raw_parts(
        ptr: *const T,
        rows: usize,
        cols: usize,
        rs: isize,
        cs: isize,
    ) -> Self {
        MatRef {
            ptr,
            rows,
            cols,
            rs,
            cs,
            _life: PhantomData,
        }
    }

    /// Rows.
    #[inline(always)]
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    #[inline(always)]
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row stride (elements from `(i, j)` to `(i + 1, j)`).
    #[inline(always)]
    pub fn rs(&self) -> isize {
        self.rs
    }

    /// Column stride (elements from `(i, j)` to `(i, j + 1)`).
    #[inline(always)]
    pub fn cs(&self) -> isize {
        self.cs
    }

    /// Pointer to element `(0, 0)`.
    #[inline(always)]
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// Pointer to element `(i, j)` (computed with wrapping arithmetic: dereferencing it is
    /// sound when `i < rows` and `j < cols`).
    #[inline(always)]
    pub fn ptr_at(&self, i: usize, j: usize) -> *const T {
        self.ptr
            .wrapping_offset(i as isize * self.rs + j as isize * self.cs)
    }

    /// The transpose: `cols × rows`, strides swapped (no copy).
    #[inline(always)]
    pub fn t(self) -> Self {
        MatRef {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    /// Rows `r0 .. r0 + rows` and columns `c0 .. c0 + cols`.
    ///
    /// # Panics
    /// If the block does not lie inside the view.
    #[inline]
    #[track_caller]
    pub fn block(self, r0: usize, c0: usize, rows: usize, cols: usize) -> Self {
        assert!(
            r0 + rows <= self.rows && c0 + cols <= self.cols,
            "MatRef::block: rows {r0}..{} and columns {c0}..{} of a {} × {} view",
            r0 + rows,
            c0 + cols,
            self.rows,
            self.cols
        );
        MatRef {
            ptr: self.ptr_at(r0, c0),
            rows,
            cols,
            ..self
        }
    }

    /// The same storage as elements of type `U`.
    ///
    /// # Safety
    /// `U` must have the size and alignment of `T`, and every element's bits must be a valid
    /// `U` (in practice: `U` is `T`, named through another type parameter).
    #[inline(always)]
    pub unsafe fn cast<U>(self) -> MatRef<'a, U> {
        MatRef {
            ptr: self.ptr.cast(),
            rows: self.rows,
            cols: self.cols,
            rs: self.rs,
            cs: self.cs,
            _life: PhantomData,
        }
    }
}

impl<T: Copy> MatRef<'_, T> {
    /// Element `(i, j)`.
    ///
    /// # Panics
    /// If `(i, j)` is outside the view.
    #[inline]
    #[track_caller]
    pub fn get(&self, i: usize, j: usize) -> T {
        assert!(
            i < self.rows && j < self.cols,
            "MatRef::get: ({i}, {j}) outside {} × {}",
            self.rows,
            self.cols
        );
        // SAFETY: (i, j) is inside the view, whose elements are readable (module docs).
        unsafe { *self.ptr_at(i, j) }
    }
}

/// A writable `rows × cols` matrix: element `(i, j)` at `ptr + i·rs + j·cs`, no element
/// addressed twice. Borrows its storage uniquely for `'a` (see the [module docs](self)); not
/// `Copy` ([`MatMut::rb_mut`] reborrows it, [`MatMut::rb`] reads it).
pub struct MatMut<'a, T> {
    ptr: *mut T,
    rows: usize,
    cols: usize,
    rs: isize,
    cs: isize,
    _life: PhantomData<&'a mut T>,
}

// SAFETY: a `MatMut` is a unique borrow of `T`s (as `&'a mut [T]`), `Send` when `T: Send`.
unsafe impl<T: Send> Send for MatMut<'_, T> {}
// SAFETY: shared access to a `MatMut` only reads (as `&&mut [T]`), `Sync` when `T: Sync`.
unsafe impl<T: Sync> Sync for MatMut<'_, T> {}

impl<T> std::fmt::Debug for MatMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MatMut({} × {} at strides ({}, {}))",
            self.rows, self.cols, self.rs, self.cs
        )
    }
}

impl<'a, T> MatMut<'a, T> {
    /// `rows × cols` elements of `data`, element `(i, j)` at `data[i·rs + j·cs]`.
    ///
    /// # Panics
    /// If an addressed element lies outside `data`, or two index pairs address the same element
    /// (a zero stride along a dimension of more than one index, or one dimension's extent
    /// reaching the other's stride).
    #[inline]
    #[track_caller]
    pub fn new(data: &'a mut [T], rows: usize, cols: usize, rs: isize, cs: isize) -> Self {
        check_inside("MatMut::new", data.len(), rows, cols, rs, cs);
        assert!(
            !overlaps(rows, cols, rs, cs),
            "MatMut::new: a {rows} × {cols} view at strides ({rs}, {cs}) addresses an element twice"
        );
        MatMut {
            ptr: data.as_mut_ptr(),
            rows,
            cols,
            rs,
            cs,
            _life: PhantomData,
        }
    }

    /// `rows × cols` row-major elements of `data`, row `i` from `data[i·ld]`.
    ///
    /// # Panics
    /// As [`MatMut::new`] (so also when `ld < cols` with more than one row).
    #[inline]
    #[track_caller]
    pub fn row_major(data: &'a mut [T], rows: usize, cols: usize, ld: usize) -> Self {
        Self::new(data, rows, cols, ld as isize, 1)
    }

    /// A view over raw storage.
    ///
    /// # Safety
    /// For `'a`, every element `ptr + i·rs + j·cs` (`i < rows`, `j < cols`) must be readable
    /// and writable (inside one allocation; initialised where it is read) and accessed through
    /// nothing else; no two index pairs may address the same element.
    #[inline(always)]
    pub unsafe fn from_raw_parts(
        ptr: *mut T,
        rows: usize,
        cols: usize,
        rs: isize,
        cs: isize,
    ) -> Self {
        MatMut {
            ptr,
            rows,
            cols,
            rs,
            cs,
            _life: PhantomData,
        }
    }

    /// Rows.
    #[inline(always)]
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    #[inline(always)]
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row stride (elements from `(i, j)` to `(i + 1, j)`).
    #[inline(always)]
    pub fn rs(&self) -> isize {
        self.rs
    }

    /// Column stride (elements from `(i, j)` to `(i, j + 1)`).
    #[inline(always)]
    pub fn cs(&self) -> isize {
        self.cs
    }

    /// Pointer to element `(0, 0)`, for reads.
    #[inline(always)]
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// Pointer to element `(0, 0)`, for reads and writes.
    #[inline(always)]
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }

    /// Pointer to element `(i, j)` (computed with wrapping arithmetic: dereferencing it is
    /// sound when `i < rows` and `j < cols`).
    #[inline(always)]
    pub fn ptr_at(&mut self, i: usize, j: usize) -> *mut T {
        self.ptr
            .wrapping_offset(i as isize * self.rs + j as isize * self.cs)
    }

    /// A read-only view of the same elements, borrowing this one.
    #[inline(always)]
    pub fn rb(&self) -> MatRef<'_, T> {
        MatRef {
            ptr: self.ptr,
            rows: self.rows,
            cols: self.cols,
            rs: self.rs,
            cs: self.cs,
            _life: PhantomData,
        }
    }

    /// This view reborrowed for a shorter lifetime (to pass it on and use it again after).
    #[inline(always)]
    pub fn rb_mut(&mut self) -> MatMut<'_, T> {
        MatMut {
            ptr: self.ptr,
            rows: self.rows,
            cols: self.cols,
            rs: self.rs,
            cs: self.cs,
            _life: PhantomData,
        }
    }

    /// The read-only view of the same elements for the whole lifetime `'a`.
    #[inline(always)]
    pub fn into_const(self) -> MatRef<'a, T> {
        MatRef {
            ptr: self.ptr,
            rows: self.rows,
            cols: self.cols,
            rs: self.rs,
            cs: self.cs,
            _life: PhantomData,
        }
    }

    /// The transpose: `cols × rows`, strides swapped (no copy).
    #[inline(always)]
    pub fn t(self) -> Self {
        MatMut {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    /// Rows `r0 .. r0 + rows` and columns `c0 .. c0 + cols`.
    ///
    /// # Panics
    /// If the block does not lie inside the view.
    #[inline]
    #[track_caller]
    pub fn block(mut self, r0: usize, c0: usize, rows: usize, cols: usize) -> Self {
        assert!(
            r0 + rows <= self.rows && c0 + cols <= self.cols,
            "MatMut::block: rows {r0}..{} and columns {c0}..{} of a {} × {} view",
            r0 + rows,
            c0 + cols,
            self.rows,
            self.cols
        );
        MatMut {
            ptr: self.ptr_at(r0, c0),
            rows,
            cols,
            ..self
        }
    }

    /// The same storage as elements of type `U`.
    ///
    /// # Safety
    /// `U` must have the size and alignment of `T`; every element's bits must be a valid `U`
    /// where it is read as one, and every `U` written a valid `T` for the storage's owner (in
    /// practice: `U` is `T` named through another type parameter, or `T` is
    /// `MaybeUninit<U>` and only written elements are read).
    #[inline(always)]
    pub unsafe fn cast<U>(self) -> MatMut<'a, U> {
        MatMut {
            ptr: self.ptr.cast(),
            rows: self.rows,
            cols: self.cols,
            rs: self.rs,
            cs: self.cs,
            _life: PhantomData,
        }
    }
}

impl<T: Copy> MatMut<'_, T> {
    /// Element `(i, j)`.
    ///
    /// # Panics
    /// If `(i, j)` is outside the view.
    #[inline]
    #[track_caller]
    pub fn get(&self, i: usize, j: usize) -> T {
        self.rb().get(i, j)
    }

    /// Writes `x` at `(i, j)`.
    ///
    /// # Panics
    /// If `(i, j)` is outside the view.
    #[inline]
    #[track_caller]
    pub fn set(&mut self, i: usize, j: usize, x: T) {
        assert!(
            i < self.rows && j < self.cols,
            "MatMut::set: ({i}, {j}) outside {} × {}",
            self.rows,
            self.cols
        );
        // SAFETY: (i, j) is inside the view, whose elements are writable and borrowed uniquely
        // (module docs).
        unsafe { *self.ptr_at(i, j) = x }
    }
}

#[cfg(test)]
mod tests;
