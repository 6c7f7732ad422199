//! Elementwise unary ops: neg, exp, log, log1p, softplus, sigmoid, tanh, relu, gelu, sqrt,
//! square, scale by a constant, shift by a constant.
//!
//! Stable forms: `softplus(x) = max(x, 0) + ln(1 + e^{−|x|})`;
//! `σ(x) = 1/(1 + e^{−x})` for `x ≥ 0`, `e^{x}/(1 + e^{x})` for `x < 0`; `σ'(x) = σ(x)·σ(−x)`
//! (never `1 − σ`); `gelu(x) = x·Φ(x) = x·(1 + erf(x/√2))/2`, `gelu'(x) = Φ(x) + x·φ(x)`.
//! Softplus and sigmoid are `efa_num::scalar`'s.
//!
//! NaN in, NaN out: every op maps a NaN input to a NaN output and a NaN gradient (`relu`
//! included: `max(NaN, 0)` would be 0, so NaN is passed through explicitly).

use crate::error::Result;
use crate::op::Op;
use crate::op::UnaryKind;
use crate::tape::{Tape, Var};
use efa_num::scalar::{sigmoid, softplus};
use efa_num::Real;
use ndarray::{ArrayD, Zip};

/// Standard normal cdf `Φ(x) = (1 + erf(x/√2))/2`.
fn phi_cdf<T: Real>(x: T) -> T {
    T::HALF * (T::ONE + (x / T::TWO.sqrt()).erf())
}

impl<T: Real> UnaryKind<T> {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            UnaryKind::Neg => "neg",
            UnaryKind::Exp => "exp",
            UnaryKind::Log => "log",
            UnaryKind::Log1p => "log1p",
            UnaryKind::Softplus => "softplus",
            UnaryKind::Sigmoid => "sigmoid",
            UnaryKind::Tanh => "tanh",
            UnaryKind::Relu => "relu",
            UnaryKind::Gelu => "gelu",
            UnaryKind::Sqrt => "sqrt",
            UnaryKind::Square => "square",
            UnaryKind::Scale(_) => "scale",
            UnaryKind::Shift(_) => "shift",
        }
    }

    /// Bytes backward reads: the input, the output, both or neither.
    pub(crate) fn saved(&self, input: usize, output: usize) -> usize {
        match self {
            UnaryKind::Neg | UnaryKind::Scale(_) | UnaryKind::Shift(_) => 0,
            UnaryKind::Exp | UnaryKind::Tanh | UnaryKind::Sqrt => output,
            UnaryKind::Sigmoid => input + output,
            _ => input,
        }
    }

    /// The forward map `y = f(x)`.
    fn forward(&self, x: T) -> T {
        match *self {
            UnaryKind::Neg => -x,
            UnaryKind::Exp => x.exp(),
            UnaryKind::Log => x.ln(),
            UnaryKind::Log1p => x.ln_1p(),
            UnaryKind::Softplus => softplus(x),
            UnaryKind::Sigmoid => sigmoid(x),
            UnaryKind::Tanh => x.tanh(),
            // NaN stays NaN (`max` alone would map it to 0)
            UnaryKind::Relu => {
                if x.is_nan() {
                    x
                } else {
                    x.max(T::ZERO)
                }
            }
            UnaryKind::Gelu => x * phi_cdf(x),
            UnaryKind::Sqrt => x.sqrt(),
            UnaryKind::Square => x * x,
            UnaryKind::Scale(c) => c * x,
            UnaryKind::Shift(c) => x + c,
        }
    }

    /// `dy/dx` given `x` and `y = f(x)`.
    fn derivative(&self, x: T, y: T) -> T {
        match *self {
            // forward computed −x, so dy/dx = −1
            UnaryKind::Neg => -T::ONE,
            // forward computed eˣ, so dy/dx = y
            UnaryKind::Exp => y,
            // forward computed ln x, so dy/dx = 1/x
            UnaryKind::Log => T::ONE / x,
            // forward computed ln(1 + x), so dy/dx = 1/(1 + x)
            UnaryKind::Log1p => T::ONE / (T::ONE + x),
            // forward computed softplus x, so dy/dx = σ(x)
            UnaryKind::Softplus => sigmoid(x),
            // forward computed σ(x), so dy/dx = σ(x)·σ(−x)
            UnaryKind::Sigmoid => y * sigmoid(-x),
            // forward computed tanh x, so dy/dx = 1 − y²
            UnaryKind::Tanh => T::ONE - y * y,
            // forward computed max(x, 0), so dy/dx = [x > 0] (NaN at NaN: no comparison
            // may turn it into a 0 or 1)
            UnaryKind::Relu => {
                if x > T::ZERO {
                    T::ONE
                } else if x.is_nan() {
                    x
                } else {
                    T::ZERO
                }
            }
            // forward computed x·Φ(x), so dy/dx = Φ(x) + x·φ(x), φ(x) = e^{−x²/2}/√(2π)
            UnaryKind::Gelu => {
                let pdf = (-T::HALF * x * x).exp() / (T::TWO * T::PI).sqrt();
                phi_cdf(x) + x * pdf
            }
            // forward computed √x, so dy/dx = 1/(2y)
            UnaryKind::Sqrt => T::HALF / y,
            // forward computed x², so dy/dx = 2x
            UnaryKind::Square => T::TWO * x,
            // forward computed c·x, so dy/dx = c
            UnaryKind::Scale(c) => c,
            // forward computed x + c, so dy/dx = 1
            UnaryKind::Shift(_) => T::ONE,
        }
    }
}

/// `∂/∂x = g ∘ f'(x)`.
pub(crate) fn backward<T: Real>(
    kind: UnaryKind<T>,
    x: &ArrayD<T>,
    y: &ArrayD<T>,
    g: &ArrayD<T>,
) -> ArrayD<T> {
    efa_num::pool::zip3_map(g.view(), x.view(), y.view(), |&g, &x, &y| {
        g * kind.derivative(x, y)
    })
}

/// The ReLU backward with the derivative inverted for inputs within `band` times the largest
/// `|x|` (see [`Tape::set_relu_kink_flip`]); NaN stays NaN.
pub(crate) fn relu_backward_flipped<T: Real>(x: &ArrayD<T>, g: &ArrayD<T>, band: f64) -> ArrayD<T> {
    let largest = x
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.to_f64().abs()));
    let near = band * largest;
    Zip::from(g).and(x).map_collect(|&g, &x| {
        if x.is_nan() {
            return x;
        }
        let up = x > T::ZERO;
        if x.to_f64().abs() <= near {
            if up {
                T::ZERO
            } else {
                g
            }
        } else if up {
            g
        } else {
            T::ZERO
        }
    })
}

impl<T: Real> Tape<T> {
    fn unary(&mut self, kind: UnaryKind<T>, a: Var) -> Result<Var> {
        let ia = self.check(a, kind.name())?;
        let y = efa_num::pool::map(self.val(ia).view(), |&x| kind.forward(x));
        Ok(self.push(Op::Unary(kind), vec![ia], y))
    }

    /// `−a`.
    pub fn neg(&mut self, a: Var) -> Result<Var> {
        self.unary(UnaryKind::Neg, a)
    }
    /// `eᵃ`.
    pub fn exp(&mut self, a: Var) -> Result<Var> {
        self.unary(UnaryKind::Exp, a)
    }
    /// `ln a` (NaN for negative entries, −∞ at 0, as IEEE).
    pub fn log(&mut self, a: Var) -> Result<Var> {
        self.unary(UnaryKind::Log, a)
    }
    /// `ln(1 + a)`, accurate near 0.
    pub fn log1p(&mut self, a: Var) -> Result<Var> {
        self.unary(UnaryKind::Log1p, a)
    }
    /// `softplus(a) = max(a, 0) + ln(1 + e^{−|a|})`; derivative `σ(a)`.
    pub fn softplus(&mut self, a: Var) -> Result<Var> {
        self.unary(UnaryKind::Softplus, a)
    }
    /// `σ(a) = 1/(1 + e^{−a})` in stable form; derivative `σ(a)·σ(−a)`.
    pub fn sigmoid(&mut self, a: Var) -> Result<Var> {
        self.unary(UnaryKind::Sigmoid, a)
    }
    /// `tanh a`; derivative `1 − tanh² a`.
    pub fn tanh(&mut self, a: Var) -> Result<Var> {
        self.unary(UnaryKind::Tanh, a)
    }
    /// `max(a, 0)`; derivative `[a > 0]` (0 at 0).
    pub fn relu(&mut self, a: Var) -> Result<Var> {
        self.unary(UnaryKind::Relu, a)
    }
    /// Exact GELU `a·Φ(a) = a·(1 + erf(a/√2))/2`; derivative `Φ(a) + a·φ(a)`.
    pub fn gelu(&mut self, a: Var) -> Result<Var> {
        self.unary(UnaryKind::Gelu, a)
    }
    /// `√a`; derivative `1/(2√a)`.
    pub fn sqrt(&mut self, a: Var) -> Result<Var> {
        self.unary(UnaryKind::Sqrt, a)
    }
    /// `a²`; derivative `2a`.
    pub fn square(&mut self, a: Var) -> Result<Var> {
        self.unary(UnaryKind::Square, a)
    }
    /// `c·a` for a constant `c`.
    pub fn scale(&mut self, a: Var, c: T) -> Result<Var> {
        self.unary(UnaryKind::Scale(c), a)
    }
    /// `a + c` for a constant `c`.
    pub fn shift(&mut self, a: Var, c: T) -> Result<Var> {
        self.unary(UnaryKind::Shift(c), a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{assert_audit, rand_array};
    use ndarray::{array, ArrayD, IxDyn};

    const ALL: [usize; 13] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];

    fn apply<T: Real>(t: &mut Tape<T>, op: usize, x: Var) -> Result<Var> {
        match op {
            0 => t.neg(x),
            1 => t.exp(x),
            2 => t.log(x),
            3 => t.log1p(x),
            4 => t.softplus(x),
            5 => t.sigmoid(x),
            6 => t.tanh(x),
            7 => t.relu(x),
            8 => t.gelu(x),
            9 => t.sqrt(x),
            10 => t.square(x),
            11 => t.scale(x, T::from_f64(-2.5)),
            _ => t.shift(x, T::from_f64(0.75)),
        }
    }

    /// Naive f64 reference for op `op`.
    fn reference(op: usize, x: f64) -> f64 {
        match op {
            0 => -x,
            1 => x.exp(),
            2 => x.ln(),
            3 => (1.0 + x).ln(),
            4 => (1.0 + x.exp()).ln(),
            5 => 1.0 / (1.0 + (-x).exp()),
            6 => (x.exp() - (-x).exp()) / (x.exp() + (-x).exp()),
            7 => {
                if x > 0.0 {
                    x
                } else {
                    0.0
                }
            }
            8 => 0.5 * x * (1.0 + libm_erf(x / 2f64.sqrt())),
            9 => x.sqrt(),
            10 => x * x,
            11 => -2.5 * x,
            _ => x + 0.75,
        }
    }

    /// erf by its Maclaurin series (independent of libm), accurate for |x| ≤ 3.
    fn libm_erf(x: f64) -> f64 {
        let mut term = x;
        let mut sum = x;
        for n in 1..80 {
            term *= -x * x / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        2.0 / std::f64::consts::PI.sqrt() * sum
    }

    #[test]
    fn forward_matches_naive_reference_in_f64_and_f32() {
        let xs = [0.3, 1.7, 2.9, 0.05];
        for op in ALL {
            let mut t = Tape::<f64>::new();
            let x = t.constant(array![0.3, 1.7, 2.9, 0.05].into_dyn());
            let y = apply(&mut t, op, x).unwrap();
            let mut t32 = Tape::<f32>::new();
            let x32 = t32.constant(array![0.3f32, 1.7, 2.9, 0.05].into_dyn());
            let y32 = apply(&mut t32, op, x32).unwrap();
            for (k, &xv) in xs.iter().enumerate() {
                let r = reference(op, xv);
                let v = t.value(y)[k];
                assert!(
                    (v - r).abs() <= 1e-13 * r.abs().max(1.0),
                    "op {op} x {xv}: {v} vs {r}"
                );
                let v32 = t32.value(y32)[k] as f64;
                assert!(
                    (v32 - r).abs() <= 1e-6 * r.abs().max(1.0),
                    "f32 op {op} x {xv}: {v32} vs {r}"
                );
            }
        }
    }

    #[test]
    fn audits_on_random_and_awkward_shapes() {
        for op in ALL {
            for (k, shape) in [&[3, 4][..], &[1], &[], &[2, 0, 3]].iter().enumerate() {
                // positive inputs keep log/sqrt in their domain; relu kinks avoided by margin
                let x = rand_array(shape, 100 + k as u64, 0.2, 2.0);
                assert_audit(&[("x", x)], move |t, v| {
                    let y = apply(t, op, v[0])?;
                    let w = t.square(y)?; // non-trivial outer cotangent
                    t.sum_all(w)
                });
            }
            // negative side (for ops defined there)
            if op != 2 && op != 9 && op != 3 {
                let x = rand_array(&[5], 7, -2.0, -0.2);
                assert_audit(&[("x", x)], move |t, v| {
                    let y = apply(t, op, v[0])?;
                    let w = t.square(y)?;
                    t.sum_all(w)
                });
            }
        }
    }

    #[test]
    fn softplus_and_sigmoid_at_extreme_magnitudes() {
        let mut t = Tape::<f64>::new();
        let x = t.input(array![800.0, -800.0, 40.0, -40.0].into_dyn());
        let sp = t.softplus(x).unwrap();
        let sg = t.sigmoid(x).unwrap();
        let v = t.value(sp);
        assert_eq!(v[0], 800.0);
        assert_eq!(v[1], 0.0); // e^{−800} underflows
        assert!((v[3] - (-40f64).exp()).abs() < 1e-30);
        assert_eq!(t.value(sg)[0], 1.0);
        assert!((t.value(sg)[3] - (-40f64).exp() / (1.0 + (-40f64).exp())).abs() < 1e-30);
        let s = t.sum_all(sp).unwrap();
        let g = t.backward(s).unwrap();
        let gx = g.wrt(x).unwrap();
        assert_eq!(gx[0], 1.0);
        assert_eq!(gx[1], 0.0);
        assert!(gx.iter().all(|v| v.is_finite()));
        for op in [4usize, 5] {
            let x = ArrayD::from_shape_vec(IxDyn(&[4]), vec![800.0, -800.0, 35.0, -35.0]).unwrap();
            assert_audit(&[("x", x)], move |t, v| {
                let y = apply(t, op, v[0])?;
                t.sum_all(y)
            });
        }
    }
}
