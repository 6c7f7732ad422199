//! Kernels down the columns of a strided tile: vectors `x + j·stride`, one per row `j` (the
//! attention kernels' softmax runs down columns of scores).

use super::SimdVec;
use crate::Real;

/// `x[j·stride] ← exp(x[j·stride] − shift)` for the vectors `j < n` (lane by lane); returns
/// `0 + e₀ + e₁ + …`, summed in `j` order (the order a one-vector loop sums in, so the same
/// bits). [`SIDE`] exponentials are formed side by side ([`SimdVec::exp_each`]): one at a time,
/// the out-of-order window holds too few of them to keep the multiply-add units busy (the
/// attention kernels' softmax runs down columns of scores).
///
/// # Safety
/// The instruction set of `V` must be enabled; `x + j·stride` valid for one vector for `j < n`.
#[inline(always)]
pub unsafe fn exp_shift_strided<V: SimdVec>(
    x: *mut V::Elem,
    stride: usize,
    n: usize,
    shift: V,
) -> V {
    // SAFETY: the caller guarantees `V`'s instruction set and one vector at `x + j·stride` for
    // every `j < n`; the groups cover `j .. j + K ≤ n`.
    unsafe {
        let mut sum = V::splat(V::Elem::ZERO);
        let mut j = 0;
        while j + SIDE <= n {
            exp_shift_group::<V, SIDE>(x, stride, j, shift, &mut sum);
            j += SIDE;
        }
        // The last few side by side as well (one alone is a chain of dependent steps).
        match n - j {
            1 => exp_shift_group::<V, 1>(x, stride, j, shift, &mut sum),
            2 => exp_shift_group::<V, 2>(x, stride, j, shift, &mut sum),
            3 => exp_shift_group::<V, 3>(x, stride, j, shift, &mut sum),
            4 => exp_shift_group::<V, 4>(x, stride, j, shift, &mut sum),
            5 => exp_shift_group::<V, 5>(x, stride, j, shift, &mut sum),
            _ => {}
        }
        sum
    }
}

/// The vectors `j .. j + K` of [`exp_shift_strided`]: exponentials side by side, stored and
/// added to `sum` in index order.
///
/// # Safety
/// As [`exp_shift_strided`], for the vectors `j .. j + K`.
#[inline(always)]
unsafe fn exp_shift_group<V: SimdVec, const K: usize>(
    x: *mut V::Elem,
    stride: usize,
    j: usize,
    shift: V,
    sum: &mut V,
) {
    // SAFETY: the caller guarantees `V`'s instruction set and one vector at `x + i·stride`
    // for `j ≤ i < j + K`, the only ones read and written.
    unsafe {
        let mut v = [shift; K];
        for (t, v) in v.iter_mut().enumerate() {
            *v = V::load(x.add((j + t) * stride)).sub(shift);
        }
        for (t, e) in V::exp_each(v).into_iter().enumerate() {
            e.store(x.add((j + t) * stride));
            *sum = sum.add(e);
        }
    }
}

/// Exponentials the softmax kernels form side by side ([`SimdVec::exp_each`]): enough
/// independent chains to fill the multiply-add units, few enough that the arguments and
/// polynomials stay in sixteen 256-bit registers.
pub const SIDE: usize = 6;
// `exp_shift_strided` has a group for each remainder below SIDE up to 5.
const _: () = assert!(SIDE <= 6);
