//! Row kernels: one `#[inline(always)]` body per kernel, generic over [`SimdVec`], three
//! instantiations (scalar, AVX2 + FMA, AVX-512F) and a typed front end for `T: Real`.

use super::dd_path;
use super::vector::MAX_LANES;
use super::{Isa, SimdElem, SimdVec};
use crate::dd::cast::{from_dd, slice_dd, slice_dd_mut, to_dd};
use crate::Real;

/// Generates `unsafe fn $disp::<E: SimdElem>(isa, args…)`, which calls `$body` instantiated for the scalar lane,
/// AVX2 or AVX-512 vector type inside a `#[target_feature]` wrapper.
#[macro_export]
macro_rules! simd_variants {
    ($vis:vis $body:ident, $disp:ident, ($($a:ident : $t:ty),*) -> $r:ty) => {
        /// Dispatches to the variant `isa`.
        ///
        /// # Safety
        /// `isa` must be supported by the CPU; pointers valid for the stated lengths.
        #[inline]
        #[allow(dead_code)]
        $vis unsafe fn $disp<E: $crate::simd::SimdElem>(isa: $crate::simd::Isa, $($a: $t),*) -> $r {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f")]
            unsafe fn v512<E: $crate::simd::SimdElem>($($a: $t),*) -> $r {
                // SAFETY: `v512` is called only from the `Isa::Avx512` arm below, whose caller
                // guarantees the CPU supports AVX-512F, the instruction set of `E::Avx512`; the
                // pointer arguments are forwarded unchanged, valid as the caller of the
                // dispatcher guarantees.
                unsafe { $body::<E::Avx512>($($a),*) }
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn v256<E: $crate::simd::SimdElem>($($a: $t),*) -> $r {
                // SAFETY: `v256` is called only from the `Isa::Avx2` arm below, whose caller
                // guarantees the CPU supports AVX2 + FMA, the instruction set of `E::Avx2`; the
                // pointer arguments are forwarded unchanged, valid as the caller of the
                // dispatcher guarantees.
                unsafe { $body::<E::Avx2>($($a),*) }
            }
            // SAFETY: the caller guarantees `isa` is supported by the CPU, so the
            // `#[target_feature]` wrapper of each arm (AVX-512F for `Avx512`, AVX2 + FMA for
            // `Avx2`) may run, and the one-lane body needs no CPU feature; the pointers are
            // valid for the stated lengths (the caller's contract), forwarded unchanged.
            unsafe {
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    $crate::simd::Isa::Avx512 => v512::<E>($($a),*),
                    #[cfg(target_arch = "x86_64")]
                    $crate::simd::Isa::Avx2 => v256::<E>($($a),*),
                    _ => $body::<E::One>($($a),*),
                }
            }
        }
    };
}
use crate::simd_variants as variants;

/// Runs `$e` with the type alias `$E` set to the concrete element type of `$T` and converts the
/// result back (identity conversion: `T` is exactly that type). For `T = Dd` every
/// instruction-set variant of a body is the one-lane double-double "vector" (scalar code).
#[macro_export]
macro_rules! simd_by_kind {
    ($T:ty, $E:ident => $e:expr) => {
        match $crate::simd::elem_kind::<$T>() {
            $crate::simd::ElemKind::F32 => {
                #[allow(dead_code)]
                type $E = f32;
                let r = $e;
                // SAFETY: T == f32 here, so the result type is identical.
                #[allow(clippy::useless_transmute)]
                unsafe {
                    std::mem::transmute_copy(&r)
                }
            }
            $crate::simd::ElemKind::F64 => {
                #[allow(dead_code)]
                type $E = f64;
                let r = $e;
                // SAFETY: T == f64 here.
                #[allow(clippy::useless_transmute)]
                unsafe {
                    std::mem::transmute_copy(&r)
                }
            }
            $crate::simd::ElemKind::Dd => {
                // Every body runs on the double-double one-lane vector (scalar code whatever
                // the instruction set asked for).
                #[allow(dead_code)]
                type $E = $crate::Dd;
                let r = $e;
                // SAFETY: T == Dd here.
                #[allow(clippy::useless_transmute)]
                unsafe {
                    std::mem::transmute_copy(&r)
                }
            }
        }
    };
}
use crate::simd_by_kind as by_kind;

// ---------------------------------------------------------------- bodies

/// Body of [`dot`]: `Σ aᵢ·bᵢ` over `n` elements (four vector accumulators, then the tail).
///
/// # Safety
/// The instruction set of `V` must be enabled; the pointers valid for `n` elements.
#[inline(always)]
pub unsafe fn dot_body<V: SimdVec>(a: *const V::Elem, b: *const V::Elem, n: usize) -> V::Elem {
    // SAFETY: the caller guarantees `V`'s instruction set is enabled and `a`, `b` are valid
    // for `n` elements; every vector load reads `w` elements from offset `i` with
    // `i + w <= n` (the loop conditions), the tail reads index `i < n`.
    unsafe {
        let w = V::LANES;
        let z = V::splat(V::Elem::ZERO);
        let (mut s0, mut s1, mut s2, mut s3) = (z, z, z, z);
        let mut i = 0;
        while i + 4 * w <= n {
            s0 = V::load(a.add(i)).fma(V::load(b.add(i)), s0);
            s1 = V::load(a.add(i + w)).fma(V::load(b.add(i + w)), s1);
            s2 = V::load(a.add(i + 2 * w)).fma(V::load(b.add(i + 2 * w)), s2);
            s3 = V::load(a.add(i + 3 * w)).fma(V::load(b.add(i + 3 * w)), s3);
            i += 4 * w;
        }
        while i + w <= n {
            s0 = V::load(a.add(i)).fma(V::load(b.add(i)), s0);
            i += w;
        }
        let mut s = s0.add(s1).add(s2.add(s3)).reduce_sum();
        while i < n {
            s = (*a.add(i)).mul_add(*b.add(i), s);
            i += 1;
        }
        s
    }
}
variants!(dot_body, dot_d, (a: *const E, b: *const E, n: usize) -> E);

#[inline(always)]
unsafe fn axpy_body<V: SimdVec>(alpha: V::Elem, x: *const V::Elem, y: *mut V::Elem, n: usize) {
    // SAFETY: the caller (the `axpy_d` dispatcher's contract) guarantees `V`'s instruction set
    // is enabled and `x`, `y` are valid for `n` elements; every vector access covers offsets
    // `i..i + w` with `i + w <= n` (the loop condition), the tail accesses index `i < n`.
    unsafe {
        let w = V::LANES;
        let va = V::splat(alpha);
        let mut i = 0;
        while i + w <= n {
            va.fma(V::load(x.add(i)), V::load(y.add(i))).store(y.add(i));
            i += w;
        }
        while i < n {
            *y.add(i) = alpha.mul_add(*x.add(i), *y.add(i));
            i += 1;
        }
    }
}
variants!(axpy_body, axpy_d, (alpha: E, x: *const E, y: *mut E, n: usize) -> ());

/// Body of [`scale`]: `xᵢ ← α·xᵢ` over `n` elements.
///
/// # Safety
/// The instruction set of `V` must be enabled; the pointers valid for `n` elements.
#[inline(always)]
pub unsafe fn scale_body<V: SimdVec>(alpha: V::Elem, x: *mut V::Elem, n: usize) {
    // SAFETY: the caller guarantees `V`'s instruction set is enabled and `x` is valid for `n`
    // elements; the loop accesses offsets `i..i + w` with `i + w <= n`, and the tail
    // `t = n - i` elements from `i` with `0 < t < w = LANES` (the loop has exited), as the
    // `_first` methods require.
    unsafe {
        let w = V::LANES;
        let va = V::splat(alpha);
        let mut i = 0;
        while i + w <= n {
            V::load(x.add(i)).mul(va).store(x.add(i));
            i += w;
        }
        if i < n {
            // The tail as one vector (lane-wise products, the same values).
            let t = n - i;
            V::load_first(x.add(i), t, V::Elem::ZERO)
                .mul(va)
                .store_first(x.add(i), t);
        }
    }
}
variants!(scale_body, scale_d, (alpha: E, x: *mut E, n: usize) -> ());

/// Body of [`max`]: the largest of `n` elements (NaNs ignored).
///
/// # Safety
/// The instruction set of `V` must be enabled; the pointers valid for `n` elements.
#[inline(always)]
pub unsafe fn max_body<V: SimdVec>(x: *const V::Elem, n: usize) -> V::Elem {
    // SAFETY: the caller guarantees `V`'s instruction set is enabled and `x` is valid for `n`
    // elements; the loops load offsets `i..i + w` with `i + w <= n`, and the tail reads
    // `n - i` elements from `i` with `0 < n - i < w = LANES` (the loops have exited), as
    // `load_first` requires.
    unsafe {
        let w = V::LANES;
        let z = V::splat(V::Elem::NEG_INFINITY);
        let (mut m0, mut m1) = (z, z);
        let mut i = 0;
        // max(x, acc) returns acc when x is NaN: NaNs are ignored.
        while i + 2 * w <= n {
            m0 = V::load(x.add(i)).max(m0);
            m1 = V::load(x.add(i + w)).max(m1);
            i += 2 * w;
        }
        while i + w <= n {
            m0 = V::load(x.add(i)).max(m0);
            i += w;
        }
        if i < n {
            // The tail (fewer than one vector) as one vector padded with −∞: one vector
            // maximum instead of a data-dependent branch per element. The maximum is exact,
            // so the value is the same.
            m0 = V::load_first(x.add(i), n - i, V::Elem::NEG_INFINITY).max(m0);
        }
        m0.max(m1).reduce_max()
    }
}
variants!(max_body, max_d, (x: *const E, n: usize) -> E);

/// Body of [`sum`]: `Σ xᵢ` over `n` elements (four vector accumulators, then the tail).
///
/// # Safety
/// The instruction set of `V` must be enabled; the pointers valid for `n` elements.
#[inline(always)]
pub unsafe fn sum_body<V: SimdVec>(x: *const V::Elem, n: usize) -> V::Elem {
    // SAFETY: the caller guarantees `V`'s instruction set is enabled and `x` is valid for `n`
    // elements; every vector load reads offsets `i..i + w` with `i + w <= n` (the loop
    // conditions), the tail reads index `i < n`.
    unsafe {
        let w = V::LANES;
        let z = V::splat(V::Elem::ZERO);
        let (mut s0, mut s1, mut s2, mut s3) = (z, z, z, z);
        let mut i = 0;
        while i + 4 * w <= n {
            s0 = s0.add(V::load(x.add(i)));
            s1 = s1.add(V::load(x.add(i + w)));
            s2 = s2.add(V::load(x.add(i + 2 * w)));
            s3 = s3.add(V::load(x.add(i + 3 * w)));
            i += 4 * w;
        }
        while i + w <= n {
            s0 = s0.add(V::load(x.add(i)));
            i += w;
        }
        let mut s = s0.add(s1).add(s2.add(s3)).reduce_sum();
        while i < n {
            s += *x.add(i);
            i += 1;
        }
        s
    }
}
variants!(sum_body, sum_d, (x: *const E, n: usize) -> E);

#[inline(always)]
unsafe fn sum_exp_body<V: SimdVec>(x: *const V::Elem, n: usize, m: V::Elem) -> V::Elem {
    // SAFETY: the caller (the `sum_exp_d` dispatcher's contract) guarantees `V`'s instruction
    // set is enabled and `x` is valid for `n` elements; every vector load reads offsets
    // `i..i + w` with `i + w <= n` (the loop conditions), the tail reads index `i < n`; the
    // one-lane vector needs no CPU feature.
    unsafe {
        let w = V::LANES;
        let vm = V::splat(m);
        let z = V::splat(V::Elem::ZERO);
        let (mut s0, mut s1) = (z, z);
        let mut i = 0;
        while i + 2 * w <= n {
            s0 = s0.add(V::load(x.add(i)).sub(vm).exp());
            s1 = s1.add(V::load(x.add(i + w)).sub(vm).exp());
            i += 2 * w;
        }
        while i + w <= n {
            s0 = s0.add(V::load(x.add(i)).sub(vm).exp());
            i += w;
        }
        let mut s = s0.add(s1).reduce_sum();
        while i < n {
            s += <V::Elem as SimdElem>::One::splat(*x.add(i) - m)
                .exp()
                .reduce_sum();
            i += 1;
        }
        s
    }
}
variants!(sum_exp_body, sum_exp_d, (x: *const E, n: usize, m: E) -> E);

/// Body of [`exp_sub_sum`]: `xᵢ ← exp(xᵢ − m)` over `n` elements; returns their sum.
///
/// # Safety
/// The instruction set of `V` must be enabled; the pointers valid for `n` elements.
#[inline(always)]
pub unsafe fn exp_sub_sum_body<V: SimdVec>(x: *mut V::Elem, n: usize, m: V::Elem) -> V::Elem {
    // SAFETY: the caller guarantees `V`'s instruction set is enabled and `x` is valid for `n`
    // elements; the loops access offsets `i..i + w` with `i + w <= n`, and the tail
    // `t = n - i` elements from `i` with `0 < t < w = LANES` (the loops have exited), as the
    // `_first` methods require; `buf` holds `MAX_LANES >= LANES` elements for `store`.
    unsafe {
        let w = V::LANES;
        let vm = V::splat(m);
        let z = V::splat(V::Elem::ZERO);
        let (mut s0, mut s1) = (z, z);
        let mut i = 0;
        // Vectors alternate between s0 and s1; four or two at a time side by side.
        while i + 4 * w <= n {
            let mut v = [vm; 4];
            for (t, v) in v.iter_mut().enumerate() {
                *v = V::load(x.add(i + t * w)).sub(vm);
            }
            let [e0, e1, e2, e3] = V::exp_each(v);
            e0.store(x.add(i));
            e1.store(x.add(i + w));
            e2.store(x.add(i + 2 * w));
            e3.store(x.add(i + 3 * w));
            s0 = s0.add(e0).add(e2);
            s1 = s1.add(e1).add(e3);
            i += 4 * w;
        }
        while i + 2 * w <= n {
            let [e0, e1] = V::exp_each([V::load(x.add(i)).sub(vm), V::load(x.add(i + w)).sub(vm)]);
            e0.store(x.add(i));
            e1.store(x.add(i + w));
            s0 = s0.add(e0);
            s1 = s1.add(e1);
            i += 2 * w;
        }
        while i + w <= n {
            let e0 = V::load(x.add(i)).sub(vm).exp();
            e0.store(x.add(i));
            s0 = s0.add(e0);
            i += w;
        }
        let mut s = s0.add(s1).reduce_sum();
        if i < n {
            // The tail (fewer than one vector): its exponentials as one vector (padded with
            // `m`, whose lanes are discarded) instead of one scalar polynomial each. The
            // vector exponential is lane for lane the one-lane one (same operations; tested
            // bitwise in `simd::tests`), and the tail is added to `s` in index order as
            // before, so values and sum are unchanged.
            let t = n - i;
            let e = V::load_first(x.add(i), t, m).sub(vm).exp();
            e.store_first(x.add(i), t);
            let mut buf = [V::Elem::ZERO; MAX_LANES];
            e.store(buf.as_mut_ptr());
            for &e in &buf[..t] {
                s += e;
            }
        }
        s
    }
}
variants!(exp_sub_sum_body, exp_sub_sum_d, (x: *mut E, n: usize, m: E) -> E);

#[inline(always)]
unsafe fn exp_body<V: SimdVec>(x: *mut V::Elem, n: usize) {
    // SAFETY: the caller (the `exp_d` dispatcher's contract) guarantees `V`'s instruction set
    // is enabled and `x` is valid for `n` elements; every vector access covers offsets
    // `i..i + w` with `i + w <= n` (the loop condition), the tail accesses index `i < n`; the
    // one-lane vector needs no CPU feature.
    unsafe {
        let w = V::LANES;
        let mut i = 0;
        while i + w <= n {
            V::load(x.add(i)).exp().store(x.add(i));
            i += w;
        }
        while i < n {
            *x.add(i) = <V::Elem as SimdElem>::One::splat(*x.add(i))
                .exp()
                .reduce_sum();
            i += 1;
        }
    }
}
variants!(exp_body, exp_d, (x: *mut E, n: usize) -> ());

// ---------------------------------------------------------------- typed front end

#[track_caller]
fn same_len(what: &str, a: usize, b: usize) {
    assert_eq!(a, b, "simd::{what}: slice lengths {a} and {b} differ");
}

/// Dot product `Σᵢ aᵢ·bᵢ` (fused multiply-adds, four vector accumulators).
///
/// # Panics
/// If the lengths differ (a programming error).
#[inline]
#[track_caller]
pub fn dot<T: Real>(a: &[T], b: &[T]) -> T {
    dot_with(super::active(), a, b)
}

/// [`dot`] with an explicit variant (the scalar path if the CPU lacks it).
#[track_caller]
pub fn dot_with<T: Real>(isa: Isa, a: &[T], b: &[T]) -> T {
    same_len("dot", a.len(), b.len());
    if let (Some(a), Some(b)) = (slice_dd(a), slice_dd(b)) {
        return from_dd(dd_path::dot(a, b));
    }
    let isa = isa.or_scalar();
    // SAFETY: `isa.or_scalar()` is a variant this CPU supports; `a` and `b` are slices of the same length (checked above), so both
    // pointers are valid for `a.len()` elements; `by_kind!` sets `E` to the concrete type of `T`, so the pointer casts keep type and alignment.
    by_kind!(T, E => unsafe { dot_d::<E>(isa, a.as_ptr().cast(), b.as_ptr().cast(), a.len()) })
}

/// `y ← α·x + y` elementwise.
///
/// # Panics
/// If the lengths differ (a programming error).
#[inline]
#[track_caller]
pub fn axpy<T: Real>(alpha: T, x: &[T], y: &mut [T]) {
    axpy_with(super::active(), alpha, x, y)
}

/// [`axpy`] with an explicit variant.
#[track_caller]
pub fn axpy_with<T: Real>(isa: Isa, alpha: T, x: &[T], y: &mut [T]) {
    same_len("axpy", x.len(), y.len());
    if let (Some(alpha), Some(x)) = (to_dd(alpha), slice_dd(x)) {
        return dd_path::axpy(alpha, x, slice_dd_mut(y).expect("T is Dd"));
    }
    let isa = isa.or_scalar();
    let n = y.len();
    // SAFETY: `isa.or_scalar()` is a variant this CPU supports; `x` and `y` are slices of length `n` (checked above), `y` borrowed
    // mutably, so the pointers are valid for `n` elements; `by_kind!` sets `E` to the concrete type of `T`, so the pointer casts keep type and alignment, and the
    // `alpha` read is of an initialised `E`.
    by_kind!(T, E => unsafe {
        axpy_d::<E>(isa, *(&alpha as *const T).cast::<E>(), x.as_ptr().cast(), y.as_mut_ptr().cast(), n)
    })
}

/// `x ← α·x` elementwise.
#[inline]
pub fn scale<T: Real>(alpha: T, x: &mut [T]) {
    scale_with(super::active(), alpha, x)
}

/// [`scale`] with an explicit variant.
pub fn scale_with<T: Real>(isa: Isa, alpha: T, x: &mut [T]) {
    if let Some(alpha) = to_dd(alpha) {
        return dd_path::scale(alpha, slice_dd_mut(x).expect("T is Dd"));
    }
    let isa = isa.or_scalar();
    let n = x.len();
    // SAFETY: `isa.or_scalar()` is a variant this CPU supports; `x` is a mutably borrowed slice of length `n`, valid for `n` elements;
    // `by_kind!` sets `E` to the concrete type of `T`, so the pointer casts keep type and alignment, and the `alpha` read is of an initialised `E`.
    by_kind!(T, E => unsafe {
        scale_d::<E>(isa, *(&alpha as *const T).cast::<E>(), x.as_mut_ptr().cast(), n)
    })
}

/// `maxᵢ xᵢ`, ignoring NaNs; −∞ for an empty slice.
#[inline]
pub fn max<T: Real>(x: &[T]) -> T {
    max_with(super::active(), x)
}

/// [`max`] with an explicit variant.
pub fn max_with<T: Real>(isa: Isa, x: &[T]) -> T {
    if let Some(x) = slice_dd(x) {
        return from_dd(dd_path::max(x));
    }
    let isa = isa.or_scalar();
    // SAFETY: `isa.or_scalar()` is a variant this CPU supports; `x` is a slice, valid for `x.len()` elements; `by_kind!` sets `E` to the concrete type of `T`, so the pointer casts keep type and alignment.
    by_kind!(T, E => unsafe { max_d::<E>(isa, x.as_ptr().cast(), x.len()) })
}

/// `Σᵢ xᵢ` (four vector accumulators, then the tail in order); 0 for an empty slice.
#[inline]
pub fn sum<T: Real>(x: &[T]) -> T {
    sum_with(super::active(), x)
}

/// [`sum`] with an explicit variant.
pub fn sum_with<T: Real>(isa: Isa, x: &[T]) -> T {
    if let Some(x) = slice_dd(x) {
        return from_dd(dd_path::sum(x));
    }
    let isa = isa.or_scalar();
    // SAFETY: `isa.or_scalar()` is a variant this CPU supports; `x` is a slice, valid for `x.len()` elements; `by_kind!` sets `E` to the concrete type of `T`, so the pointer casts keep type and alignment.
    by_kind!(T, E => unsafe { sum_d::<E>(isa, x.as_ptr().cast(), x.len()) })
}

/// `Σᵢ exp(xᵢ − m)` with the vectorised exponential ([`super::SimdVec::exp`]); entries equal to
/// −∞ contribute exactly 0.
#[inline]
pub fn sum_exp<T: Real>(x: &[T], m: T) -> T {
    sum_exp_with(super::active(), x, m)
}

/// [`sum_exp`] with an explicit variant.
pub fn sum_exp_with<T: Real>(isa: Isa, x: &[T], m: T) -> T {
    if let (Some(x), Some(m)) = (slice_dd(x), to_dd(m)) {
        return from_dd(dd_path::sum_exp(x, m));
    }
    let isa = isa.or_scalar();
    // SAFETY: `isa.or_scalar()` is a variant this CPU supports; `x` is a slice, valid for `x.len()` elements; `by_kind!` sets `E` to the concrete type of `T`, so the pointer casts keep type and alignment, and the `m` read
    // is of an initialised `E`.
    by_kind!(T, E => unsafe {
        sum_exp_d::<E>(isa, x.as_ptr().cast(), x.len(), *(&m as *const T).cast::<E>())
    })
}

/// In place `xᵢ ← exp(xᵢ − m)`, returning `Σᵢ exp(xᵢ − m)` (the softmax numerator and its sum).
#[inline]
pub fn exp_sub_sum<T: Real>(x: &mut [T], m: T) -> T {
    exp_sub_sum_with(super::active(), x, m)
}

/// [`exp_sub_sum`] with an explicit variant.
pub fn exp_sub_sum_with<T: Real>(isa: Isa, x: &mut [T], m: T) -> T {
    if let Some(m) = to_dd(m) {
        return from_dd(dd_path::exp_sub_sum(slice_dd_mut(x).expect("T is Dd"), m));
    }
    let isa = isa.or_scalar();
    let n = x.len();
    // SAFETY: `isa.or_scalar()` is a variant this CPU supports; `x` is a mutably borrowed slice of length `n`, valid for `n` elements;
    // `by_kind!` sets `E` to the concrete type of `T`, so the pointer casts keep type and alignment, and the `m` read is of an initialised `E`.
    by_kind!(T, E => unsafe {
        exp_sub_sum_d::<E>(isa, x.as_mut_ptr().cast(), n, *(&m as *const T).cast::<E>())
    })
}

/// In place `xᵢ ← exp(xᵢ)` with the vectorised exponential ([`super::SimdVec::exp`]).
#[inline]
pub fn exp_slice<T: Real>(x: &mut [T]) {
    exp_slice_with(super::active(), x)
}

/// [`exp_slice`] with an explicit variant.
pub fn exp_slice_with<T: Real>(isa: Isa, x: &mut [T]) {
    if let Some(x) = slice_dd_mut(x) {
        return dd_path::exp_slice(x);
    }
    let isa = isa.or_scalar();
    let n = x.len();
    // SAFETY: `isa.or_scalar()` is a variant this CPU supports; `x` is a mutably borrowed slice of length `n`, valid for `n` elements;
    // `by_kind!` sets `E` to the concrete type of `T`, so the pointer casts keep type and alignment.
    by_kind!(T, E => unsafe { exp_d::<E>(isa, x.as_mut_ptr().cast(), n) })
}
