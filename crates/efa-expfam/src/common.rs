//! Small helpers shared by the family modules.

use crate::ExpfamError;
use efa_num::Real;

/// Converts an f64 constant.
#[inline(always)]
pub(crate) fn c<T: Real>(x: f64) -> T {
    T::from_f64(x)
}

/// ½ ln(2π).
pub(crate) const HALF_LN_2PI: f64 = 0.918_938_533_204_672_8;

/// Non-negative finite integer.
#[inline]
pub(crate) fn is_count<T: Real>(v: T) -> bool {
    v.is_finite() && v >= T::ZERO && v == v.floor()
}

/// Support error helper.
pub(crate) fn support<T: Real>(
    family: &'static str,
    row: usize,
    component: usize,
    value: T,
    expected: &'static str,
) -> ExpfamError {
    ExpfamError::Support {
        family,
        row: Some(row),
        component,
        value: value.to_f64(),
        expected,
    }
}

/// Domain error helper.
pub(crate) fn domain<T: Real>(
    family: &'static str,
    row: usize,
    component: usize,
    value: T,
    expected: &'static str,
) -> ExpfamError {
    ExpfamError::Domain {
        family,
        row: Some(row),
        component,
        value: value.to_f64(),
        expected,
    }
}

/// Error for parameters a sampler cannot take (e.g. a rate so small its scale overflows).
pub(crate) fn no_sampler(family: &'static str, row: usize, value: f64) -> ExpfamError {
    ExpfamError::Domain {
        family,
        row: Some(row),
        component: 0,
        value,
        expected: "natural parameters whose distribution can be sampled (finite scale)",
    }
}

/// Checks every η component is finite.
pub(crate) fn check_finite_eta<T: Real>(
    family: &'static str,
    eta: &[T],
    row: usize,
) -> Result<(), ExpfamError> {
    for (i, &v) in eta.iter().enumerate() {
        if !v.is_finite() {
            return Err(domain(family, row, i, v, "a finite real number"));
        }
    }
    Ok(())
}

/// Checks a scalar observation is finite.
pub(crate) fn check_finite_obs<T: Real>(
    family: &'static str,
    y: T,
    row: usize,
) -> Result<(), ExpfamError> {
    if y.is_finite() {
        Ok(())
    } else {
        Err(support(family, row, 0, y, "a finite real number"))
    }
}

/// Shared pieces of softplus(±x) and σ(±x) from one exponential: with e = exp(−|x|) and
/// l = ln_1p(e), softplus(x) = max(x, 0) + l, softplus(−x) = max(−x, 0) + l, and σ(x), σ(−x)
/// are 1/(1 + e) and e/(1 + e) in the order given by the sign of x.
/// Returns (softplus(x), softplus(−x), σ(x), σ(−x)).
#[inline]
pub(crate) fn logistic_parts<T: Real>(x: T) -> (T, T, T, T) {
    let e = (-x.abs()).exp();
    let l = e.ln_1p();
    let d = T::ONE + e;
    let (big, small) = (T::ONE / d, e / d);
    if x >= T::ZERO {
        (x + l, l, big, small)
    } else {
        (l, l - x, small, big)
    }
}
