//! The double-double branches of the row kernels: plain loops in index order in [`Dd`]
//! arithmetic (sums accumulated in Dd, exponentials by `Dd::exp`). The typed front ends take
//! them before their by-kind dispatch when `T` is `Dd`.

use crate::dd::Dd;
use crate::Real;

/// `Σᵢ aᵢ·bᵢ` (product then sum, each in Dd).
pub(super) fn dot(a: &[Dd], b: &[Dd]) -> Dd {
    a.iter().zip(b).fold(Dd::ZERO, |s, (&x, &y)| s + x * y)
}

/// `yᵢ ← α·xᵢ + yᵢ`.
pub(super) fn axpy(alpha: Dd, x: &[Dd], y: &mut [Dd]) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi = alpha * xi + *yi;
    }
}

/// `xᵢ ← α·xᵢ`.
pub(super) fn scale(alpha: Dd, x: &mut [Dd]) {
    for xi in x.iter_mut() {
        *xi = alpha * *xi;
    }
}

/// `maxᵢ xᵢ` ignoring NaNs; −∞ for an empty slice.
pub(super) fn max(x: &[Dd]) -> Dd {
    x.iter().fold(Dd::NEG_INFINITY, |m, &v| v.max(m))
}

/// `Σᵢ xᵢ`; 0 for an empty slice.
pub(super) fn sum(x: &[Dd]) -> Dd {
    x.iter().fold(Dd::ZERO, |s, &v| s + v)
}

/// `Σᵢ exp(xᵢ − m)`.
pub(super) fn sum_exp(x: &[Dd], m: Dd) -> Dd {
    x.iter().fold(Dd::ZERO, |s, &v| s + (v - m).exp())
}

/// `xᵢ ← exp(xᵢ − m)`, returning their sum.
pub(super) fn exp_sub_sum(x: &mut [Dd], m: Dd) -> Dd {
    let mut s = Dd::ZERO;
    for xi in x.iter_mut() {
        *xi = (*xi - m).exp();
        s += *xi;
    }
    s
}

/// `xᵢ ← exp(xᵢ)`.
pub(super) fn exp_slice(x: &mut [Dd]) {
    for xi in x.iter_mut() {
        *xi = xi.exp();
    }
}
