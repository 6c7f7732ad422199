//! ψ near its positive root x₀ = 1.4616321449683623…, and ψ(1 + x) without forming 1 + x there.
//!
//! ψ(x) ≈ ψ′(x₀)(x − x₀) vanishes at x₀. The recurrence-plus-asymptotic route of
//! [`super::digamma`] sums terms of size ~2.8 (−Σ 1/(x + k) and ln(x + 15)) into that small
//! value and keeps only about eps·2.8/|ψ(x)| relative accuracy (≥ 450 ulps within 0.015 of x₀,
//! none at x₀ itself); a caller holding the Gamma shape as η₁ = α − 1 also loses ½ulp(1) by
//! forming 1 + η₁. Within ¼ of the root both use the Taylor series
//! ψ(x) = Σ_{k≥1} ψ⁽ᵏ⁾(x₀)/k! · tᵏ, t = x − x₀ = (x − x₀,hi) − x₀,lo,
//! with x₀ split into two floats so that t keeps full relative accuracy (x − x₀,hi is exact by
//! Sterbenz). |ψ⁽ᵏ⁾(x₀)/k!| ≈ 0.97·0.684^(k−1) (the pole at 0), so at |t| ≤ ¼ the terms shrink
//! like 0.171^k; 23 terms leave a tail below 0.02 ulp of the smallest value on the range
//! (|ψ(x₀ ± ¼)| ≥ 0.2); binary32 uses 11.

use super::c;
use crate::Real;

/// x₀ as hi + lo: mpmath `findroot(digamma, 1.46)` at 60 digits,
/// 1.461632144968362341262659542325721328468; hi the nearest binary64, lo the rest.
const ROOT: (f64, f64) = (1.4616321449683622, 9.549995429965697e-17);
/// The same split with hi the nearest binary32.
const ROOT_F32: (f64, f64) = (1.4616321325302124, 1.243815006546356e-08);
/// x₀ − 1 = 0.461632144968362341262659542325721328468 split as above.
const ROOT_M1: (f64, f64) = (0.46163214496836236, -1.5522348162858677e-17);
/// x₀ − 1 split with a binary32 hi.
const ROOT_M1_F32: (f64, f64) = (0.4616321325302124, 1.243815006546356e-08);
/// The series is used for |x − x₀| ≤ this.
const RADIUS: f64 = 0.25;

/// ψ⁽ᵏ⁾(x₀)/k! for k = 1, …, 23: mpmath `psi(k, x0) / factorial(k)` at 60 digits, rounded to
/// binary64.
const TAYLOR: [f64; 23] = [
    0.9676722454476212,
    -0.4427631689835921,
    0.258499760955651,
    -0.16394270544240652,
    0.10782405069126237,
    -0.07219956125645471,
    0.04880428816414311,
    -0.03316112647484736,
    0.022597648232218104,
    -0.01542476590494896,
    0.010538791616612175,
    -0.007204534386356869,
    0.004926781395729853,
    -0.003369801655439328,
    0.002305126326734928,
    -0.0015769367714301972,
    0.0010788252019162967,
    -0.0007380709389960052,
    0.000504953265834602,
    -0.0003454680251063077,
    0.00023635601564027053,
    -0.00016170622091974803,
    0.0001106337276874741,
];

/// t = x − (hi + lo) for x near hi, from the split matching the precision.
#[inline]
fn offset<T: Real>(x: T, split64: (f64, f64), split32: (f64, f64)) -> T {
    let (hi, lo) = if T::BYTES == 4 { split32 } else { split64 };
    (x - c::<T>(hi)) - c::<T>(lo)
}

/// Σ_{k≥1} ψ⁽ᵏ⁾(x₀)/k! · tᵏ (Horner), for |t| ≤ ¼.
fn series<T: Real>(t: T) -> T {
    let n = if T::BYTES == 4 { 11 } else { TAYLOR.len() };
    let mut acc = T::ZERO;
    for &k in TAYLOR[..n].iter().rev() {
        acc = acc * t + c(k);
    }
    acc * t
}

/// ψ(x) from the root series when |x − x₀| ≤ ¼, else `None`.
pub(super) fn digamma_near_root<T: Real>(x: T) -> Option<T> {
    let t = offset(x, ROOT, ROOT_F32);
    (t.abs() <= c(RADIUS)).then(|| series(t))
}

/// digamma1p(x) = ψ(1 + x), to a few ulps also near the root of ψ (x ≈ 0.4616, i.e. a Gamma
/// shape α = 1 + x ≈ 1.4616) where ψ is small: there t = x − (x₀ − 1) is formed from x itself
/// (never 1 + x) and the root series is summed; elsewhere ψ(1 + x) by [`super::digamma`]
/// (1 + x rounds by ≤ ½ulp(1 + x), which moves ψ by ψ′·½ulp — a few ulps of |ψ| away from the
/// root). NaN for NaN and at the poles x = −1, −2, ….
pub fn digamma1p<T: Real>(x: T) -> T {
    let t = offset(x, ROOT_M1, ROOT_M1_F32);
    if t.abs() <= c(RADIUS) {
        series(t)
    } else {
        super::digamma(T::ONE + x)
    }
}

#[cfg(test)]
mod tests {
    use super::super::digamma;
    use super::*;

    /// |got − want|/(eps·|want|) with want rounded to T.
    fn eps_err<T: Real>(got: T, want: f64) -> f64 {
        let w = T::from_f64(want).to_f64();
        if got.to_f64() == w {
            0.0
        } else {
            (got.to_f64() - w).abs() / (w.abs() * T::EPSILON.to_f64())
        }
    }

    // Reference values: mpmath 1.3, mp.dps = 60, `digamma(mpf(x))` and `digamma(1 + mpf(x))`
    // on the exact binary64 inputs, rounded once to binary64.

    #[test]
    fn digamma_near_its_root_matches_mpmath() {
        let cases = [
            (1.4616321449683622, -9.241265521729427e-17),
            (1.4616321449683625, 1.2245374622004068e-16),
            (1.461632144968362, -3.072790566546293e-16),
            (1.4616321450683623, 9.676714013423533e-11),
            (1.4616321448683622, -9.676732496840103e-11),
            (1.4616421449683623, 9.676678178388793e-06),
            (1.4613321449683623, -0.0002903415293003771),
            (1.4716321449683623, 0.009632703008622361),
            (1.3616321449683622, -0.10147090594245962),
            (1.6616321449683622, 0.1776600449961982),
            (1.2116321449683622, -0.27439673187196256),
            (1.7116321449683622, 0.21773423736833988),
            (1.75, 0.24747245354686118),
            (1.2, -0.2890398965921884),
            (1.0, -0.5772156649015329),
            (2.0, 0.42278433509846713),
            (0.5, -1.9635100260214235),
            (3.7, 1.1671535393615113),
        ];
        for &(x, want) in &cases {
            let e = eps_err(digamma(x), want);
            // Off the series range the recurrence amplifies rounding by 2.8/|ψ| (≤ 14 here).
            let bound = if digamma_near_root(x).is_some() {
                3.0
            } else {
                24.0
            };
            assert!(e <= bound, "digamma({x}) {e:.1} eps");
        }
        let cases32 = [
            (1.4616321325302124, -1.203605254910667e-08),
            (1.461632251739502, 1.0331946336967871e-07),
            (1.4616320133209229, -1.2739158105197846e-07),
            (1.25, -0.22745353337626542),
            (1.5, 0.03648997397857652),
            (1.625, 0.14729123542343342),
        ];
        for &(x, want) in &cases32 {
            let e = eps_err(digamma(x as f32), want);
            assert!(e <= 3.0, "f32 digamma({x}) {e:.1} eps");
        }
    }

    #[test]
    fn digamma1p_matches_mpmath_without_forming_one_plus_x() {
        let cases = [
            (0.46163214496836236, 1.5020545501373212e-17),
            (0.4616321449683624, 6.873714586070695e-17),
            (0.4616321449683623, -3.869605485796053e-17),
            (0.4616321449673624, -9.676358183279795e-13),
            (0.47, 0.008066489011364869),
            (0.3, -0.16919088886679967),
            (0.7, 0.2085478748734939),
            (1e-09, -0.5772156632565988),
            (-0.5, -1.9635100260214235),
            (5.0, 1.7061176684318005),
        ];
        for &(x, want) in &cases {
            let e = eps_err(digamma1p(x), want);
            assert!(e <= 24.0, "digamma1p({x}) {e:.1} eps");
            if (x - ROOT_M1.0).abs() < 1e-3 {
                assert!(e <= 3.0, "digamma1p({x}) {e:.1} eps");
                // ψ(1 + x) with 1 + x rounded first (where that rounds) is far off.
                if (1.0 + x) - 1.0 != x {
                    assert!(eps_err(digamma(1.0 + x), want) > 1e6);
                }
            }
        }
        let cases32 = [
            (0.4616321325302124, -1.203605254910667e-08),
            (0.4616321921348572, 4.564170698329666e-08),
            (0.5, 0.03648997397857652),
            (0.375, -0.08733238247847291),
            (0.25, -0.22745353337626542),
        ];
        for &(x, want) in &cases32 {
            let e = eps_err(digamma1p(x as f32), want);
            assert!(e <= 4.0, "f32 digamma1p({x}) {e:.1} eps");
        }
    }

    #[test]
    fn root_series_meets_the_recurrence_at_its_edges() {
        // Just inside and just outside x₀ ± ¼ the two routes agree to the recurrence's accuracy
        // there (2.8/|ψ| ≈ 13 ulps).
        for &x in &[ROOT.0 - RADIUS + 1e-9, ROOT.0 + RADIUS - 1e-9] {
            let inside = digamma_near_root(x).unwrap();
            let mut y = x;
            let mut acc = 0.0;
            while y < 16.0 {
                acc -= 1.0 / y;
                y += 1.0;
            }
            let recurrence = acc + digamma(y);
            assert!((inside - recurrence).abs() <= 32.0 * f64::EPSILON * inside.abs());
        }
    }
}
