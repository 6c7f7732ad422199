//! Generic entry points whose bodies are compiled once, in the crate that defines them.
//!
//! A generic function is compiled in every crate that calls it with a concrete type: a kernel
//! reached from `efa-train`, `efa-model`, `efa-paper`, the binary and each test binary was
//! compiled again in each of them (for f32, f64 and the double-double type), at the optimiser's
//! full cost. [`concrete!`](macro@crate::concrete) wraps a generic function `f<T: Real>` in a generic
//! entry point of the same signature that only forwards to three ordinary functions, `f` at
//! `f32`, `f64` and [`Dd`](crate::Dd), defined (so compiled) where the macro is written. A
//! caller elsewhere compiles the forwarding, a match on a constant, and links the kernel.
//!
//! The values are the same bits either way: only where the code is compiled changes.

use std::mem::{size_of, ManuallyDrop};

/// `a` as a `B`, for the forwarding of [`concrete!`](macro@crate::concrete).
///
/// # Safety
/// `A` and `B` must be the same type up to lifetimes, with `B`'s lifetimes no longer than
/// `A`'s: the same generic type written once with `T` and once with the concrete element type
/// `T` is (the macro checks which one it is before the call).
#[doc(hidden)]
#[inline(always)]
pub unsafe fn same<A, B>(a: A) -> B {
    debug_assert_eq!(size_of::<A>(), size_of::<B>());
    let a = ManuallyDrop::new(a);
    // SAFETY: by the contract, `A` and `B` are one type, so its bits are a valid `B`; `a` is
    // not dropped (ownership moves to the result).
    unsafe { std::mem::transmute_copy::<A, B>(&*a) }
}

/// Defines `vis fn name<'a…, T: Real>(args) -> ret` forwarding to the generic function
/// `target::<T>` through `target::<f32>`, `target::<f64>` and `target::<Dd>` compiled in the
/// defining crate (module docs). `args` and `ret` may name `T` anywhere in their types; every
/// lifetime in them is one of the listed ones. Write it at module level (its per-type functions
/// reach `target` and the argument types through `use super::*`).
///
/// ```
/// fn total<T: efa_num::Real>(x: &[T]) -> T {
///     x.iter().fold(T::ZERO, |s, &v| s + v)
/// }
///
/// efa_num::concrete! {
///     /// `total`, compiled here.
///     pub fn total_here<'a, T>(x: &'a [T]) -> T = total;
/// }
///
/// fn main() {
///     assert_eq!(total_here(&[1.0f32, 2.0]), 3.0);
///     assert_eq!(total_here(&[1.0f64, 2.0]), 3.0);
/// }
/// ```
#[macro_export]
macro_rules! concrete {
    // The module of one element type `E` (internal rule).
    (@typed $module:ident, $E:ty, $T:ident, [$($lt:lifetime),*], ($($arg:ident: $ty:ty),*),
        ($($ret:ty)?), $target:path) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            type $T = $E;
            #[inline(never)]
            pub fn call<$($lt),*>($($arg: $ty),*) $(-> $ret)? {
                $target($($arg),*)
            }
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident<$($lt:lifetime,)* $T:ident>($($arg:ident: $ty:ty),* $(,)?)
            $(-> $ret:ty)? = $target:path;
    ) => {
        $(#[$meta])*
        #[inline]
        $vis fn $name<$($lt,)* $T: $crate::Real>($($arg: $ty),*) $(-> $ret)? {
            // One module per element type: the alias `T` makes the signature concrete, so the
            // function inside is an ordinary one, compiled in this crate.
            $crate::concrete!(@typed as_f32, f32, $T, [$($lt),*], ($($arg: $ty),*), ($($ret)?),
                $target);
            $crate::concrete!(@typed as_f64, f64, $T, [$($lt),*], ($($arg: $ty),*), ($($ret)?),
                $target);
            $crate::concrete!(@typed as_dd, $crate::Dd, $T, [$($lt),*], ($($arg: $ty),*),
                ($($ret)?), $target);
            use $crate::concrete::same;
            match $crate::simd::elem_kind::<$T>() {
                // SAFETY: `T` is `f32` here, so every argument and the result are the same types
                // as `as_f32::call`'s (Real is sealed to f32, f64 and Dd).
                $crate::simd::ElemKind::F32 => unsafe { same(as_f32::call($(same($arg)),*)) },
                // SAFETY: as above with `f64`.
                $crate::simd::ElemKind::F64 => unsafe { same(as_f64::call($(same($arg)),*)) },
                // SAFETY: as above with `Dd`.
                $crate::simd::ElemKind::Dd => unsafe { same(as_dd::call($(same($arg)),*)) },
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use crate::{Dd, Real};

    fn scaled<T: Real>(x: &[T], by: f64) -> (Vec<T>, usize) {
        (x.iter().map(|&v| v * T::from_f64(by)).collect(), x.len())
    }

    crate::concrete! {
        fn scaled_here<'a, T>(x: &'a [T], by: f64) -> (Vec<T>, usize) = scaled;
    }

    #[test]
    fn the_forwarding_returns_the_generic_functions_values_in_every_type() {
        let x32 = [1.5f32, -2.0, 3.25];
        assert_eq!(scaled_here(&x32, 2.0), scaled(&x32, 2.0));
        let x64 = [1.5f64, -2.0, 1e300];
        assert_eq!(scaled_here(&x64, 0.5), scaled(&x64, 0.5));
        let xd = [Dd::from_f64(1.0) / Dd::from_f64(3.0)];
        let (got, n) = scaled_here(&xd, 3.0);
        let (want, _) = scaled(&xd, 3.0);
        assert_eq!(n, 1);
        assert_eq!(got[0].to_f64_pair(), want[0].to_f64_pair());
    }
}
