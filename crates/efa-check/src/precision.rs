//! How many correct digits a computed tensor has: its error against a reference computed in a
//! more precise type (the double-double `efa_num::Dd`), per tensor, in the units a numerical
//! audit reads.
//!
//! For a tensor `g` and its reference `r` (both as f64; a reference rounded to f64 has a
//! relative error of at most 2⁻⁵³, far below the errors audited here):
//!
//! * `scale = max |rᵢ|`, the tensor's largest entry;
//! * `max_abs = max |gᵢ − rᵢ|`, at the worst element `i*`;
//! * `rel = max_abs / scale` (the error relative to the tensor's own largest entry: a
//!   gradient's small entries are judged on the scale of its large ones, as a step of an
//!   optimiser sees them);
//! * `eps_units = rel / ε` of the computing type (ε = 2⁻²³ for f32, 2⁻⁵² for f64), and
//!   `digits = −log₁₀ rel`.
//!
//! A non-finite element of `g` whose reference is finite (or the reverse) makes the error
//! infinite at that element. Budgets ([`Budget`]) say how large an error may be.
//!
//! ```
//! use efa_check::precision::{tensor_error, Budget};
//! let r = [1.0, -4.0, 0.5];
//! let g = [1.0, -4.0 + 4e-12, 0.5];
//! let e = tensor_error("w", &[3], &g, &r, f64::EPSILON);
//! assert_eq!(e.worst, vec![1]);
//! assert!((e.rel - 1e-12).abs() < 1e-15);
//! // Within 1e-11 of the tensor's largest entry (4.0):
//! assert!(Budget::F64.allows(&e, 4.0));
//! ```

/// The error of one tensor against its reference (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorError {
    /// The tensor's name (a parameter name, `loss`, …).
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// `max |rᵢ|`, the reference's largest entry.
    pub scale: f64,
    /// `max |gᵢ − rᵢ|` (infinite where exactly one of the two is not finite).
    pub max_abs: f64,
    /// `max_abs / scale`; `max_abs` itself when `scale = 0`.
    pub rel: f64,
    /// `rel` in units of the computing type's machine epsilon.
    pub eps_units: f64,
    /// Multi-index of the worst element (empty for an empty tensor or a scalar).
    pub worst: Vec<usize>,
    /// The computed value at the worst element.
    pub got: f64,
    /// The reference value at the worst element.
    pub want: f64,
}

impl TensorError {
    /// Correct decimal digits relative to the tensor's scale, `−log₁₀ rel` (∞ when exact).
    pub fn digits(&self) -> f64 {
        -self.rel.log10()
    }
}

/// The multi-index of flat (row-major) position `k` in `shape`.
pub fn unflatten(mut k: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (d, &n) in shape.iter().enumerate().rev() {
        if n > 0 {
            idx[d] = k % n;
            k /= n;
        }
    }
    idx
}

/// The error of `got` against `want` (the same flat, row-major length; `shape` names it),
/// computed in type with machine epsilon `eps` (see the module docs).
///
/// # Panics
/// If the lengths differ (an internal invariant: both come from the same parameter).
#[track_caller]
pub fn tensor_error(
    name: &str,
    shape: &[usize],
    got: &[f64],
    want: &[f64],
    eps: f64,
) -> TensorError {
    assert_eq!(
        got.len(),
        want.len(),
        "tensor_error: {name}: lengths differ"
    );
    let scale = want
        .iter()
        .filter(|r| r.is_finite())
        .fold(0.0f64, |m, r| m.max(r.abs()));
    let (mut max_abs, mut at) = (0.0f64, None);
    for (k, (&g, &r)) in got.iter().zip(want).enumerate() {
        let d = match (g.is_finite(), r.is_finite()) {
            (true, true) => (g - r).abs(),
            // Both the same infinity (or both NaN) agree; anything else is an infinite error.
            (false, false) if g == r || (g.is_nan() && r.is_nan()) => 0.0,
            _ => f64::INFINITY,
        };
        if at.is_none() || d > max_abs {
            max_abs = d;
            at = Some(k);
        }
    }
    let rel = if scale > 0.0 {
        max_abs / scale
    } else {
        max_abs
    };
    let k = at.unwrap_or(0);
    TensorError {
        name: name.to_string(),
        shape: shape.to_vec(),
        scale,
        max_abs,
        rel,
        eps_units: rel / eps,
        worst: if got.is_empty() {
            vec![]
        } else {
            unflatten(k, shape)
        },
        got: got.get(k).copied().unwrap_or(0.0),
        want: want.get(k).copied().unwrap_or(0.0),
    }
}

/// An error budget against the reference: a tensor passes when
/// `max_abs ≤ max(rel · scale, floor · model_scale)`, where `model_scale` is the largest
/// reference entry of any tensor of the model (the floor is for tensors whose entries cancel
/// below the round-off of the model's large ones).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    /// Allowed error relative to the tensor's own largest entry.
    pub rel: f64,
    /// Allowed error relative to the model's largest entry.
    pub floor: f64,
}

impl Budget {
    /// The f64 budget of every forward plan against the double-double reference:
    /// 1e-11 of the tensor's largest entry or 1e-13 of the model's largest gradient.
    pub const F64: Budget = Budget {
        rel: 1e-11,
        floor: 1e-13,
    };

    /// The largest error this budget allows for `e` in a model whose largest entry is
    /// `model_scale`.
    pub fn allowed(&self, e: &TensorError, model_scale: f64) -> f64 {
        (self.rel * e.scale).max(self.floor * model_scale)
    }

    /// Whether `e` is within the budget.
    pub fn allows(&self, e: &TensorError, model_scale: f64) -> bool {
        e.max_abs <= self.allowed(e, model_scale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_element_scale_and_units() {
        let want = [0.0, 2.0, -8.0, 1.0, 0.0, 3.0];
        let got = [0.0, 2.0, -8.0 + 1e-6, 1.0 - 3e-6, 0.0, 3.0];
        let e = tensor_error("p", &[2, 3], &got, &want, f32::EPSILON as f64);
        assert_eq!(e.worst, vec![1, 0]);
        assert_eq!((e.got, e.want), (1.0 - 3e-6, 1.0));
        assert_eq!(e.scale, 8.0);
        assert!((e.rel - 3e-6 / 8.0).abs() < 1e-15);
        assert!((e.eps_units - e.rel / f32::EPSILON as f64).abs() < 1e-9);
        assert!((e.digits() - (8.0f64 / 3e-6).log10()).abs() < 1e-6);
    }

    #[test]
    fn non_finite_disagreement_is_an_infinite_error() {
        let e = tensor_error("p", &[3], &[1.0, f64::NAN, 2.0], &[1.0, 5.0, 2.0], 1e-16);
        assert_eq!(e.worst, vec![1]);
        assert!(e.max_abs.is_infinite() && e.rel.is_infinite());
        let same = tensor_error(
            "p",
            &[2],
            &[f64::INFINITY, f64::NAN],
            &[f64::INFINITY, f64::NAN],
            1e-16,
        );
        assert_eq!(same.max_abs, 0.0);
        let e = tensor_error("p", &[1], &[1.0], &[f64::NEG_INFINITY], 1e-16);
        assert!(e.max_abs.is_infinite());
    }

    #[test]
    fn zero_reference_reports_the_absolute_error() {
        let e = tensor_error("b", &[2], &[0.0, 1e-20], &[0.0, 0.0], 1e-16);
        assert_eq!((e.scale, e.rel), (0.0, 1e-20));
        let exact = tensor_error("b", &[2], &[0.0, 0.0], &[0.0, 0.0], 1e-16);
        assert_eq!(exact.rel, 0.0);
        assert!(exact.digits().is_infinite());
    }

    #[test]
    fn budget_floor_is_relative_to_the_model() {
        // A tensor whose entries are 1e-6 while the model's largest gradient is 10: an error
        // of 5e-13 is 5e-7 of the tensor but only 5e-14 of the model.
        let e = tensor_error("t", &[1], &[1e-6 + 5e-13], &[1e-6], 1e-16);
        assert!(!Budget::F64.allows(&e, 1e-6));
        assert!(Budget::F64.allows(&e, 10.0));
        assert!(!Budget::F64.allows(&e, 1.0));
    }

    #[test]
    fn unflatten_is_row_major() {
        assert_eq!(unflatten(0, &[2, 3]), vec![0, 0]);
        assert_eq!(unflatten(5, &[2, 3]), vec![1, 2]);
        assert_eq!(unflatten(7, &[2, 2, 2]), vec![1, 1, 1]);
        assert_eq!(unflatten(0, &[]), Vec::<usize>::new());
    }
}
