//! The fused masked-softmax attention kernel (`efa-attn`) as a two-output tape op.
//!
//! Forward: `(o, lse) = attention(q, k, v)` with `q, k, v` of shape `[B, N, H, K]` (the layout
//! a per-position projection produces, so no transposes are recorded on the tape),
//! `o = softmax(scale·QKᵀ + mask)·V` per head in the same layout, and
//! `lse = logsumexp(scale·QKᵀ + mask)` per query row (`[B, H, N]`, the log-partition of the
//! empirical exponential family over the keys). The kernel reads the inputs through permuted
//! strided views; only the outputs and gradients are copied between `[B, H, N, K]` and
//! `[B, N, H, K]`.
//! Backward: the kernel's own backward with both cotangents `d_o` and `d_lse`.

use crate::{FusedOp, Tape, TapeError, Var};
use efa_attn::{Mask, MaskSet, Par};
use efa_num::Real;
use ndarray::{ArrayD, Ix3, Ix4, IxDyn};

/// Which keys each query sees, owned so that it can live on the tape.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttentionMask {
    /// Query `i` sees keys `j ≤ i`.
    pub causal: bool,
    /// Keys `j < key_lengths[b]` are visible.
    pub key_lengths: Option<Vec<usize>>,
}

impl AttentionMask {
    /// Key padding only.
    pub fn padding(lengths: Vec<usize>) -> Self {
        Self {
            causal: false,
            key_lengths: Some(lengths),
        }
    }

    /// Causal only.
    pub fn causal() -> Self {
        Self {
            causal: true,
            key_lengths: None,
        }
    }

    /// Causal and key padding.
    pub fn causal_padding(lengths: Vec<usize>) -> Self {
        Self {
            causal: true,
            key_lengths: Some(lengths),
        }
    }

    /// The kernel's view of the mask.
    pub fn as_mask(&self) -> Mask<'_> {
        Mask::Combined(MaskSet {
            causal: self.causal.then_some(0),
            key_lengths: self.key_lengths.as_deref(),
            exclude_self: false,
            dense: None,
        })
    }
}

#[derive(Clone)]
struct AttentionOp {
    mask: AttentionMask,
    scale: f64,
    /// Heads when the inputs are `[B, N, H·K]` (viewed as `[B, N, H, K]`); 0 for 4-D inputs.
    heads: usize,
}

fn tape_err(e: efa_attn::AttnError) -> TapeError {
    TapeError::new("fused:attention", e.to_string())
}

/// `x` `[B, N, H, K]` (or `[B, N, H·K]` with `heads = H > 0`) viewed as `[B, H, N, K]`
/// (no copy).
fn four<'a, T: Real>(
    x: &'a ArrayD<T>,
    name: &str,
    heads: usize,
) -> Result<ndarray::ArrayView4<'a, T>, TapeError> {
    let bad = || {
        TapeError::new(
            "fused:attention",
            if heads > 0 {
                format!("{name} must be [B, N, {heads}·K], got {:?}", x.shape())
            } else {
                format!("{name} must be [B, N, H, K], got {:?}", x.shape())
            },
        )
    };
    let v = if heads > 0 {
        let s = x.shape();
        if s.len() != 3 || !s[2].is_multiple_of(heads) {
            return Err(bad());
        }
        x.view()
            .into_shape_with_order(IxDyn(&[s[0], s[1], heads, s[2] / heads]))
            .map_err(|_| bad())?
    } else {
        x.view()
    };
    v.into_dimensionality::<Ix4>()
        .map(|v| v.permuted_axes([0, 2, 1, 3]))
        .map_err(|_| bad())
}

/// Copies `x` `[B, H, N, K]` (standard layout) into a new `[B, N, H, K]` array, one
/// contiguous `K`-row at a time.
fn to_bnhk<T: Real>(x: ndarray::Array4<T>) -> ArrayD<T> {
    let (b, h, n, k) = x.dim();
    let src = x.as_standard_layout();
    let src = src.as_slice().expect("standard layout");
    let mut out = vec![T::ZERO; src.len()];
    for bi in 0..b {
        for hi in 0..h {
            for ni in 0..n {
                let from = ((bi * h + hi) * n + ni) * k;
                let to = ((bi * n + ni) * h + hi) * k;
                out[to..to + k].copy_from_slice(&src[from..from + k]);
            }
        }
    }
    ArrayD::from_shape_vec(ndarray::IxDyn(&[b, n, h, k]), out).expect("sizes match")
}

impl AttentionOp {
    /// `[B, N, H, K]` → `[B, N, H·K]` when the op works on flat heads (no copy).
    fn flat<T: Real>(&self, x: ArrayD<T>) -> ArrayD<T> {
        if self.heads == 0 {
            return x;
        }
        let s = x.shape().to_vec();
        x.into_shape_with_order(IxDyn(&[s[0], s[1], s[2] * s[3]]))
            .expect("standard layout")
    }
}

impl<T: Real> FusedOp<T> for AttentionOp {
    fn name(&self) -> &str {
        "attention"
    }

    /// Useful FLOPs under the mask: `2·(K + Kv)` (= `4·K` for `Kv = K`) per visible
    /// (batch, head, query, key) pair forward — `QKᵀ` and `PV`; softmax exponentials are not
    /// counted — and 2.5× that backward (the FlashAttention convention). Visible pairs per
    /// batch row `b` with `L = min(key_lengths[b], Nk)`: `Nq·L` without, and
    /// `Σᵢ min(i + 1, L)` with the causal rule; dense counts when no mask applies. Work the
    /// kernel spends on masked entries of partially visible tiles is not counted.
    fn flops(&self, inputs: &[&ArrayD<T>], backward: bool) -> u64 {
        let &[q, k, v] = inputs else {
            return 0;
        };
        let nd = if self.heads > 0 { 3 } else { 4 };
        if q.ndim() != nd || k.ndim() != nd || v.ndim() != nd {
            return 0;
        }
        let (b, nq, nk) = (q.shape()[0], q.shape()[1], k.shape()[1]);
        let (h, dk, dv) = if self.heads > 0 {
            let h = self.heads;
            (h, q.shape()[2] / h, v.shape()[2] / h)
        } else {
            (q.shape()[2], q.shape()[3], v.shape()[3])
        };
        let visible = |len: usize| -> u64 {
            let l = len.min(nk) as u64;
            let nq = nq as u64;
            if self.mask.causal {
                // Σ_{i<nq} min(i + 1, l): rows i < l see i + 1 keys, the rest see l.
                let ramp = nq.min(l);
                ramp * (ramp + 1) / 2 + (nq - ramp) * l
            } else {
                nq * l
            }
        };
        let pairs: u64 = match &self.mask.key_lengths {
            Some(lens) => lens.iter().take(b).map(|&l| visible(l)).sum(),
            None => b as u64 * visible(nk),
        };
        let fwd = pairs
            .saturating_mul(h as u64)
            .saturating_mul(2 * (dk + dv) as u64);
        if backward {
            fwd.saturating_mul(5) / 2
        } else {
            fwd
        }
    }

    fn forward(&mut self, inputs: &[&ArrayD<T>]) -> Result<Vec<ArrayD<T>>, TapeError> {
        let (q, k, v) = (
            four(inputs[0], "q", self.heads)?,
            four(inputs[1], "k", self.heads)?,
            four(inputs[2], "v", self.heads)?,
        );
        let (o, lse) = efa_attn::forward(
            q,
            k,
            v,
            &self.mask.as_mask(),
            T::from_f64(self.scale),
            Par::Rayon,
        )
        .map_err(tape_err)?;
        Ok(vec![self.flat(to_bnhk(o)), lse.into_dyn()])
    }

    fn backward(
        &self,
        inputs: &[&ArrayD<T>],
        outputs: &[&ArrayD<T>],
        d_outputs: &[Option<&ArrayD<T>>],
        _needs_grad: &[bool],
    ) -> Result<Vec<Option<ArrayD<T>>>, TapeError> {
        let (q, k, v) = (
            four(inputs[0], "q", self.heads)?,
            four(inputs[1], "k", self.heads)?,
            four(inputs[2], "v", self.heads)?,
        );
        let o = four(outputs[0], "o", self.heads)?;
        debug_assert_eq!(o.dim().2, q.dim().2);
        let lse = outputs[1]
            .view()
            .into_dimensionality::<Ix3>()
            .map_err(|_| TapeError::new("fused:attention", "lse must be [B, H, N]"))?;
        // forward computed o and lse; an unused output has a zero cotangent.
        let zero_o;
        let d_o = match d_outputs[0] {
            Some(d) => four(d, "d_o", self.heads)?,
            None => {
                zero_o = ArrayD::<T>::zeros(outputs[0].shape());
                four(&zero_o, "d_o", self.heads)?
            }
        };
        let d_lse = match d_outputs[1] {
            Some(d) => Some(
                d.view()
                    .into_dimensionality::<Ix3>()
                    .map_err(|_| TapeError::new("fused:attention", "d_lse must be [B, H, N]"))?,
            ),
            None => None,
        };
        let (dq, dk, dv) = efa_attn::backward(
            q,
            k,
            v,
            o,
            lse,
            d_o,
            d_lse,
            &self.mask.as_mask(),
            T::from_f64(self.scale),
            Par::Rayon,
        )
        .map_err(tape_err)?;
        Ok(vec![
            Some(self.flat(to_bnhk(dq))),
            Some(self.flat(to_bnhk(dk))),
            Some(self.flat(to_bnhk(dv))),
        ])
    }
}

impl<T: Real> Tape<T> {
    /// Records fused attention on the tape and returns `(o, lse)`.
    pub fn attention(
        &mut self,
        q: Var,
        k: Var,
        v: Var,
        mask: &AttentionMask,
        scale: f64,
    ) -> Result<(Var, Var), TapeError> {
        let out = self.fused(
            Box::new(AttentionOp {
                mask: mask.clone(),
                scale,
                heads: 0,
            }),
            &[q, k, v],
        )?;
        Ok((out[0], out[1]))
    }
}

impl<T: Real> Tape<T> {
    /// [`attention`] on flat heads: `q` `[B, Nq, H·K]`, `k` `[B, Nk, H·K]`, `v` `[B, Nk, H·Kv]`
    /// (the layout of a per-position projection, read as `[B, N, H, K]` without a copy) →
    /// `o` `[B, Nq, H·Kv]` and `lse` `[B, H, Nq]`.
    pub fn attention_heads(
        &mut self,
        q: Var,
        k: Var,
        v: Var,
        heads: usize,
        mask: &AttentionMask,
        scale: f64,
    ) -> Result<(Var, Var), TapeError> {
        if heads == 0 {
            return Err(TapeError::new(
                "fused:attention",
                "heads must be at least 1",
            ));
        }
        let out = self.fused(
            Box::new(AttentionOp {
                mask: mask.clone(),
                scale,
                heads,
            }),
            &[q, k, v],
        )?;
        Ok((out[0], out[1]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(shape: &[usize], seed: f64) -> ArrayD<f64> {
        let mut i = 0.0;
        ArrayD::from_shape_fn(IxDyn(shape), |_| {
            i += 1.0;
            (i * 0.71 + seed).sin() * 1.5
        })
    }

    /// A loss reading both outputs, so that `d_o` and `d_lse` are both exercised.
    fn loss(tape: &mut Tape<f64>, o: Var, lse: Var) -> Result<Var, TapeError> {
        let o2 = tape.square(o)?;
        let a = tape.sum_all(o2)?;
        let l = tape.scale(lse, 0.3)?;
        let b = tape.sum_all(l)?;
        tape.add(a, b)
    }

    #[test]
    fn flat_head_attention_equals_the_four_d_op_and_passes_the_audit() {
        // B = 2, Nq = 3, Nk = 4, H = 2, K = 3, Kv = 2; causal with key lengths 4 and 2.
        let (q, k, v) = (
            input(&[2, 3, 6], 0.1),
            input(&[2, 4, 6], 0.5),
            input(&[2, 4, 4], 0.9),
        );
        let mask = AttentionMask::causal_padding(vec![4, 2]);
        let scale = 0.6;
        let mut tape = Tape::<f64>::new();
        let vars: Vec<Var> = [&q, &k, &v]
            .iter()
            .enumerate()
            .map(|(i, x)| tape.param(&format!("x{i}"), (*x).clone()).unwrap())
            .collect();
        let (o, lse) = tape
            .attention_heads(vars[0], vars[1], vars[2], 2, &mask, scale)
            .unwrap();
        let mut four_d = Vec::new();
        for (x, &var) in [&q, &k, &v].iter().zip(&vars) {
            let s = x.shape();
            four_d.push(tape.reshape(var, &[s[0], s[1], 2, s[2] / 2]).unwrap());
        }
        let (o4, lse4) = tape
            .attention(four_d[0], four_d[1], four_d[2], &mask, scale)
            .unwrap();
        let o4 = tape.reshape(o4, &[2, 3, 4]).unwrap();
        assert_eq!(tape.value(o).shape(), [2, 3, 4]);
        assert_eq!(tape.value(o), tape.value(o4));
        assert_eq!(tape.value(lse), tape.value(lse4));
        crate::testutil::assert_audit(&[("q", q), ("k", k), ("v", v)], |tape, x| {
            let (o, lse) = tape.attention_heads(x[0], x[1], x[2], 2, &mask, scale)?;
            loss(tape, o, lse)
        });
    }

    #[test]
    fn flat_heads_must_divide_the_width() {
        let mut tape = Tape::<f64>::new();
        let q = tape.param("q", input(&[1, 2, 5], 0.0)).unwrap();
        let e = tape
            .attention_heads(q, q, q, 2, &AttentionMask::default(), 1.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("q must be [B, N, 2·K], got [1, 2, 5]"), "{e}");
    }
}
