//! Reductions: `sum` / `mean` over a set of axes (optionally keeping them as length 1), and
//! `sum_all` / `mean_all` to a 0-d scalar.
//!
//! `mean = sum / count` with `count = Π_{reduced axes} n_d`; the mean over zero elements is
//! NaN (0·∞), as in numpy. Backward broadcasts `scale·g` back over the reduced axes.

use crate::error::{Result, TapeError};
use crate::op::Op;
use crate::tape::{Tape, Var};
use efa_num::Real;
use ndarray::{ArrayD, Axis, IxDyn};

impl<T: Real> Tape<T> {
    fn reduce(
        &mut self,
        op: &str,
        a: Var,
        axes: &[usize],
        keepdim: bool,
        mean: bool,
    ) -> Result<Var> {
        let ia = self.check(a, op)?;
        let x = self.val(ia);
        let shape = x.shape().to_vec();
        let mut seen = vec![false; shape.len()];
        for &ax in axes {
            if ax >= shape.len() || seen[ax] {
                return Err(TapeError::new(
                    op,
                    format!("axes {axes:?} invalid for shape {shape:?} (out of range or repeated: {ax})"),
                ));
            }
            seen[ax] = true;
        }
        let mut sorted = axes.to_vec();
        sorted.sort_unstable_by(|p, q| q.cmp(p));
        let mut y = x.clone();
        for &ax in &sorted {
            y = y.sum_axis(Axis(ax));
        }
        let count: usize = axes.iter().map(|&ax| shape[ax]).product();
        let scale = if mean {
            T::ONE / T::from_usize(count)
        } else {
            T::ONE
        };
        if mean {
            y.mapv_inplace(|v| v * scale);
        }
        let keep_shape: Vec<usize> = shape
            .iter()
            .enumerate()
            .map(|(d, &n)| if seen[d] { 1 } else { n })
            .collect();
        let out_shape = if keepdim {
            keep_shape.clone()
        } else {
            y.shape().to_vec()
        };
        let y = y
            .into_shape_with_order(IxDyn(&out_shape))
            .expect("reduce: contiguous reshape");
        Ok(self.push(Op::Sum { keep_shape, scale }, vec![ia], y))
    }

    /// `y = Σ_{axes} a`, removing the reduced axes unless `keepdim` (then they have length 1).
    /// Axes must be distinct and in range; `&[]` is the identity.
    pub fn sum(&mut self, a: Var, axes: &[usize], keepdim: bool) -> Result<Var> {
        self.reduce("sum", a, axes, keepdim, false)
    }

    /// `y = (1/count)·Σ_{axes} a` with `count = Π_{axes} n_d`.
    pub fn mean(&mut self, a: Var, axes: &[usize], keepdim: bool) -> Result<Var> {
        self.reduce("mean", a, axes, keepdim, true)
    }

    /// `y = Σ a` over every element, as a 0-d value.
    pub fn sum_all(&mut self, a: Var) -> Result<Var> {
        let nd = self.val(self.check(a, "sum_all")?).ndim();
        self.reduce("sum_all", a, &(0..nd).collect::<Vec<_>>(), false, false)
    }

    /// `y = (1/len)·Σ a` over every element, as a 0-d value (NaN if `a` is empty).
    pub fn mean_all(&mut self, a: Var) -> Result<Var> {
        let nd = self.val(self.check(a, "mean_all")?).ndim();
        self.reduce("mean_all", a, &(0..nd).collect::<Vec<_>>(), false, true)
    }
}

/// forward computed `y = scale·Σ_{axes} x`, so `∂/∂x = scale·g` broadcast over the reduced
/// axes (`g` is viewed with the reduced axes kept as length 1).
pub(crate) fn backward<T: Real>(
    x_shape: &[usize],
    keep_shape: &[usize],
    scale: T,
    g: &ArrayD<T>,
) -> ArrayD<T> {
    let g = g.as_standard_layout();
    let gk = g
        .view()
        .into_shape_with_order(IxDyn(keep_shape))
        .expect("reduce backward: keep shape");
    let gb = gk
        .broadcast(IxDyn(x_shape))
        .expect("reduce backward: broadcast to input");
    efa_num::pool::map(gb, |&v| v * scale)
}

#[cfg(test)]
mod tests {
    use crate::audit::{audit, AuditOptions};
    use crate::testutil::{assert_audit, rand_array};
    use crate::Tape;
    use ndarray::{array, ArrayD, IxDyn};

    #[test]
    fn forward_matches_hand_values() {
        let mut t = Tape::<f64>::new();
        let x = t.constant(array![[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]].into_dyn());
        let s0 = t.sum(x, &[0], false).unwrap();
        assert_eq!(t.value(s0), &array![5.0, 7.0, 9.0].into_dyn());
        let s1 = t.mean(x, &[1], true).unwrap();
        assert_eq!(t.value(s1), &array![[2.0], [5.0]].into_dyn());
        let sa = t.sum_all(x).unwrap();
        assert_eq!(t.shape(sa), &[] as &[usize]);
        assert_eq!(t.value(sa)[IxDyn(&[])], 21.0);
        let ma = t.mean_all(x).unwrap();
        assert_eq!(t.value(ma)[IxDyn(&[])], 3.5);
        let id = t.sum(x, &[], false).unwrap();
        assert_eq!(t.value(id), t.value(x));
        let e = t.constant(ArrayD::zeros(IxDyn(&[2, 0])));
        let se = t.sum(e, &[1], false).unwrap();
        assert_eq!(t.value(se), &array![0.0, 0.0].into_dyn());
        let me = t.mean_all(e).unwrap();
        assert!(t.value(me)[IxDyn(&[])].is_nan());
    }

    #[test]
    fn audits_over_axes_and_keepdim() {
        let cases: &[(&[usize], &[usize])] = &[
            (&[3, 4], &[0]),
            (&[3, 4], &[1]),
            (&[2, 3, 4], &[0, 2]),
            (&[1, 5], &[0]),
            (&[2, 0, 3], &[1]),
            (&[4], &[]),
        ];
        for (k, &(shape, axes)) in cases.iter().enumerate() {
            for keep in [false, true] {
                for mean in [false, true] {
                    let x = rand_array(shape, 200 + k as u64, -1.0, 1.0);
                    let build = move |t: &mut Tape<f64>, v: &[crate::Var]| {
                        let y = if mean {
                            t.mean(v[0], axes, keep)?
                        } else {
                            t.sum(v[0], axes, keep)?
                        };
                        let w = t.square(y)?;
                        t.sum_all(w)
                    };
                    let empty_mean = mean && axes.iter().any(|&a| shape[a] == 0);
                    if empty_mean {
                        // The mean over zero elements is NaN (0/0), so the loss is NaN at the
                        // starting point: the audit must say so and not pass.
                        let r = audit(&[("x", x)], build, &AuditOptions::default()).unwrap();
                        assert!(!r.passed() && r.nonfinite_base.is_some(), "{r}");
                    } else {
                        assert_audit(&[("x", x)], build);
                    }
                }
            }
        }
        let x = rand_array(&[3, 2], 9, -1.0, 1.0);
        assert_audit(&[("x", x)], |t, v| {
            let y = t.square(v[0])?;
            t.mean_all(y)
        });
    }

    #[test]
    fn bad_axes_are_errors() {
        let mut t = Tape::<f64>::new();
        let x = t.constant(ArrayD::zeros(IxDyn(&[2, 3])));
        let e = t.sum(x, &[2], false).unwrap_err();
        assert!(
            e.to_string().contains("sum") && e.to_string().contains("[2, 3]"),
            "{e}"
        );
        assert!(t.mean(x, &[1, 1], false).is_err());
    }
}
