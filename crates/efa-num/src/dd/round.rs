//! Rounding to integers, absolute value, maximum and minimum of [`Dd`] (all exact).
//!
//! If `hi` is not an integer, `hi + lo` lies strictly between the same two integers as `hi`
//! (and on the same side of a half-integer, unless `hi` is one): `hi` is a multiple of
//! `ulp(hi)`, at least `ulp(hi)` from the next integer, and `|lo| ≤ ulp(hi)/2`. So only an
//! integral `hi` (or a half-integral one, for `round`) needs `lo`.

use super::{two_sum, Dd};

impl Dd {
    /// `|x|` (exact).
    #[inline]
    pub(crate) fn abs_dd(self) -> Dd {
        if self.hi.is_sign_negative() {
            -self
        } else {
            self
        }
    }

    /// `⌊x⌋`: `⌊hi⌋` if `hi` is not an integer, else `hi + ⌊lo⌋` (renormalised, exact).
    pub(crate) fn floor_dd(self) -> Dd {
        let f = self.hi.floor();
        if f != self.hi || !self.is_finite() {
            return Dd::raw(f, 0.0);
        }
        let (s, e) = two_sum(self.hi, self.lo.floor());
        Dd::raw(s, e)
    }

    /// `⌈x⌉ = −⌊−x⌋`.
    pub(crate) fn ceil_dd(self) -> Dd {
        -(-self).floor_dd()
    }

    /// Truncation toward zero: `⌊x⌋` for `x ≥ 0`, `⌈x⌉` otherwise.
    pub(crate) fn trunc_dd(self) -> Dd {
        let t = if self.hi >= 0.0 {
            self.floor_dd()
        } else {
            self.ceil_dd()
        };
        if t.hi == 0.0 {
            return Dd::raw(0.0f64.copysign(self.hi), 0.0);
        }
        t
    }

    /// Round half away from zero. With `hi` non-integral: `round(hi)`, except for a
    /// half-integral `hi`, where the sign of `lo` decides (a zero `lo` is a tie, away from 0).
    /// With `hi` integral: `hi + r`, `r` the integer nearest `lo` with ties going toward the
    /// sign of x.
    pub(crate) fn round_dd(self) -> Dd {
        let (hi, lo) = (self.hi, self.lo);
        if !self.is_finite() {
            return self;
        }
        if hi.floor() != hi {
            let half = hi - hi.trunc();
            let r = if half.abs() == 0.5 && lo != 0.0 && (lo > 0.0) != (hi > 0.0) {
                hi.trunc()
            } else {
                hi.round()
            };
            return Dd::raw(r, 0.0);
        }
        let fl = lo.floor();
        let r = if lo - fl == 0.5 {
            if hi > 0.0 {
                fl + 1.0
            } else {
                fl
            }
        } else {
            lo.round()
        };
        let (s, e) = two_sum(hi, r);
        Dd::raw(s, e)
    }

    /// The larger value, ignoring a NaN operand (as `f64::max`).
    #[inline]
    pub(crate) fn max_dd(self, y: Dd) -> Dd {
        if self.is_nan() || y > self {
            y
        } else {
            self
        }
    }

    /// The smaller value, ignoring a NaN operand (as `f64::min`).
    #[inline]
    pub(crate) fn min_dd(self, y: Dd) -> Dd {
        if self.is_nan() || y < self {
            y
        } else {
            self
        }
    }
}
