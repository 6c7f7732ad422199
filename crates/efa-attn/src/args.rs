//! The argument struct shared by the kernel, the naive reference and the tape op, and the
//! named results.

use crate::{Mask, Par};
use efa_num::simd::{self, Isa};
use ndarray::{Array3, Array4, ArrayView3, ArrayView4};

/// One attention call: inputs `q`, `k`, `v`, the [`Mask`], the score scale, the scheduling and
/// the SIMD variant. `X` is what the inputs are: `ArrayView4<T>` views `[B, H, N, D]` for the
/// kernel ([`Attention::forward`], [`Attention::backward`], [`crate::naive`]), tape variables
/// for the tape op (`efa_nn`'s `TapeNn::attention`; layouts in the [crate docs](crate#layouts)).
///
/// Built with [`Attention::new`] and chained setters; defaults: no mask, `scale = 1/√Dk`
/// (`Dk` the query/key width per head; 1 when `Dk = 0`), [`Par::Rayon`], the detected SIMD
/// variant ([`efa_num::simd::active`], which honours `EFA_SIMD`).
#[derive(Clone, Debug)]
pub struct Attention<X> {
    /// Queries.
    pub q: X,
    /// Keys.
    pub k: X,
    /// Values.
    pub v: X,
    /// Which keys each query sees.
    pub mask: Mask,
    /// Score scale `s = scale·⟨q, k⟩`; `None` means `1/√Dk`.
    pub scale: Option<f64>,
    /// How work is scheduled.
    pub par: Par,
    /// SIMD variant (the scalar path if the CPU lacks it); `None` means the detected one.
    pub isa: Option<Isa>,
}

impl<X> Attention<X> {
    /// Attention of `q` over keys `k` with values `v`, with the defaults above.
    pub fn new(q: X, k: X, v: X) -> Self {
        Attention {
            q,
            k,
            v,
            mask: Mask::none(),
            scale: None,
            par: Par::Rayon,
            isa: None,
        }
    }

    /// Sets the mask.
    pub fn mask(mut self, mask: Mask) -> Self {
        self.mask = mask;
        self
    }

    /// Sets the score scale (must be finite in the element type).
    pub fn scale(mut self, scale: f64) -> Self {
        self.scale = Some(scale);
        self
    }

    /// Sets the scheduling ([`Par::Sequential`] for one thread in task order).
    pub fn par(mut self, par: Par) -> Self {
        self.par = par;
        self
    }

    /// Forces a SIMD variant (the scalar path if the CPU lacks it).
    pub fn isa(mut self, isa: Isa) -> Self {
        self.isa = Some(isa);
        self
    }

    /// The scale used for query/key width `key_dim`: the one set, else `1/√key_dim`
    /// (1 for `key_dim = 0`).
    pub fn scale_for(&self, key_dim: usize) -> f64 {
        self.scale
            .unwrap_or_else(|| 1.0 / (key_dim.max(1) as f64).sqrt())
    }

    /// The SIMD variant used: the one set, else [`efa_num::simd::active`].
    pub fn isa_or_active(&self) -> Isa {
        self.isa.unwrap_or_else(simd::active)
    }

    /// The same settings (mask, scale, scheduling, SIMD variant) on other inputs; the mask is
    /// shared, not copied.
    pub fn with_inputs<Y>(&self, q: Y, k: Y, v: Y) -> Attention<Y> {
        Attention {
            q,
            k,
            v,
            mask: self.mask.clone(),
            scale: self.scale,
            par: self.par,
            isa: self.isa,
        }
    }
}

/// Forward results: `o` `[B, H, Nq, Dv]` with `oᵢ = Σ_{j∈V(i)} exp(sᵢⱼ − lseᵢ)·vⱼ`, and
/// `lse` `[B, H, Nq]` with `lseᵢ = ln Σ_{j∈V(i)} exp(sᵢⱼ)` (`oᵢ = 0`, `lseᵢ = −∞` when no key
/// is visible).
#[derive(Clone, Debug, PartialEq)]
pub struct AttnOut<T> {
    /// Output `[B, H, Nq, Dv]`.
    pub o: Array4<T>,
    /// Log-partition per query row `[B, H, Nq]`.
    pub lse: Array3<T>,
}

impl<T> AttnOut<T> {
    /// Borrowed views, as [`Attention::backward`] takes them.
    pub fn view(&self) -> AttnOutView<'_, T> {
        AttnOutView {
            o: self.o.view(),
            lse: self.lse.view(),
        }
    }
}

/// Borrowed forward results (`o` `[B, H, Nq, Dv]`, `lse` `[B, H, Nq]`, any strides), the
/// state [`Attention::backward`] recomputes the probabilities from.
#[derive(Clone, Copy, Debug)]
pub struct AttnOutView<'a, T> {
    /// Output `[B, H, Nq, Dv]`.
    pub o: ArrayView4<'a, T>,
    /// Log-partition per query row `[B, H, Nq]`.
    pub lse: ArrayView3<'a, T>,
}

/// Gradients of a scalar loss with respect to `q`, `k`, `v` (shapes of the inputs).
#[derive(Clone, Debug, PartialEq)]
pub struct AttnGrads<T> {
    /// `∂L/∂q` `[B, H, Nq, Dk]`.
    pub dq: Array4<T>,
    /// `∂L/∂k` `[B, H, Nk, Dk]`.
    pub dk: Array4<T>,
    /// `∂L/∂v` `[B, H, Nk, Dv]`.
    pub dv: Array4<T>,
}
