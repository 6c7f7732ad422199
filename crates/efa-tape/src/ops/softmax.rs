//! Softmax and log-softmax over the last axis, per row by `efa_num::scalar` in stable form:
//! `m = max x`, `s = Σ_{i≠argmax} e^{xᵢ−m}`, `lse = m + ln(1 + s)`,
//! `softmax(x)ᵢ = e^{xᵢ−m}/(1 + s)`, `log_softmax(x)ᵢ = xᵢ − lse`.
//! A row that is entirely `−∞` gives softmax 0 and log-softmax `−∞` (and no NaN); `+∞`
//! entries share the mass equally (the limit). A row holding a NaN gives NaN everywhere in
//! that row (every output depends on every input of its row), and so does its gradient.
//!
//! Backward: softmax `dx = y ∘ (g − ⟨g, y⟩)`; log-softmax `dx = g − softmax(x)·Σg`.

use crate::error::{Result, TapeError};
use crate::op::Op;
use crate::tape::{Tape, Var};
use efa_num::scalar::{log_softmax_into, softmax_into};
use efa_num::Real;
use ndarray::ArrayD;

/// True iff `row` holds a NaN; the row's softmax, log-softmax and loss are then NaN (the
/// `efa_num` kernels skip NaN when they look for the maximum, so this is checked first).
pub(crate) fn has_nan<T: Real>(row: &[T]) -> bool {
    row.iter().any(|v| v.is_nan())
}

impl<T: Real> Tape<T> {
    fn softmax_like(&mut self, a: Var, log: bool) -> Result<Var> {
        let op = if log { "log_softmax" } else { "softmax" };
        let ia = self.check(a, op)?;
        let x = self.val(ia);
        let Some(&d) = x.shape().last() else {
            return Err(TapeError::new(
                op,
                format!("needs at least one axis, got shape {:?}", x.shape()),
            ));
        };
        let mut y = ArrayD::zeros(x.raw_dim());
        if d > 0 {
            let xs = x.as_slice().expect("standard layout");
            let ys = y.as_slice_mut().expect("fresh array");
            for (row, out) in xs.chunks_exact(d).zip(ys.chunks_exact_mut(d)) {
                if has_nan(row) {
                    out.iter_mut().for_each(|o| *o = T::NAN);
                } else if log {
                    log_softmax_into(row, out);
                } else {
                    softmax_into(row, out);
                }
            }
        }
        let opv = if log { Op::LogSoftmax } else { Op::Softmax };
        Ok(self.push(opv, vec![ia], y))
    }

    /// `yᵢ = e^{aᵢ − lse(a)}` over the last axis (stable; see the module docs).
    pub fn softmax(&mut self, a: Var) -> Result<Var> {
        self.softmax_like(a, false)
    }

    /// `yᵢ = aᵢ − lse(a)` over the last axis, `lse = m + ln(1 + Σ_{i≠argmax} e^{aᵢ−m})`.
    pub fn log_softmax(&mut self, a: Var) -> Result<Var> {
        self.softmax_like(a, true)
    }
}

fn rows_map<T: Real>(y: &ArrayD<T>, g: &ArrayD<T>, f: impl Fn(&[T], &[T], &mut [T])) -> ArrayD<T> {
    let d = *y.shape().last().expect("softmax: ≥ 1 axis");
    let g = g.as_standard_layout();
    let mut dx = ArrayD::zeros(y.raw_dim());
    if d > 0 {
        let (ys, gs) = (
            y.as_slice().expect("standard"),
            g.as_slice().expect("standard"),
        );
        let out = dx.as_slice_mut().expect("fresh");
        for ((yr, gr), dr) in ys
            .chunks_exact(d)
            .zip(gs.chunks_exact(d))
            .zip(out.chunks_exact_mut(d))
        {
            f(yr, gr, dr);
        }
    }
    dx
}

/// forward computed `y = softmax(x)`, so `dx = y ∘ (g − ⟨g, y⟩)` per row.
pub(crate) fn softmax_backward<T: Real>(y: &ArrayD<T>, g: &ArrayD<T>) -> ArrayD<T> {
    rows_map(y, g, |yr, gr, dr| {
        let dot: T = yr.iter().zip(gr).map(|(&y, &g)| y * g).sum();
        for k in 0..yr.len() {
            dr[k] = yr[k] * (gr[k] - dot);
        }
    })
}

/// forward computed `y = x − lse(x)`, so `dx = g − e^{y}·Σg` per row (`e^{y}` = softmax).
pub(crate) fn log_softmax_backward<T: Real>(y: &ArrayD<T>, g: &ArrayD<T>) -> ArrayD<T> {
    rows_map(y, g, |yr, gr, dr| {
        let sum: T = gr.iter().copied().sum();
        for k in 0..yr.len() {
            dr[k] = gr[k] - yr[k].exp() * sum;
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::testutil::{assert_audit, rand_array};
    use crate::Tape;
    use ndarray::{array, ArrayD, IxDyn};

    #[test]
    fn forward_matches_naive_and_is_stable_at_large_logits() {
        let mut t = Tape::<f64>::new();
        let x = t.constant(array![[1.0, 2.0, 3.0], [1000.0, 1001.0, 999.0]].into_dyn());
        let s = t.softmax(x).unwrap();
        let l = t.log_softmax(x).unwrap();
        // naive reference on shifted values (shift-invariance): e^{x−c}/Σ e^{x−c}
        for (i, c) in [(0, 0.0), (1, 1000.0)] {
            let e: Vec<f64> = (0..3).map(|k| (t.value(x)[[i, k]] - c).exp()).collect();
            let z: f64 = e.iter().sum();
            for (k, ek) in e.iter().enumerate() {
                assert!((t.value(s)[[i, k]] - ek / z).abs() < 1e-15);
                assert!((t.value(l)[[i, k]] - (ek / z).ln()).abs() < 1e-13);
            }
        }
        let mut t32 = Tape::<f32>::new();
        let x32 = t32.constant(array![[1000.0f32, 1001.0, 999.0]].into_dyn());
        let s32 = t32.softmax(x32).unwrap();
        assert!((t32.value(s32)[[0, 1]] as f64 - t.value(s)[[1, 1]]).abs() < 1e-6);
    }

    #[test]
    fn fully_masked_row_gives_zero_and_neg_inf() {
        let mut t = Tape::<f64>::new();
        let ninf = f64::NEG_INFINITY;
        let x = t.input(array![[ninf, ninf], [0.0, ninf]].into_dyn());
        let s = t.softmax(x).unwrap();
        let l = t.log_softmax(x).unwrap();
        assert_eq!(t.value(s), &array![[0.0, 0.0], [1.0, 0.0]].into_dyn());
        assert_eq!(t.value(l)[[0, 0]], ninf);
        assert_eq!(t.value(l)[[1, 0]], 0.0);
        let w = t.constant(array![[1.0, 2.0], [3.0, 4.0]].into_dyn());
        let p = t.mul(s, w).unwrap();
        let p = t.sum_all(p).unwrap();
        let g = t.backward(p).unwrap();
        assert!(g.wrt(x).unwrap().iter().all(|v| *v == 0.0));
    }

    #[test]
    fn audits_with_large_magnitudes_and_awkward_shapes() {
        for (k, (shape, scale)) in [
            (&[3, 4][..], 1.0),
            (&[2, 3, 5], 3.0),
            (&[1], 1.0),
            (&[4, 1], 2.0),
            (&[0, 3], 1.0),
            (&[2, 5], 1e3),
        ]
        .iter()
        .enumerate()
        {
            let x = rand_array(shape, 50 + k as u64, -*scale, *scale);
            let w = rand_array(shape, 60 + k as u64, -1.0, 1.0);
            for log in [false, true] {
                let w = w.clone();
                assert_audit(&[("x", x.clone())], move |t, v| {
                    let y = if log {
                        t.log_softmax(v[0])?
                    } else {
                        t.softmax(v[0])?
                    };
                    let w = t.constant(w.clone());
                    let y = t.mul(y, w)?;
                    t.sum_all(y)
                });
            }
        }
        let mut t = Tape::<f64>::new();
        let z = t.constant(ArrayD::zeros(IxDyn(&[])));
        assert!(t.softmax(z).unwrap_err().to_string().contains("softmax"));
    }
}
