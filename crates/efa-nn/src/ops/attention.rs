//! The fused masked-softmax attention kernel (`efa-attn`) as a two-output tape op.
//!
//! Forward: `o = softmax(scale·QKᵀ + mask)·V` per head and `lse = logsumexp(scale·QKᵀ + mask)`
//! per query row (the log-partition of the empirical exponential family over the keys), from
//! the same [`Attention`] arguments as the kernel with tape variables as inputs:
//! [`TapeNn::attention`](crate::TapeNn::attention) takes `q, k, v` as `[B, N, H, K]` and
//! [`TapeNn::attention_heads`](crate::TapeNn::attention_heads) as
//! `[B, N, H·K]` (the layout a per-position projection produces, so no transposes are recorded
//! on the tape); `o` comes back in the inputs' layout and `lse` as `[B, H, Nq]`. The full
//! table — which axis is which, `Nq ≠ Nk`, `Dv ≠ Dk`, the default scale — is in the
//! [efa-attn crate docs](efa_attn#layouts). The kernel reads the inputs through permuted
//! strided views; only the outputs and gradients are copied between `[B, H, N, K]` and
//! `[B, N, H, K]`.
//! Backward: the kernel's own backward with both cotangents `d_o` and `d_lse`.
//!
//! ```
//! use efa_nn::ops::attention::{Attention, Mask};
//! use efa_nn::TapeNn;
//! use efa_tape::Tape;
//! use ndarray::{ArrayD, IxDyn};
//!
//! // B = 2, N = 3, H = 2 heads of K = 2: flat `[B, N, H·K]` projections.
//! let mut tape = Tape::<f64>::new();
//! let x = ArrayD::from_shape_fn(IxDyn(&[2, 3, 4]), |i| 0.1 * (i[1] + i[2]) as f64);
//! let x = tape.param("x", x).unwrap();
//! let mask = Mask::causal().key_lengths([3, 2]);
//! let out = tape.attention_heads(Attention::new(x, x, x).mask(mask), 2).unwrap();
//! assert_eq!(tape.value(out.o).shape(), [2, 3, 4]);
//! assert_eq!(tape.value(out.lse).shape(), [2, 2, 3]);
//! // Query 0 sees key 0 only: lse = ⟨x₀, x₀⟩/√K per head (head 0 of row 0: x₀ = (0, 0.1)).
//! let want = 0.01 / 2f64.sqrt();
//! assert!((tape.value(out.lse)[[0, 0, 0]] - want).abs() < 1e-15);
//! let total = tape.sum_all(out.o).unwrap();
//! let grads = tape.backward(total).unwrap();
//! assert_eq!(grads.param("x").unwrap().shape(), [2, 3, 4]);
//! ```

use efa_attn::AttnOutView;
pub use efa_attn::{Attention, Isa, Mask, Par};
use efa_num::Real;
use efa_tape::{FusedOp, Tape, TapeError, Var};
use ndarray::{ArrayD, Ix3, Ix4, IxDyn};

/// The outputs of [`TapeNn::attention`](crate::TapeNn::attention) and
/// [`TapeNn::attention_heads`](crate::TapeNn::attention_heads): `o` in the inputs'
/// layout and `lse` `[B, H, Nq]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnVars {
    /// `o = softmax(scale·QKᵀ + mask)·V`.
    pub o: Var,
    /// `lse = logsumexp(scale·QKᵀ + mask)` per (batch row, head, query).
    pub lse: Var,
}

#[derive(Clone)]
struct AttentionOp {
    /// Mask, scale, scheduling and SIMD variant (the inputs come from the tape).
    args: Attention<()>,
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
    let cow = x.as_standard_layout();
    let src = cow.as_slice().expect("standard layout");
    // Written in output order (no zero-fill first).
    let mut out = efa_num::pool::take(src.len());
    for bi in 0..b {
        for ni in 0..n {
            for hi in 0..h {
                let from = ((bi * h + hi) * n + ni) * k;
                out.extend_from_slice(&src[from..from + k]);
            }
        }
    }
    drop(cow);
    efa_num::pool::give_array(x);
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

    /// Useful FLOPs under the mask, as the kernel counts them
    /// ([`Attention::forward_flops`]): `2·(K + Kv)` per visible (batch, head, query, key)
    /// quadruple forward — `QKᵀ` and `PV`; softmax exponentials are not counted — and 2.5×
    /// that backward (the FlashAttention convention). Work the kernel spends on masked entries
    /// of partially visible tiles is not counted; inputs that do not fit count 0.
    fn flops(&self, inputs: &[&ArrayD<T>], backward: bool) -> u64 {
        let &[q, k, v] = inputs else {
            return 0;
        };
        let views = (
            four(q, "q", self.heads),
            four(k, "k", self.heads),
            four(v, "v", self.heads),
        );
        let (Ok(q), Ok(k), Ok(v)) = views else {
            return 0;
        };
        let fwd = self.args.with_inputs(q, k, v).forward_flops().unwrap_or(0);
        if backward {
            fwd.saturating_mul(5) / 2
        } else {
            fwd
        }
    }

    /// The mask's key lengths and dense visibility (shared with the caller's mask, counted
    /// here as the op's own).
    fn saved_bytes(&self) -> usize {
        let m = &self.args.mask;
        m.lengths().map_or(0, std::mem::size_of_val) + m.visibility().map_or(0, |d| d.len())
    }

    fn forward(&mut self, inputs: &[&ArrayD<T>]) -> Result<Vec<ArrayD<T>>, TapeError> {
        let (q, k, v) = (
            four(inputs[0], "q", self.heads)?,
            four(inputs[1], "k", self.heads)?,
            four(inputs[2], "v", self.heads)?,
        );
        let out = self.args.with_inputs(q, k, v).forward().map_err(tape_err)?;
        Ok(vec![self.flat(to_bnhk(out.o)), out.lse.into_dyn()])
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
        let g = self
            .args
            .with_inputs(q, k, v)
            .backward(AttnOutView { o, lse }, d_o, d_lse)
            .map_err(tape_err)?;
        Ok(vec![
            Some(self.flat(to_bnhk(g.dq))),
            Some(self.flat(to_bnhk(g.dk))),
            Some(self.flat(to_bnhk(g.dv))),
        ])
    }
}

/// Records [`TapeNn::attention`](crate::TapeNn::attention) (documented there).
pub(crate) fn attention<T: Real>(
    tape: &mut Tape<T>,
    args: Attention<Var>,
) -> Result<AttnVars, TapeError> {
    record_attention(tape, args, 0)
}

/// Records [`TapeNn::attention_heads`](crate::TapeNn::attention_heads) (documented there).
pub(crate) fn attention_heads<T: Real>(
    tape: &mut Tape<T>,
    args: Attention<Var>,
    heads: usize,
) -> Result<AttnVars, TapeError> {
    if heads == 0 {
        return Err(TapeError::new(
            "fused:attention",
            "heads must be at least 1",
        ));
    }
    record_attention(tape, args, heads)
}

fn record_attention<T: Real>(
    tape: &mut Tape<T>,
    args: Attention<Var>,
    heads: usize,
) -> Result<AttnVars, TapeError> {
    let inputs = [args.q, args.k, args.v];
    let op = AttentionOp {
        args: Attention {
            q: (),
            k: (),
            v: (),
            mask: args.mask,
            scale: args.scale,
            par: args.par,
            isa: args.isa,
        },
        heads,
    };
    let out = tape.fused(Box::new(op), &inputs)?;
    Ok(AttnVars {
        o: out[0],
        lse: out[1],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TapeNn;
    use ndarray::{Array4, Axis};

    fn input(shape: &[usize], seed: f64) -> ArrayD<f64> {
        let mut i = 0.0;
        ArrayD::from_shape_fn(IxDyn(shape), |_| {
            i += 1.0;
            (i * 0.71 + seed).sin() * 1.5
        })
    }

    /// A loss reading both outputs, so that `d_o` and `d_lse` are both exercised.
    fn loss(tape: &mut Tape<f64>, out: AttnVars) -> Result<Var, TapeError> {
        let o2 = tape.square(out.o)?;
        let a = tape.sum_all(o2)?;
        let l = tape.scale(out.lse, 0.3)?;
        let b = tape.sum_all(l)?;
        tape.add(a, b)
    }

    /// `[B, N, H·K]` read as `[B, H, N, K]` by hand (an independent copy, not the op's view).
    fn bhnk(x: &ArrayD<f64>, heads: usize) -> Array4<f64> {
        let s = x.shape();
        let k = s[2] / heads;
        Array4::from_shape_fn((s[0], heads, s[1], k), |(b, h, n, c)| x[[b, n, h * k + c]])
    }

    #[test]
    fn flat_head_attention_equals_the_four_d_op_and_passes_the_audit() {
        // B = 2, Nq = 3, Nk = 4, H = 2, K = 3, Kv = 2; causal with key lengths 4 and 2.
        let (q, k, v) = (
            input(&[2, 3, 6], 0.1),
            input(&[2, 4, 6], 0.5),
            input(&[2, 4, 4], 0.9),
        );
        let mask = Mask::causal().key_lengths([4, 2]);
        let scale = 0.6;
        let mut tape = Tape::<f64>::new();
        let vars: Vec<Var> = [&q, &k, &v]
            .iter()
            .enumerate()
            .map(|(i, x)| tape.param(&format!("x{i}"), (*x).clone()).unwrap())
            .collect();
        let args = Attention::new(vars[0], vars[1], vars[2])
            .mask(mask.clone())
            .scale(scale);
        let out = tape.attention_heads(args, 2).unwrap();
        let mut four_d = Vec::new();
        for (x, &var) in [&q, &k, &v].iter().zip(&vars) {
            let s = x.shape();
            four_d.push(tape.reshape(var, &[s[0], s[1], 2, s[2] / 2]).unwrap());
        }
        let args4 = Attention::new(four_d[0], four_d[1], four_d[2])
            .mask(mask.clone())
            .scale(scale);
        let out4 = tape.attention(args4).unwrap();
        let o4 = tape.reshape(out4.o, &[2, 3, 4]).unwrap();
        assert_eq!(tape.value(out.o).shape(), [2, 3, 4]);
        assert_eq!(tape.value(out.o), tape.value(o4));
        assert_eq!(tape.value(out.lse), tape.value(out4.lse));
        efa_testkit::tape::assert_audit(&[("q", q), ("k", k), ("v", v)], |tape, x| {
            let args = Attention::new(x[0], x[1], x[2])
                .mask(mask.clone())
                .scale(scale);
            let out = tape.attention_heads(args, 2)?;
            loss(tape, out)
        });
    }

    /// The layout table: flat-head inputs `[B, N, H·K]` against the naive f64 kernel on
    /// `[B, H, N, K]` copies made by hand; `o` comes back `[B, Nq, H·Kv]`, `lse` `[B, H, Nq]`.
    /// Default scale 1/√K with K the width per head (K = 4 here, so 0.5, not 1/√8).
    #[test]
    fn layouts_and_default_scale_match_the_naive_kernel() {
        let (h, kq, kv) = (2, 4, 3);
        let (q, k, v) = (
            input(&[2, 3, h * kq], 0.2),
            input(&[2, 5, h * kq], 0.4),
            input(&[2, 5, h * kv], 0.8),
        );
        let mask = Mask::none().causal_offset(2).key_lengths([5, 3]);
        let mut tape = Tape::<f64>::new();
        let (qv, kv_, vv) = (
            tape.constant(q.clone()),
            tape.constant(k.clone()),
            tape.constant(v.clone()),
        );
        let out = tape
            .attention_heads(Attention::new(qv, kv_, vv).mask(mask.clone()), h)
            .unwrap();
        let (q4, k4, v4) = (bhnk(&q, h), bhnk(&k, h), bhnk(&v, h));
        let want = efa_attn::naive::forward(
            &Attention::new(q4.view(), k4.view(), v4.view())
                .mask(mask)
                .scale(0.5),
        )
        .unwrap();
        let o = tape.value(out.o);
        assert_eq!(o.shape(), [2, 3, h * kv]);
        for ((b, hh, n, c), &w) in want.o.indexed_iter() {
            assert!(
                (o[[b, n, hh * kv + c]] - w).abs() < 1e-12,
                "o {b} {hh} {n} {c}"
            );
        }
        let lse = tape.value(out.lse);
        assert_eq!(lse.shape(), [2, h, 3]);
        for ((b, hh, n), &w) in want.lse.indexed_iter() {
            assert!((lse[[b, hh, n]] - w).abs() < 1e-12, "lse {b} {hh} {n}");
        }
    }

    /// Exclude-self, a dense per-head mask and a negative causal offset (fully masked rows)
    /// pass through the tape op: gradients against central differences.
    #[test]
    fn every_mask_rule_passes_the_audit() {
        let dense =
            Array4::from_shape_fn((2, 2, 4, 4), |(b, h, i, j)| (b + h + i + 2 * j) % 3 != 0);
        let masks = [
            Mask::none().exclude_self().key_lengths([4, 3]),
            Mask::none().dense(dense),
            Mask::none().causal_offset(-1),
        ];
        for mask in masks {
            let (q, k, v) = (
                input(&[2, 4, 2, 2], 0.3),
                input(&[2, 4, 2, 2], 0.6),
                input(&[2, 4, 2, 3], 0.7),
            );
            // Forward values against the naive kernel on `[B, H, N, K]` copies.
            let mut tape = Tape::<f64>::new();
            let (qv, kv, vv) = (
                tape.constant(q.clone()),
                tape.constant(k.clone()),
                tape.constant(v.clone()),
            );
            let out = tape
                .attention(Attention::new(qv, kv, vv).mask(mask.clone()))
                .unwrap();
            let flat = |x: &ArrayD<f64>| {
                let s = x.shape();
                bhnk(
                    &x.to_shape((s[0], s[1], s[2] * s[3]))
                        .unwrap()
                        .into_dyn()
                        .to_owned(),
                    2,
                )
            };
            let (q4, k4, v4) = (flat(&q), flat(&k), flat(&v));
            let want = efa_attn::naive::forward(
                &Attention::new(q4.view(), k4.view(), v4.view()).mask(mask.clone()),
            )
            .unwrap();
            let o = tape.value(out.o);
            for ((b, h, n, c), &w) in want.o.indexed_iter() {
                assert!(
                    (o[[b, n, h, c]] - w).abs() < 1e-12,
                    "{mask:?} o {b} {h} {n} {c}"
                );
            }
            let lse = tape.value(out.lse);
            assert!(lse
                .iter()
                .zip(&want.lse)
                .all(|(a, b)| a == b || (a - b).abs() < 1e-12));
            efa_testkit::tape::assert_audit(&[("q", q), ("k", k), ("v", v)], |tape, x| {
                let args = Attention::new(x[0], x[1], x[2])
                    .mask(mask.clone())
                    .par(Par::Sequential);
                let out = tape.attention(args)?;
                // Rows with no visible key have lse = −∞: read lse through exp (0 there, with
                // zero gradient) so the loss stays finite.
                let o2 = tape.square(out.o)?;
                let a = tape.sum_all(o2)?;
                let z = tape.exp(out.lse)?;
                let b = tape.sum_all(z)?;
                tape.add(a, b)
            });
        }
    }

    #[test]
    fn flat_heads_must_divide_the_width() {
        let mut tape = Tape::<f64>::new();
        let q = tape.param("q", input(&[1, 2, 5], 0.0)).unwrap();
        let e = tape
            .attention_heads(Attention::new(q, q, q), 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("q must be [B, N, 2·K], got [1, 2, 5]"), "{e}");
        let e = tape
            .attention_heads(Attention::new(q, q, q), 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("heads must be at least 1"), "{e}");
    }

    /// A key length beyond Nk through the tape: the error names the field, its shape and the
    /// batch row.
    #[test]
    fn mask_errors_name_field_and_batch_row() {
        let mut tape = Tape::<f64>::new();
        let x = tape.param("x", input(&[3, 4, 2, 2], 0.0)).unwrap();
        let args = Attention::new(x, x, x).mask(Mask::causal().key_lengths([4, 5, 1]));
        let e = tape.attention(args).unwrap_err().to_string();
        assert!(e.contains("mask.key_lengths with shape [3]"), "{e}");
        assert!(
            e.contains("length 5 at batch row [1] exceeds the key count Nk = 4"),
            "{e}"
        );
        // The lse output has one entry per (batch row, head, query).
        let out = tape.attention(Attention::new(x, x, x)).unwrap();
        assert_eq!(tape.value(out.lse).len_of(Axis(1)), 2);
    }
}
