//! Central finite differences in f64: the one implementation every efa audit and test uses.
//!
//! `D(h) = (f(θ + h·e) − f(θ − h·e)) / (r₊ − r₋)` where `r±` is the coordinate actually reached
//! (`θᵢ ± h` as rounded, for a coordinate `e = eᵢ`) or `±h` (for a unit direction `e`), with
//! `h = rel_step·max(1, |θᵢ|)` (coordinate) or `h = rel_step·max(1, ‖θ‖∞)` (direction). With
//! Richardson extrapolation the result is `(4·D(h/2) − D(h)) / 3`, which cancels the `O(h²)`
//! error term. Vector-valued functions are differenced component by component
//! ([`central_difference_vec`], a Jacobian column).

/// How numeric derivatives are taken.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FdOptions {
    /// Relative step: `h = rel_step·max(1, |θ|)`. Default `1e-6`.
    pub rel_step: f64,
    /// Use Richardson extrapolation `(4·D(h/2) − D(h)) / 3`. Default off.
    pub richardson: bool,
}

impl Default for FdOptions {
    /// `rel_step = 1e-6`, no Richardson extrapolation.
    fn default() -> Self {
        FdOptions {
            rel_step: 1e-6,
            richardson: false,
        }
    }
}

/// The central difference itself, for every implementation in this module: `place(x, t)`
/// moves `x` to the point at offset `t` along the line (`t = 0` restores it bitwise) and
/// returns that point's coordinate along the line; `D(h) = (f(r₊) − f(r₋)) / (r₊ − r₋)`
/// componentwise, Richardson-combined per `opts`.
fn difference(
    f: &mut dyn FnMut(&[f64]) -> Vec<f64>,
    x: &mut [f64],
    h: f64,
    opts: &FdOptions,
    mut place: impl FnMut(&mut [f64], f64) -> f64,
) -> Vec<f64> {
    let mut d = |h: f64| -> Vec<f64> {
        let rp = place(x, h);
        let fp = f(x);
        let rm = place(x, -h);
        let fm = f(x);
        place(x, 0.0);
        assert_eq!(
            fp.len(),
            fm.len(),
            "central difference: the function returned {} values at +h and {} at −h",
            fp.len(),
            fm.len()
        );
        fp.iter()
            .zip(&fm)
            .map(|(p, m)| (p - m) / (rp - rm))
            .collect()
    };
    if opts.richardson {
        let d1 = d(h);
        let d2 = d(h / 2.0);
        d1.iter()
            .zip(&d2)
            .map(|(a, b)| (4.0 * b - a) / 3.0)
            .collect()
    } else {
        d(h)
    }
}

/// Numeric `∂f/∂x[i]` of a vector-valued `f` (one Jacobian column), componentwise
/// `(f(x + h·eᵢ) − f(x − h·eᵢ)) / ((xᵢ + h) − (xᵢ − h))`, `h = rel_step·max(1, |x[i]|)`.
/// `x` is restored (bitwise) before returning.
///
/// Panics if `i >= x.len()` or `f` returns different lengths at the two points (caller bugs).
#[track_caller]
pub fn central_difference_vec(
    f: &mut dyn FnMut(&[f64]) -> Vec<f64>,
    x: &mut [f64],
    i: usize,
    opts: &FdOptions,
) -> Vec<f64> {
    assert!(
        i < x.len(),
        "central_difference: index {i} out of range for length {}",
        x.len()
    );
    let x0 = x[i];
    let h = opts.rel_step * x0.abs().max(1.0);
    difference(f, x, h, opts, |x, t| {
        x[i] = if t == 0.0 { x0 } else { x0 + t };
        x[i]
    })
}

/// Numeric `∂f/∂x[i]` by central differences: `(f(x + h·eᵢ) − f(x − h·eᵢ)) / 2h`,
/// `h = rel_step·max(1, |x[i]|)` (the denominator is the step actually taken after rounding).
/// `x` is restored before returning.
///
/// Panics if `i >= x.len()` (caller bug).
#[track_caller]
pub fn central_difference(
    f: &mut dyn FnMut(&[f64]) -> f64,
    x: &mut [f64],
    i: usize,
    opts: &FdOptions,
) -> f64 {
    central_difference_vec(&mut |x| vec![f(x)], x, i, opts)[0]
}

/// The whole numeric gradient `[∂f/∂x₀, …, ∂f/∂x_{n−1}]` of `f: ℝⁿ → ℝ` at `x`, one
/// [`central_difference`] per coordinate.
pub fn central_gradient(f: &mut dyn FnMut(&[f64]) -> f64, x: &[f64], opts: &FdOptions) -> Vec<f64> {
    let mut x = x.to_vec();
    (0..x.len())
        .map(|i| central_difference(f, &mut x, i, opts))
        .collect()
}

/// Numeric directional derivative `⟨∇f(x), d⟩ ≈ (f(x + h·d) − f(x − h·d)) / 2h` with
/// `h = rel_step·max(1, ‖x‖∞)`. `x` is restored (bitwise) before returning.
///
/// Panics if `d.len() != x.len()` (caller bug).
#[track_caller]
pub fn directional_difference(
    f: &mut dyn FnMut(&[f64]) -> f64,
    x: &mut [f64],
    d: &[f64],
    opts: &FdOptions,
) -> f64 {
    assert_eq!(
        x.len(),
        d.len(),
        "directional_difference: direction length differs from x"
    );
    let x0: Vec<f64> = x.to_vec();
    let scale = x0.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    let h = opts.rel_step * scale;
    let mut g = |x: &[f64]| vec![f(x)];
    difference(&mut g, x, h, opts, |x, t| {
        if t == 0.0 {
            x.copy_from_slice(&x0);
        } else {
            for ((xi, &x0i), &di) in x.iter_mut().zip(&x0).zip(d) {
                *xi = x0i + t * di;
            }
        }
        t
    })[0]
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn central_difference_of_cubic_matches_derivative() {
        // f(x) = x0³ + 2·x0·x1, ∂f/∂x0 = 3·x0² + 2·x1 = 3·4 + 2·5 = 22 at (2, 5).
        let mut f = |x: &[f64]| x[0].powi(3) + 2.0 * x[0] * x[1];
        let mut x = vec![2.0, 5.0];
        let d = central_difference(&mut f, &mut x, 0, &FdOptions::default());
        assert!((d - 22.0).abs() < 1e-6, "{d}");
        assert_eq!(x, vec![2.0, 5.0]);
        // ∂f/∂x1 = 2·x0 = 4
        let d1 = central_difference(&mut f, &mut x, 1, &FdOptions::default());
        assert!((d1 - 4.0).abs() < 1e-7, "{d1}");
    }

    #[test]
    fn richardson_is_more_accurate_with_a_large_step() {
        // f = sin, f'(1) = cos 1; with h = 1e-2 plain central error is ≈ h²/6·cos 1 ≈ 9e-6,
        // Richardson error is O(h⁴) ≈ 1e-10.
        let mut f = |x: &[f64]| x[0].sin();
        let mut x = vec![1.0];
        let plain = FdOptions {
            rel_step: 1e-2,
            richardson: false,
        };
        let rich = FdOptions {
            rel_step: 1e-2,
            richardson: true,
        };
        let e_plain = (central_difference(&mut f, &mut x, 0, &plain) - 1f64.cos()).abs();
        let e_rich = (central_difference(&mut f, &mut x, 0, &rich) - 1f64.cos()).abs();
        assert!(e_plain > 1e-6 && e_plain < 2e-5, "{e_plain}");
        assert!(e_rich < 1e-9, "{e_rich}");
    }

    #[test]
    fn directional_difference_matches_inner_product() {
        // f = x0² + 3·x1, ∇f = (2·x0, 3) = (2, 3) at (1, 4); d = (0.6, 0.8): ⟨∇f, d⟩ = 3.6.
        let mut f = |x: &[f64]| x[0] * x[0] + 3.0 * x[1];
        let mut x = vec![1.0, 4.0];
        let v = directional_difference(&mut f, &mut x, &[0.6, 0.8], &FdOptions::default());
        assert!((v - 3.6).abs() < 1e-6, "{v}");
        assert_eq!(x, vec![1.0, 4.0]);
    }

    #[test]
    fn jacobian_column_and_gradient() {
        // f(x) = (x0·x1, sin x0): ∂f/∂x0 = (x1, cos x0) = (2, cos 0.5) at (0.5, 2).
        let mut f = |x: &[f64]| vec![x[0] * x[1], x[0].sin()];
        let mut x = vec![0.5, 2.0];
        let col = central_difference_vec(&mut f, &mut x, 0, &FdOptions::default());
        assert!((col[0] - 2.0).abs() < 1e-8, "{col:?}");
        assert!((col[1] - 0.5f64.cos()).abs() < 1e-8, "{col:?}");
        assert_eq!(x, vec![0.5, 2.0]);
        // ∇(x0²·x1) = (2·x0·x1, x0²) = (−6, 2.25) at (−1.5, 2).
        let g = central_gradient(
            &mut |x: &[f64]| x[0] * x[0] * x[1],
            &[-1.5, 2.0],
            &FdOptions::default(),
        );
        assert!(
            (g[0] + 6.0).abs() < 1e-7 && (g[1] - 2.25).abs() < 1e-7,
            "{g:?}"
        );
    }

    #[test]
    fn negative_zero_is_restored_bitwise() {
        let mut f = |x: &[f64]| x[0] + 2.0 * x[1];
        let mut x = vec![-0.0, -0.0];
        let d = directional_difference(&mut f, &mut x, &[0.6, 0.8], &FdOptions::default());
        assert!((d - 2.2).abs() < 1e-8, "{d}");
        let c = central_difference(&mut f, &mut x, 1, &FdOptions::default());
        assert!((c - 2.0).abs() < 1e-8, "{c}");
        assert!(
            x.iter().all(|v| v.to_bits() == (-0.0f64).to_bits()),
            "{x:?}"
        );
    }
}
