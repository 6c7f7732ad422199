//! Run-time routing of generic `T: Real` code to the double-double paths: `T` is `Dd` exactly
//! when its `TypeId` is, and then values and slices are reinterpreted without conversion.

use super::Dd;
use crate::Real;
use std::any::{Any, TypeId};

/// Whether `T` is [`Dd`] (a constant after monomorphisation).
#[inline(always)]
pub(crate) fn is_dd<T: Real>() -> bool {
    TypeId::of::<T>() == TypeId::of::<Dd>()
}

/// `x` as a `Dd` if `T` is `Dd`.
#[inline(always)]
pub(crate) fn to_dd<T: Real>(x: T) -> Option<Dd> {
    (&x as &dyn Any).downcast_ref::<Dd>().copied()
}

/// A `Dd` as `T`; panics unless `T` is `Dd` (callers check [`is_dd`] first).
#[inline(always)]
pub(crate) fn from_dd<T: Real>(x: Dd) -> T {
    *(&x as &dyn Any)
        .downcast_ref::<T>()
        .expect("efa-num: from_dd called with T other than Dd")
}

/// The slice as `&[Dd]` if `T` is `Dd`.
#[inline(always)]
pub(crate) fn slice_dd<T: Real>(x: &[T]) -> Option<&[Dd]> {
    // SAFETY: T is Dd (same TypeId), so the memory is a valid [Dd] of the same length.
    is_dd::<T>().then(|| unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<Dd>(), x.len()) })
}

/// The slice as `&mut [Dd]` if `T` is `Dd`.
#[inline(always)]
pub(crate) fn slice_dd_mut<T: Real>(x: &mut [T]) -> Option<&mut [Dd]> {
    if !is_dd::<T>() {
        return None;
    }
    // SAFETY: T is Dd (same TypeId); the borrow is moved into the returned one.
    Some(unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast::<Dd>(), x.len()) })
}
