//! Layer normalisation over the last axis (fused):
//! `μ = mean(x)`, `σ² = mean((x − μ)²)` (biased), `r = 1/√(σ² + ε)`, `x̂ = (x − μ)·r`,
//! `y = x̂ ∘ gain + bias` with `gain`, `bias` of shape `[D]`.
//!
//! Backward (per row, `ĝ = g ∘ gain`):
//! `dx = r·(ĝ − mean(ĝ) − x̂·mean(ĝ ∘ x̂))`, `dgain = Σ_rows g ∘ x̂`, `dbias = Σ_rows g`
//! (both in `efa_num::sum`'s order: blocks of rows, then a pairwise tree).

use crate::error::{Result, TapeError};
use crate::op::Op;
use crate::tape::{Tape, Var};
use efa_num::Real;
use ndarray::{ArrayD, IxDyn};

impl<T: Real> Tape<T> {
    /// `y = (x − μ)/√(σ² + eps) ∘ gain + bias` over the last axis of `x` (`[..., D]`),
    /// with `gain` and `bias` of shape `[D]`.
    pub fn layer_norm(&mut self, x: Var, gain: Var, bias: Var, eps: T) -> Result<Var> {
        let (ix, ig, ib) = (
            self.check(x, "layer_norm")?,
            self.check(gain, "layer_norm")?,
            self.check(bias, "layer_norm")?,
        );
        let (xv, gv, bv) = (self.val(ix), self.val(ig), self.val(ib));
        let d = xv.shape().last().copied();
        let ok = d.is_some_and(|d| gv.shape() == [d] && bv.shape() == [d]);
        let Some(d) = d.filter(|_| ok) else {
            return Err(TapeError::new(
                "layer_norm",
                format!(
                    "x {:?} needs ≥ 1 axis and gain {:?}, bias {:?} of shape [D = last axis]",
                    xv.shape(),
                    gv.shape(),
                    bv.shape()
                ),
            ));
        };
        let xs = xv.as_slice().expect("standard layout");
        let (gs, bs) = (
            gv.as_slice().expect("standard"),
            bv.as_slice().expect("standard"),
        );
        let mut xhat = efa_num::pool::filled(xs.len(), T::ZERO);
        let mut y = efa_num::pool::filled(xs.len(), T::ZERO);
        let mut rstd = efa_num::pool::take(xs.len() / d.max(1));
        if d > 0 {
            let inv_d = T::ONE / T::from_usize(d);
            for ((row, xh), yr) in xs
                .chunks_exact(d)
                .zip(xhat.chunks_exact_mut(d))
                .zip(y.chunks_exact_mut(d))
            {
                let mu = row.iter().copied().sum::<T>() * inv_d;
                let var = row.iter().map(|&v| (v - mu) * (v - mu)).sum::<T>() * inv_d;
                let r = T::ONE / (var + eps).sqrt();
                for k in 0..d {
                    xh[k] = (row[k] - mu) * r;
                    yr[k] = xh[k] * gs[k] + bs[k];
                }
                rstd.push(r);
            }
        }
        let shape = IxDyn(xv.shape());
        let xhat = ArrayD::from_shape_vec(shape.clone(), xhat).expect("layer_norm: sizes");
        let y = ArrayD::from_shape_vec(shape, y).expect("layer_norm: sizes");
        Ok(self.push(Op::LayerNorm { xhat, rstd }, vec![ix, ig, ib], y))
    }
}

/// VJPs of layer norm for inputs (x, gain, bias).
pub(crate) fn backward<T: Real>(
    g: &ArrayD<T>,
    xhat: &ArrayD<T>,
    rstd: &[T],
    gain: &ArrayD<T>,
    need: &[bool],
) -> Vec<Option<ArrayD<T>>> {
    let d = gain.len();
    let g = g.as_standard_layout();
    let gs = g.as_slice().expect("standard layout");
    let xh = xhat.as_slice().expect("standard layout");
    let ga = gain.as_slice().expect("standard layout");
    let mut dx = vec![T::ZERO; gs.len()];
    // dgain = Σ_rows g∘x̂ and dbias = Σ_rows g, side by side, in `efa_num::sum`'s order.
    let mut dgb = vec![T::ZERO; 2 * d];
    if d > 0 {
        efa_num::sum::terms_into(&mut dgb, rstd.len(), |i, acc| {
            let (gr, xr) = (&gs[i * d..(i + 1) * d], &xh[i * d..(i + 1) * d]);
            let (ag, ab) = acc.split_at_mut(d);
            for k in 0..d {
                ag[k] += gr[k] * xr[k];
                ab[k] += gr[k];
            }
        });
        let inv_d = T::ONE / T::from_usize(d);
        for (((gr, xr), dxr), &r) in gs
            .chunks_exact(d)
            .zip(xh.chunks_exact(d))
            .zip(dx.chunks_exact_mut(d))
            .zip(rstd)
        {
            // forward computed y = x̂∘gain + bias, so dx̂ = g∘gain
            let mut mean_gh = T::ZERO;
            let mut mean_ghx = T::ZERO;
            for k in 0..d {
                let gh = gr[k] * ga[k];
                mean_gh += gh;
                mean_ghx += gh * xr[k];
            }
            mean_gh *= inv_d;
            mean_ghx *= inv_d;
            // forward computed x̂ = (x − μ)·r with μ, r functions of the row, so
            // dx = r·(dx̂ − mean(dx̂) − x̂·mean(dx̂∘x̂))
            for k in 0..d {
                dxr[k] = r * (gr[k] * ga[k] - mean_gh - xr[k] * mean_ghx);
            }
        }
    }
    let vec1 = |v: Vec<T>| ArrayD::from_shape_vec(IxDyn(&[d]), v).expect("layer_norm: sizes");
    vec![
        need[0].then(|| ArrayD::from_shape_vec(xhat.raw_dim(), dx).expect("layer_norm: sizes")),
        need[1].then(|| vec1(dgb[..d].to_vec())),
        need[2].then(|| vec1(dgb[d..].to_vec())),
    ]
}

#[cfg(test)]
mod tests {
    use crate::testutil::{assert_audit, rand_array};
    use crate::Tape;
    use ndarray::{array, ArrayD, IxDyn};

    #[test]
    fn forward_matches_naive_and_f32() {
        let x = rand_array(&[3, 5], 1, -2.0, 2.0);
        let gain = rand_array(&[5], 2, 0.5, 1.5);
        let bias = rand_array(&[5], 3, -0.5, 0.5);
        let mut t = Tape::<f64>::new();
        let (vx, vg, vb) = (
            t.constant(x.clone()),
            t.constant(gain.clone()),
            t.constant(bias.clone()),
        );
        let y = t.layer_norm(vx, vg, vb, 1e-5).unwrap();
        let mut t32 = Tape::<f32>::new();
        let c = |a: &ArrayD<f64>| a.mapv(|v| v as f32);
        let (wx, wg, wb) = (
            t32.constant(c(&x)),
            t32.constant(c(&gain)),
            t32.constant(c(&bias)),
        );
        let y32 = t32.layer_norm(wx, wg, wb, 1e-5).unwrap();
        for i in 0..3 {
            let row: Vec<f64> = (0..5).map(|k| x[[i, k]]).collect();
            let mu = row.iter().sum::<f64>() / 5.0;
            let var = row.iter().map(|v| (v - mu).powi(2)).sum::<f64>() / 5.0;
            for k in 0..5 {
                let r = (row[k] - mu) / (var + 1e-5).sqrt() * gain[k] + bias[k];
                assert!((t.value(y)[[i, k]] - r).abs() < 1e-13);
                assert!((t32.value(y32)[[i, k]] as f64 - r).abs() < 1e-5);
            }
        }
    }

    #[test]
    fn audits_including_length_one_and_empty_rows() {
        for (k, shape) in [&[3, 5][..], &[2, 2, 4], &[4], &[3, 1], &[0, 3]]
            .iter()
            .enumerate()
        {
            let d = *shape.last().unwrap();
            let x = rand_array(shape, 10 + k as u64, -2.0, 2.0);
            let gain = rand_array(&[d], 20 + k as u64, 0.5, 1.5);
            let bias = rand_array(&[d], 30 + k as u64, -0.5, 0.5);
            let w = rand_array(shape, 40 + k as u64, -1.0, 1.0);
            assert_audit(&[("x", x), ("gain", gain), ("bias", bias)], move |t, v| {
                let y = t.layer_norm(v[0], v[1], v[2], 1e-3)?;
                let w = t.constant(w.clone());
                let y = t.mul(y, w)?;
                let y = t.tanh(y)?;
                t.sum_all(y)
            });
        }
    }

    #[test]
    fn shape_errors() {
        let mut t = Tape::<f64>::new();
        let x = t.constant(ArrayD::zeros(IxDyn(&[2, 3])));
        let g = t.constant(array![1.0, 1.0].into_dyn());
        let e = t.layer_norm(x, g, g, 1e-5).unwrap_err();
        assert!(
            e.to_string().contains("[2, 3]") && e.to_string().contains("[2]"),
            "{e}"
        );
    }
}
