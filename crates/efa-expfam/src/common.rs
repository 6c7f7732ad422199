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
        row,
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
        row,
        component,
        value: value.to_f64(),
        expected,
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
