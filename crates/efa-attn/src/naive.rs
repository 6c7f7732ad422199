//! The O(N²) reference: materialises the probability matrix per (batch, head), computing in a
//! type `R` of one's choice: f64 ([`forward`], [`backward`], [`probabilities`]) or any
//! [`Real`], such as the double-double reference type ([`forward_in`], [`backward_in`]).
//! Used by tests (independent of the tiled kernel), benches (the naive baseline) and the
//! tape's attention op in the double-double reference. Takes the same [`Attention`] arguments
//! and returns the same named results as the kernel, in `R`.

use crate::mask::Rules;
use crate::problem::expect_shape;
use crate::{Attention, AttnError, AttnGrads, AttnOut};
use efa_num::Real;
use ndarray::{Array2, Array3, Array4, ArrayView3, ArrayView4};

/// Element `x` of an input, in the computing type `R` (exact when `R` is at least as wide).
#[inline(always)]
fn at<T: Real, R: Real>(x: &ArrayView4<T>, i: [usize; 4]) -> R {
    x[i].cast::<R>()
}

/// Probabilities `P[i, j] = exp(sᵢⱼ − lseᵢ)` (0 where masked) and `lse` for one head,
/// with `sᵢⱼ = scale·⟨qᵢ, kⱼ⟩`, all in `R`.
fn probs<R: Real, T: Real>(
    q: &ArrayView4<T>,
    k: &ArrayView4<T>,
    rules: &Rules,
    b: usize,
    h: usize,
    scale: R,
) -> (Array2<R>, Vec<R>) {
    let (nq, nk, d) = (q.shape()[2], k.shape()[2], q.shape()[3]);
    let mut p = Array2::<R>::zeros((nq, nk));
    let mut lse = vec![R::NEG_INFINITY; nq];
    for i in 0..nq {
        let mut m = R::NEG_INFINITY;
        for j in 0..nk {
            if rules.visible(b, h, i, j) {
                let s: R = (0..d)
                    .map(|c| at::<T, R>(q, [b, h, i, c]) * at::<T, R>(k, [b, h, j, c]))
                    .sum::<R>()
                    * scale;
                p[[i, j]] = s;
                // `max` ignores NaN; a NaN score must poison the whole row instead.
                m = if s.is_nan() || m.is_nan() {
                    R::NAN
                } else {
                    m.max(s)
                };
            }
        }
        if m.is_nan() {
            for j in 0..nk {
                p[[i, j]] = if rules.visible(b, h, i, j) {
                    R::NAN
                } else {
                    R::ZERO
                };
            }
            lse[i] = R::NAN;
            continue;
        }
        if m == R::NEG_INFINITY {
            p.row_mut(i).fill(R::ZERO);
            continue;
        }
        let mut z = R::ZERO;
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
                R::ZERO
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
    forward_in::<f64, T>(args)
}

/// [`forward`] computed in `R` (every sum, exponential and logarithm in `R`; the inputs
/// converted with [`Real::cast`], exactly when `R` is at least as wide as `T`).
///
/// # Errors
/// As [`forward`].
pub fn forward_in<R: Real, T: Real>(
    args: &Attention<ArrayView4<'_, T>>,
) -> Result<AttnOut<R>, AttnError> {
    let (rules, scale) = check(args)?;
    let scale = R::from_f64(scale);
    let (q, k, v) = (&args.q, &args.k, &args.v);
    let (bs, hs, nq, nk, dv) = (
        q.shape()[0],
        q.shape()[1],
        q.shape()[2],
        k.shape()[2],
        v.shape()[3],
    );
    let mut o = Array4::<R>::zeros((bs, hs, nq, dv));
    let mut lse = Array3::<R>::zeros((bs, hs, nq));
    for b in 0..bs {
        for h in 0..hs {
            let (p, l) = probs::<R, T>(q, k, &rules, b, h, scale);
            for i in 0..nq {
                lse[[b, h, i]] = l[i];
                for c in 0..dv {
                    o[[b, h, i, c]] = (0..nk)
                        .map(|j| p[[i, j]] * at::<T, R>(v, [b, h, j, c]))
                        .sum();
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
    backward_in::<f64, T>(args, d_o, d_lse)
}

/// [`backward`] computed in `R` (as [`forward_in`]).
///
/// # Errors
/// As [`backward`].
pub fn backward_in<R: Real, T: Real>(
    args: &Attention<ArrayView4<'_, T>>,
    d_o: ArrayView4<'_, T>,
    d_lse: Option<ArrayView3<'_, T>>,
) -> Result<AttnGrads<R>, AttnError> {
    let (rules, scale) = check(args)?;
    let scale = R::from_f64(scale);
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
    let mut dq = Array4::<R>::zeros(q.raw_dim());
    let mut dk = Array4::<R>::zeros(k.raw_dim());
    let mut dvv = Array4::<R>::zeros(v.raw_dim());
    for b in 0..bs {
        for h in 0..hs {
            let (p, _) = probs::<R, T>(q, k, &rules, b, h, scale);
            for i in 0..nq {
                let g = |c: usize| at::<T, R>(&d_o, [b, h, i, c]);
                // o_i from P, then D_i = ⟨dO_i, o_i⟩ − dlse_i.
                let mut di = R::ZERO;
                for c in 0..dv {
                    let oc: R = (0..nk)
                        .map(|j| p[[i, j]] * at::<T, R>(v, [b, h, j, c]))
                        .sum();
                    di += g(c) * oc;
                }
                if let Some(dl) = &d_lse {
                    di -= dl[[b, h, i]].cast::<R>();
                }
                for j in 0..nk {
                    if p[[i, j]] == R::ZERO {
                        continue;
                    }
                    let dp: R = (0..dv).map(|c| g(c) * at::<T, R>(v, [b, h, j, c])).sum();
                    let ds = p[[i, j]] * (dp - di);
                    for c in 0..dv {
                        dvv[[b, h, j, c]] += p[[i, j]] * g(c);
                    }
                    for c in 0..d {
                        dq[[b, h, i, c]] += scale * ds * at::<T, R>(k, [b, h, j, c]);
                        dk[[b, h, j, c]] += scale * ds * at::<T, R>(q, [b, h, i, c]);
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
            let (p, _) = probs::<f64, T>(q, k, &rules, b, h, scale);
            out.slice_mut(ndarray::s![b, h, .., ..]).assign(&p);
        }
    }
    Ok(out)
}
