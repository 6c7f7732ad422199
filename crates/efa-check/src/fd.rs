//! Central finite differences in f64.
//!
//! `D(h) = (f(θ + h·e) − f(θ − h·e)) / 2h` with `h = rel_step·max(1, |θ|)` (coordinate `e`) or
//! `h = rel_step·max(1, ‖θ‖∞)` (unit direction `e`); with Richardson extrapolation the result is
//! `(4·D(h/2) − D(h)) / 3`, which cancels the `O(h²)` error term.

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

/// Combines central differences at `h` (and `h/2` with Richardson) given an evaluator `d(h)`
/// returning `(f(θ+h·e) − f(θ−h·e)) / 2h`.
fn combine(opts: &FdOptions, h: f64, mut d: impl FnMut(f64) -> f64) -> f64 {
    if opts.richardson {
        let d1 = d(h);
        let d2 = d(h / 2.0);
        (4.0 * d2 - d1) / 3.0
    } else {
        d(h)
    }
}

/// Numeric `∂f/∂x[i]` by central differences: `(f(x + h·eᵢ) − f(x − h·eᵢ)) / 2h`,
/// `h = rel_step·max(1, |x[i]|)`. `x` is restored before returning.
///
/// Panics if `i >= x.len()` (caller bug).
#[track_caller]
pub fn central_difference(
    f: &mut dyn FnMut(&[f64]) -> f64,
    x: &mut [f64],
    i: usize,
    opts: &FdOptions,
) -> f64 {
    assert!(
        i < x.len(),
        "central_difference: index {i} out of range for length {}",
        x.len()
    );
    let x0 = x[i];
    let h = opts.rel_step * x0.abs().max(1.0);
    combine(opts, h, |h| {
        x[i] = x0 + h;
        let fp = f(x);
        x[i] = x0 - h;
        let fm = f(x);
        x[i] = x0;
        (fp - fm) / (2.0 * h)
    })
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
    combine(opts, h, |h| {
        for ((xi, &x0i), &di) in x.iter_mut().zip(&x0).zip(d) {
            *xi = x0i + h * di;
        }
        let fp = f(x);
        for ((xi, &x0i), &di) in x.iter_mut().zip(&x0).zip(d) {
            *xi = x0i - h * di;
        }
        let fm = f(x);
        x.copy_from_slice(&x0);
        (fp - fm) / (2.0 * h)
    })
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
}
