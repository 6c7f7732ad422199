//! Scalar losses (fused):
//! * `softmax_cross_entropy(x, t) = (1/B)·Σ_b (lse(x_b) − x_b[t_b])` for logits `[B, K]`,
//!   each term computed as `(m_b − x_b[t_b]) + ln(1 + s_b)` with `(m, s)` from
//!   `efa_num::scalar::lse_parts` (see [`super::softmax`]); backward
//!   `dx_b = (g/B)·(softmax(x_b) − onehot(t_b))`. A row holding a NaN makes the loss and that
//!   row's gradient NaN.
//! * `mse(p, y) = (1/n)·Σ (p − y)²`; backward `dp = (2g/n)·(p − y)`.

use super::softmax::has_nan;
use crate::error::{Result, TapeError};
use crate::op::Op;
use crate::tape::{Tape, Var};
use efa_num::scalar::{logsumexp, lse_parts, softmax_into};
use efa_num::Real;
use ndarray::{ArrayD, IxDyn};

fn scalar_of<T: Real>(g: &ArrayD<T>) -> T {
    *g.iter().next().expect("loss backward: scalar cotangent")
}

impl<T: Real> Tape<T> {
    /// Mean over the batch of `−log softmax(logits)[b, targets[b]]`, a 0-d value; logits
    /// `[B, K]` with `B = targets.len() ≥ 1` and every target `< K`.
    pub fn softmax_cross_entropy(&mut self, logits: Var, targets: &[usize]) -> Result<Var> {
        let op = "softmax_cross_entropy";
        let il = self.check(logits, op)?;
        let x = self.val(il);
        if x.ndim() != 2 || x.shape()[0] != targets.len() || targets.is_empty() {
            return Err(TapeError::new(
                op,
                format!(
                    "logits must be [B, K] with B = {} ≥ 1 targets, got {:?}",
                    targets.len(),
                    x.shape()
                ),
            ));
        }
        let k = x.shape()[1];
        if let Some((b, &t)) = targets.iter().enumerate().find(|(_, &t)| t >= k) {
            return Err(TapeError::new(
                op,
                format!(
                    "targets[{b}] = {t} is out of range for logits {:?}",
                    x.shape()
                ),
            ));
        }
        let mut probs = efa_num::pool::full(x.raw_dim(), T::ZERO);
        let mut total = T::ZERO;
        let xs = x.as_slice().expect("standard layout");
        let ps = probs.as_slice_mut().expect("fresh array");
        for ((row, p), &t) in xs.chunks_exact(k).zip(ps.chunks_exact_mut(k)).zip(targets) {
            if has_nan(row) {
                total += T::NAN;
                p.iter_mut().for_each(|v| *v = T::NAN);
                continue;
            }
            // lse − x_t = (m − x_t) + ln(1 + s): no cancellation against a large m
            let (_, m, s) = lse_parts(row);
            total += if m.is_finite() {
                (m - row[t]) + s.ln_1p()
            } else {
                logsumexp(row) - row[t]
            };
            softmax_into(row, p);
        }
        let loss = ArrayD::from_elem(IxDyn(&[]), total / T::from_usize(targets.len()));
        Ok(self.push(
            Op::SoftmaxCrossEntropy {
                probs,
                targets: targets.to_vec(),
            },
            vec![il],
            loss,
        ))
    }

    /// `(1/n)·Σ (pred − target)²` over all `n ≥ 1` elements, a 0-d value; shapes must be equal.
    pub fn mse(&mut self, pred: Var, target: &ArrayD<T>) -> Result<Var> {
        let ip = self.check(pred, "mse")?;
        let p = self.val(ip);
        if p.shape() != target.shape() || p.is_empty() {
            return Err(TapeError::new(
                "mse",
                format!(
                    "pred {:?} and target {:?} must have equal, non-empty shapes",
                    p.shape(),
                    target.shape()
                ),
            ));
        }
        let diff = efa_num::pool::zip_map(p.view(), target.view(), |&a, &b| a - b);
        let n = T::from_usize(diff.len());
        let loss = ArrayD::from_elem(IxDyn(&[]), diff.iter().map(|&d| d * d).sum::<T>() / n);
        Ok(self.push(Op::Mse { diff }, vec![ip], loss))
    }
}

/// forward computed `(1/B)·Σ_b (lse_b − x_b[t_b])`, so `dx_b = (g/B)·(p_b − onehot(t_b))`.
pub(crate) fn cross_entropy_backward<T: Real>(
    g: &ArrayD<T>,
    probs: &ArrayD<T>,
    targets: &[usize],
) -> ArrayD<T> {
    let c = scalar_of(g) / T::from_usize(targets.len());
    let mut dx = efa_num::pool::map(probs.view(), |&p| p * c);
    let k = probs.shape()[1];
    let ds = dx.as_slice_mut().expect("fresh");
    for (b, &t) in targets.iter().enumerate() {
        ds[b * k + t] -= c;
    }
    dx
}

/// forward computed `(1/n)·Σ d²` with `d = pred − target`, so `dpred = (2g/n)·d`.
pub(crate) fn mse_backward<T: Real>(g: &ArrayD<T>, diff: &ArrayD<T>) -> ArrayD<T> {
    let c = T::TWO * scalar_of(g) / T::from_usize(diff.len());
    efa_num::pool::map(diff.view(), |&d| d * c)
}

#[cfg(test)]
mod tests {
    use crate::testutil::{assert_audit, rand_array};
    use crate::Tape;
    use ndarray::{array, ArrayD, IxDyn};

    #[test]
    fn cross_entropy_matches_naive_and_hand_values() {
        let mut t = Tape::<f64>::new();
        let x = t.input(array![[0.0, 0.0], [1.0, 2.0], [1000.0, 990.0]].into_dyn());
        let l = t.softmax_cross_entropy(x, &[0, 1, 1]).unwrap();
        // row 0: ln 2; row 1: ln(e + e²) − 2 = ln(1 + e^{−1}); row 2: ln(1 + e^{10}) computed
        // as 10 + ln(1 + e^{−10}) to avoid overflow in the reference.
        let r = (2f64.ln() + (-1f64).exp().ln_1p() + 10.0 + (-10f64).exp().ln_1p()) / 3.0;
        assert!((t.value(l)[IxDyn(&[])] - r).abs() < 1e-14);
        let g = t.backward(l).unwrap();
        assert!((g.wrt(x).unwrap()[[0, 0]] - (0.5 - 1.0) / 3.0).abs() < 1e-15);
        let mut t32 = Tape::<f32>::new();
        let x32 = t32.constant(array![[0.0f32, 0.0], [1.0, 2.0], [1000.0, 990.0]].into_dyn());
        let l32 = t32.softmax_cross_entropy(x32, &[0, 1, 1]).unwrap();
        assert!((t32.value(l32)[IxDyn(&[])] as f64 - r).abs() < 1e-5);
    }

    #[test]
    fn audits_including_huge_logits() {
        for (k, (b, kk, scale)) in [(4, 3, 2.0), (1, 1, 1.0), (3, 5, 1e3), (2, 7, 30.0)]
            .iter()
            .enumerate()
        {
            let x = rand_array(&[*b, *kk], 70 + k as u64, -scale, *scale);
            let targets: Vec<usize> = (0..*b).map(|i| (i * 2 + 1) % kk).collect();
            assert_audit(&[("x", x)], move |t, v| {
                t.softmax_cross_entropy(v[0], &targets)
            });
        }
        let p = rand_array(&[3, 2], 80, -1.0, 1.0);
        let y = rand_array(&[3, 2], 81, -1.0, 1.0);
        assert_audit(&[("p", p)], move |t, v| {
            let q = t.tanh(v[0])?;
            t.mse(q, &y)
        });
    }

    #[test]
    fn mse_value_and_errors() {
        let mut t = Tape::<f64>::new();
        let p = t.input(array![1.0, 2.0, 4.0].into_dyn());
        let l = t.mse(p, &array![0.0, 2.0, 1.0].into_dyn()).unwrap();
        assert_eq!(t.value(l)[IxDyn(&[])], 10.0 / 3.0);
        assert!(t
            .mse(p, &array![0.0].into_dyn())
            .unwrap_err()
            .to_string()
            .contains("[3]"));
        let x = t.constant(ArrayD::zeros(IxDyn(&[2, 3])));
        let e = t.softmax_cross_entropy(x, &[0, 3]).unwrap_err();
        assert!(e.to_string().contains("targets[1] = 3"), "{e}");
        assert!(t.softmax_cross_entropy(x, &[0]).is_err());
    }
}
