//! The O(N²) reference in f64: materialises the probability matrix per (batch, head).
//! Used by tests (independent of the tiled kernel) and benches (the naive baseline). Takes the
//! same [`Attention`] arguments and returns the same named results as the kernel, in f64.

use crate::mask::Rules;
use crate::problem::expect_shape;
use crate::{Attention, AttnError, AttnGrads, AttnOut};
use efa_num::Real;
use ndarray::{Array2, Array3, Array4, ArrayView3, ArrayView4};

/// Probabilities `P[i, j] = exp(sᵢⱼ − lseᵢ)` (0 where masked) and `lse` for one head,
/// with `sᵢⱼ = scale·⟨qᵢ, kⱼ⟩`, all in f64.
fn probs<T: Real>(
    q: &ArrayView4<T>,
    k: &ArrayView4<T>,
    rules: &Rules,
    b: usize,
    h: usize,
    scale: f64,
) -> (Array2<f64>, Vec<f64>) {
    let (nq, nk, d) = (q.shape()[2], k.shape()[2], q.shape()[3]);
    let mut p = Array2::<f64>::zeros((nq, nk));
    let mut lse = vec![f64::NEG_INFINITY; nq];
    for i in 0..nq {
        let mut m = f64::NEG_INFINITY;
        for j in 0..nk {
            if rules.visible(b, h, i, j) {
                let s: f64 = (0..d)
                    .map(|c| q[[b, h, i, c]].to_f64() * k[[b, h, j, c]].to_f64())
                    .sum::<f64>()
                    * scale;
                p[[i, j]] = s;
                // `f64::max` ignores NaN; a NaN score must poison the whole row instead.
                m = if s.is_nan() || m.is_nan() {
                    f64::NAN
                } else {
                    m.max(s)
                };
            }
        }
        if m.is_nan() {
            for j in 0..nk {
                p[[i, j]] = if rules.visible(b, h, i, j) {
                    f64::NAN
                } else {
                    0.0
                };
            }
            lse[i] = f64::NAN;
            continue;
        }
        if m == f64::NEG_INFINITY {
            p.row_mut(i).fill(0.0);
            continue;
        }
        let mut z = 0.0;
        for j in 0..nk {
            if rules.visible(b, h, i, j) {
                z += (p[[i, j]] - m).exp();
            }
        }
        lse[i] = m + z.ln();
        for j in 0..nk {
            p[[i, j]] = if rules.visible(b, h, i, j) {
                (p[[i, j]] - lse[i]).exp()
            } else {
                0.0
            };
        }
    }
    (p, lse)
}

/// Checks the shapes and the mask of `args`; returns the rules and the scale as the kernel
/// uses it (rounded to `T`, then widened to f64).
fn check<'m, T: Real>(
    args: &'m Attention<ArrayView4<'_, T>>,
) -> Result<(Rules<'m>, f64), AttnError> {
    let (q, k, v) = (&args.q, &args.k, &args.v);
    let s = q.shape();
    expect_shape("k", k.shape(), &[s[0], s[1], k.shape()[2], s[3]])?;
    expect_shape("v", v.shape(), &[s[0], s[1], k.shape()[2], v.shape()[3]])?;
    let rules = Rules::new(&args.mask, s[0], s[1], s[2], k.shape()[2])?;
    let scale = T::from_f64(args.scale_for(s[3])).to_f64();
    if !scale.is_finite() {
        return Err(AttnError::new(
            "scale",
            vec![],
            format!("must be finite in {}, got {scale}", T::NAME),
        ));
    }
    Ok((rules, scale))
}

/// Reference forward in f64: [`AttnOut`] as [`Attention::forward`] defines it (same
/// arguments; `par` and `isa` are ignored), computed by materialising
/// `P = exp(scale·QKᵀ − lse)` (O(Nq·Nk) memory per head). The scale is the kernel's: rounded
/// to `T` first.
///
/// # Errors
/// Shape mismatches, an unfit mask or a non-finite scale, as [`Attention::forward`].
pub fn forward<T: Real>(args: &Attention<ArrayView4<'_, T>>) -> Result<AttnOut<f64>, AttnError> {
    let (rules, scale) = check(args)?;
    let (q, k, v) = (&args.q, &args.k, &args.v);
    let (bs, hs, nq, nk, dv) = (
        q.shape()[0],
        q.shape()[1],
        q.shape()[2],
        k.shape()[2],
        v.shape()[3],
    );
    let mut o = Array4::<f64>::zeros((bs, hs, nq, dv));
    let mut lse = Array3::<f64>::zeros((bs, hs, nq));
    for b in 0..bs {
        for h in 0..hs {
            let (p, l) = probs(q, k, &rules, b, h, scale);
            for i in 0..nq {
                lse[[b, h, i]] = l[i];
                for c in 0..dv {
                    o[[b, h, i, c]] = (0..nk).map(|j| p[[i, j]] * v[[b, h, j, c]].to_f64()).sum();
                }
            }
        }
    }
    Ok(AttnOut { o, lse })
}

/// Reference backward in f64: [`AttnGrads`] as [`Attention::backward`] defines them, for the
/// cotangents `d_o` `[B, H, Nq, Dv]` and `d_lse` `[B, H, Nq]` (`None` = zero), from the
/// materialised `P` (the forward's outputs are recomputed, not taken):
/// `dP = dO·Vᵀ`, `dS = P ∘ (dP − rowsum(dO ∘ O) + dlse)`.
///
/// # Errors
/// Shape mismatches, an unfit mask or a non-finite scale.
pub fn backward<T: Real>(
    args: &Attention<ArrayView4<'_, T>>,
    d_o: ArrayView4<'_, T>,
    d_lse: Option<ArrayView3<'_, T>>,
) -> Result<AttnGrads<f64>, AttnError> {
    let (rules, scale) = check(args)?;
    let (q, k, v) = (&args.q, &args.k, &args.v);
    let (bs, hs, nq, nk, d, dv) = (
        q.shape()[0],
        q.shape()[1],
        q.shape()[2],
        k.shape()[2],
        q.shape()[3],
        v.shape()[3],
    );
    expect_shape("d_o", d_o.shape(), &[bs, hs, nq, dv])?;
    if let Some(g) = &d_lse {
        expect_shape("d_lse", g.shape(), &[bs, hs, nq])?;
    }
    let mut dq = Array4::<f64>::zeros(q.raw_dim());
    let mut dk = Array4::<f64>::zeros(k.raw_dim());
    let mut dvv = Array4::<f64>::zeros(v.raw_dim());
    for b in 0..bs {
        for h in 0..hs {
            let (p, _) = probs(q, k, &rules, b, h, scale);
            for i in 0..nq {
                let g = |c: usize| d_o[[b, h, i, c]].to_f64();
                // o_i from P, then D_i = ⟨dO_i, o_i⟩ − dlse_i.
                let mut di = 0.0;
                for c in 0..dv {
                    let oc: f64 = (0..nk).map(|j| p[[i, j]] * v[[b, h, j, c]].to_f64()).sum();
                    di += g(c) * oc;
                }
                if let Some(dl) = &d_lse {
                    di -= dl[[b, h, i]].to_f64();
                }
                for j in 0..nk {
                    if p[[i, j]] == 0.0 {
                        continue;
                    }
                    let dp: f64 = (0..dv).map(|c| g(c) * v[[b, h, j, c]].to_f64()).sum();
                    let ds = p[[i, j]] * (dp - di);
                    for c in 0..dv {
                        dvv[[b, h, j, c]] += p[[i, j]] * g(c);
                    }
                    for c in 0..d {
                        dq[[b, h, i, c]] += scale * ds * k[[b, h, j, c]].to_f64();
                        dk[[b, h, j, c]] += scale * ds * q[[b, h, i, c]].to_f64();
                    }
                }
            }
        }
    }
    Ok(AttnGrads { dq, dk, dv: dvv })
}

/// The attention probabilities `P[b, h, i, j] = exp(sᵢⱼ − lseᵢ)` with `sᵢⱼ = scale·⟨qᵢ, kⱼ⟩`
/// over the visible keys (0 where masked; an all-masked row is all 0), `[B, H, Nq, Nk]` in
/// f64, for inspection (attention maps). Same arguments as [`forward`] (`v` is checked but
/// not read).
///
/// # Errors
/// Shape mismatches, an unfit mask or a non-finite scale, as [`Attention::forward`].
pub fn probabilities<T: Real>(
    args: &Attention<ArrayView4<'_, T>>,
) -> Result<Array4<f64>, AttnError> {
    let (rules, scale) = check(args)?;
    let (q, k) = (&args.q, &args.k);
    let (bs, hs, nq, nk) = (q.shape()[0], q.shape()[1], q.shape()[2], k.shape()[2]);
    let mut out = Array4::<f64>::zeros((bs, hs, nq, nk));
    for b in 0..bs {
        for h in 0..hs {
            let (p, _) = probs(q, k, &rules, b, h, scale);
            out.slice_mut(ndarray::s![b, h, .., ..]).assign(&p);
        }
    }
    Ok(out)
}
