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

use efa_attn::{Mask, MaskSet, Par};
use efa_num::Real;
use efa_tape::{FusedOp, Tape, TapeError, Var};
use ndarray::{ArrayD, Ix3, Ix4};

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

struct AttentionOp {
    mask: AttentionMask,
    scale: f64,
}

fn tape_err(e: efa_attn::AttnError) -> TapeError {
    TapeError::new("fused:attention", e.to_string())
}

/// `x` `[B, N, H, K]` viewed as `[B, H, N, K]` (no copy).
fn four<'a, T: Real>(
    x: &'a ArrayD<T>,
    name: &str,
) -> Result<ndarray::ArrayView4<'a, T>, TapeError> {
    x.view()
        .into_dimensionality::<Ix4>()
        .map(|v| v.permuted_axes([0, 2, 1, 3]))
        .map_err(|_| {
            TapeError::new(
                "fused:attention",
                format!("{name} must be [B, N, H, K], got {:?}", x.shape()),
            )
        })
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

impl<T: Real> FusedOp<T> for AttentionOp {
    fn name(&self) -> &str {
        "attention"
    }

    fn forward(&mut self, inputs: &[&ArrayD<T>]) -> Result<Vec<ArrayD<T>>, TapeError> {
        let (q, k, v) = (
            four(inputs[0], "q")?,
            four(inputs[1], "k")?,
            four(inputs[2], "v")?,
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
        Ok(vec![to_bnhk(o), lse.into_dyn()])
    }

    fn backward(
        &self,
        inputs: &[&ArrayD<T>],
        outputs: &[&ArrayD<T>],
        d_outputs: &[Option<&ArrayD<T>>],
        _needs_grad: &[bool],
    ) -> Result<Vec<Option<ArrayD<T>>>, TapeError> {
        let (q, k, v) = (
            four(inputs[0], "q")?,
            four(inputs[1], "k")?,
            four(inputs[2], "v")?,
        );
        let o = four(outputs[0], "o")?;
        debug_assert_eq!(o.dim().2, q.dim().2);
        let lse = outputs[1]
            .view()
            .into_dimensionality::<Ix3>()
            .map_err(|_| TapeError::new("fused:attention", "lse must be [B, H, N]"))?;
        // forward computed o and lse; an unused output has a zero cotangent.
        let zero_o;
        let d_o = match d_outputs[0] {
            Some(d) => four(d, "d_o")?,
            None => {
                zero_o = ArrayD::<T>::zeros(outputs[0].shape());
                four(&zero_o, "d_o")?
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
            Some(to_bnhk(dq)),
            Some(to_bnhk(dk)),
            Some(to_bnhk(dv)),
        ])
    }
}

/// Records fused attention on the tape and returns `(o, lse)`.
pub fn attention<T: Real>(
    tape: &mut Tape<T>,
    q: Var,
    k: Var,
    v: Var,
    mask: &AttentionMask,
    scale: f64,
) -> Result<(Var, Var), TapeError> {
    let out = tape.fused(
        Box::new(AttentionOp {
            mask: mask.clone(),
            scale,
        }),
        &[q, k, v],
    )?;
    Ok((out[0], out[1]))
}
