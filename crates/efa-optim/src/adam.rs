//! Adam / AdamW with bias correction: one fused in-place pass per parameter tensor.
//!
//! Per element, with gradient `g` (after clipping and, for L2, `g += λ·w`) at step `t` (1-based):
//!
//! * [`EpsPlacement::Keras`] (the paper's runs, Keras 3 source order):
//!   `m += (g − m)(1 − β1)`, `v += (g² − v)(1 − β2)`,
//!   `α_t = lr·√(1 − β2ᵗ)/(1 − β1ᵗ)`, `w −= α_t·m / (√v + ε)`.
//! * [`EpsPlacement::Textbook`] (Kingma & Ba): `m = β1·m + (1 − β1)·g`,
//!   `v = β2·v + (1 − β2)·g²`, `m̂ = m/(1 − β1ᵗ)`, `v̂ = v/(1 − β2ᵗ)`, `w −= lr·m̂/(√v̂ + ε)`,
//!   evaluated as `(lr/(1 − β1ᵗ))·m / (√v·(1 − β2ᵗ)^(−½) + ε)` (one division per element).
//!
//! The two differ only in where ε sits: Keras's ε is effectively `ε·√(1 − β2ᵗ)` in the
//! textbook form, which matters early in training and for tiny gradients.
//!
//! Weight decay: [`WeightDecay::Decoupled`] (AdamW) first does `w ← w·(1 − lr·λ)` and then the
//! Adam update; [`WeightDecay::L2`] adds `λ·w` to the gradient before the moments.
//! Scalars (`α_t`, bias corrections) are computed in f64 and rounded once to `T` (Keras does
//! this arithmetic in f32, so results agree to rounding, not bit for bit).
//! Large tensors are split into chunks processed by rayon; the update is elementwise, so the
//! result is bitwise identical to the sequential loop.

use crate::clip::{clip_scale, global_norm};
use crate::param::{check_params, Param};
use crate::schedule::Schedule;
use crate::OptimError;
use efa_num::Real;
use rayon::prelude::*;
use std::collections::HashMap;

/// Where ε enters the Adam update (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpsPlacement {
    /// `w −= lr·m̂/(√v̂ + ε)`.
    Textbook,
    /// `w −= α_t·m/(√v + ε)`, `α_t = lr·√(1 − β2ᵗ)/(1 − β1ᵗ)` (Keras, the paper).
    Keras,
}

/// Weight-decay variant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WeightDecay {
    /// No decay.
    None,
    /// Decoupled (AdamW): `w ← w·(1 − lr·λ)` before the Adam step.
    Decoupled(f64),
    /// Plain L2: `g ← g + λ·w` before the moments.
    L2(f64),
}

/// Adam hyper-parameters. [`AdamConfig::default`] gives the Keras defaults the paper used.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamConfig {
    /// Learning-rate schedule.
    pub schedule: Schedule,
    /// First-moment decay β1.
    pub beta1: f64,
    /// Second-moment decay β2.
    pub beta2: f64,
    /// ε.
    pub eps: f64,
    /// ε placement.
    pub placement: EpsPlacement,
    /// Weight decay.
    pub weight_decay: WeightDecay,
    /// Global-norm clipping threshold `c` (gradients scaled by `c / max(‖g‖, c)`).
    pub clip_norm: Option<f64>,
    /// Use rayon for tensors of at least [`PAR_MIN_LEN`] elements (bitwise identical result).
    pub parallel: bool,
}

/// Tensors at least this long are updated in parallel chunks of [`PAR_CHUNK`] elements.
pub const PAR_MIN_LEN: usize = 1 << 16;
/// Chunk length of the parallel update (16 Ki elements: w, g, m, v of an f32 chunk = 256 KiB,
/// about one L2 cache).
pub const PAR_CHUNK: usize = 1 << 14;

impl Default for AdamConfig {
    /// Keras: lr 1e-3 constant, β1 0.9, β2 0.999, ε 1e-7, Keras ε placement, no decay, no clipping.
    fn default() -> Self {
        AdamConfig {
            schedule: Schedule::Constant { lr: 1e-3 },
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-7,
            placement: EpsPlacement::Keras,
            weight_decay: WeightDecay::None,
            clip_norm: None,
            parallel: true,
        }
    }
}

impl AdamConfig {
    /// Keras defaults with a constant learning rate `lr`.
    pub fn keras(lr: f64) -> Self {
        AdamConfig {
            schedule: Schedule::Constant { lr },
            ..Default::default()
        }
    }

    /// Checks `0 ≤ β < 1`, `ε > 0`, finite non-negative decay and clip threshold, the schedule.
    pub fn validate(&self) -> Result<(), OptimError> {
        let ok_beta = |b: f64| (0.0..1.0).contains(&b);
        if !ok_beta(self.beta1) || !ok_beta(self.beta2) {
            return Err(OptimError::BadConfig(format!(
                "beta1 = {}, beta2 = {} must be in [0, 1)",
                self.beta1, self.beta2
            )));
        }
        if !(self.eps > 0.0 && self.eps.is_finite()) {
            return Err(OptimError::BadConfig(format!(
                "eps = {} must be positive",
                self.eps
            )));
        }
        match self.weight_decay {
            WeightDecay::Decoupled(l) | WeightDecay::L2(l) if !(l.is_finite() && l >= 0.0) => {
                return Err(OptimError::BadConfig(format!("weight decay = {l}")))
            }
            _ => {}
        }
        if let Some(c) = self.clip_norm {
            if !(c.is_finite() && c > 0.0) {
                return Err(OptimError::BadConfig(format!(
                    "clip_norm = {c} must be positive"
                )));
            }
        }
        self.schedule.validate()
    }
}

/// First and second moments of one parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct Moments<T> {
    /// Parameter name.
    pub name: String,
    /// Shape at creation.
    pub shape: Vec<usize>,
    /// First moment m.
    pub m: Vec<T>,
    /// Second moment v.
    pub v: Vec<T>,
}

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepInfo {
    /// The step just taken (1-based).
    pub step: u64,
    /// Learning rate used.
    pub lr: f64,
    /// Global gradient norm before clipping (computed only when clipping is on).
    pub grad_norm: Option<f64>,
    /// Factor the gradients were multiplied by (1 without clipping).
    pub clip_scale: f64,
}

/// Adam / AdamW optimizer over named parameters. State is created on the first step.
#[derive(Clone, Debug)]
pub struct Adam<T> {
    /// Hyper-parameters.
    pub config: AdamConfig,
    pub(crate) step: u64,
    pub(crate) slots: Vec<Moments<T>>,
    pub(crate) index: HashMap<String, usize>,
}

/// Per-step scalars, rounded to `T`.
#[derive(Clone, Copy)]
struct Coef<T> {
    keras: bool,
    b1: T,
    b2: T,
    omb1: T,
    omb2: T,
    eps: T,
    /// Keras: α_t; textbook: lr/(1 − β1ᵗ).
    step_size: T,
    /// 1/√(1 − β2ᵗ) (textbook).
    inv_sqrt_bc2: T,
    /// 1 − lr·λ (decoupled) or 1.
    decay_mul: T,
    decoupled: bool,
    l2: T,
    gscale: T,
}

#[inline(always)]
fn body<T: Real, const KERAS: bool, const DECOUPLED: bool>(
    c: &Coef<T>,
    w: &mut [T],
    g: &[T],
    m: &mut [T],
    v: &mut [T],
) {
    let n = w.len();
    let (g, m, v) = (&g[..n], &mut m[..n], &mut v[..n]);
    for i in 0..n {
        let mut wi = w[i];
        // L2 (c.l2 = 0 otherwise) is added to the clipped gradient.
        let gi = g[i] * c.gscale + c.l2 * wi;
        if DECOUPLED {
            wi *= c.decay_mul;
        }
        if KERAS {
            let mi = m[i] + (gi - m[i]) * c.omb1;
            let vi = v[i] + (gi * gi - v[i]) * c.omb2;
            m[i] = mi;
            v[i] = vi;
            w[i] = wi - (mi * c.step_size) / (vi.sqrt() + c.eps);
        } else {
            let mi = c.b1 * m[i] + c.omb1 * gi;
            let vi = c.b2 * v[i] + c.omb2 * (gi * gi);
            m[i] = mi;
            v[i] = vi;
            // lr·m̂/(√v̂ + ε) written with one division: (lr/bc1)·m / (√v·(1/√bc2) + ε).
            w[i] = wi - (c.step_size * mi) / (vi.sqrt() * c.inv_sqrt_bc2 + c.eps);
        }
    }
}

/// The fused update of one tensor (or chunk): dispatches once to a loop specialised on the
/// ε placement and the decay kind.
fn fused<T: Real>(c: &Coef<T>, w: &mut [T], g: &[T], m: &mut [T], v: &mut [T]) {
    match (c.keras, c.decoupled) {
        (true, false) => body::<T, true, false>(c, w, g, m, v),
        (true, true) => body::<T, true, true>(c, w, g, m, v),
        (false, false) => body::<T, false, false>(c, w, g, m, v),
        (false, true) => body::<T, false, true>(c, w, g, m, v),
    }
}

impl<T: Real> Adam<T> {
    /// A fresh optimizer (step 0, no state). Fails on an invalid config.
    pub fn new(config: AdamConfig) -> Result<Self, OptimError> {
        config.validate()?;
        Ok(Adam {
            config,
            step: 0,
            slots: Vec::new(),
            index: HashMap::new(),
        })
    }

    /// Steps taken so far (= the schedule position).
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// The moments of every parameter, in creation order.
    pub fn moments(&self) -> &[Moments<T>] {
        &self.slots
    }

    /// The learning rate the next step will use.
    pub fn next_lr(&self) -> f64 {
        self.config.schedule.rate(self.step)
    }

    /// One Adam step over `params` (updated in place). On the first call the state is created
    /// for exactly these parameters; later calls may pass any subset of them (the others keep
    /// their moments), but an unknown name, a missing gradient, a length or shape change is an
    /// error, checked for all parameters before anything is modified.
    pub fn step(&mut self, params: &mut [Param<'_, T>]) -> Result<StepInfo, OptimError> {
        let grads = check_params(params)?;
        if self.step > 0 || !self.slots.is_empty() {
            for p in params.iter() {
                let i = *self
                    .index
                    .get(p.name)
                    .ok_or_else(|| OptimError::UnknownParam {
                        name: p.name.to_string(),
                    })?;
                if self.slots[i].shape != p.shape {
                    return Err(OptimError::ShapeChanged {
                        name: p.name.to_string(),
                        expected: self.slots[i].shape.clone(),
                        got: p.shape.clone(),
                    });
                }
            }
        } else {
            for p in params.iter() {
                self.index.insert(p.name.to_string(), self.slots.len());
                let n = p.value.len();
                self.slots.push(Moments {
                    name: p.name.to_string(),
                    shape: p.shape.clone(),
                    m: vec![T::ZERO; n],
                    v: vec![T::ZERO; n],
                });
            }
        }
        let cfg = self.config;
        let (grad_norm, scale) = match cfg.clip_norm {
            Some(c) => {
                let n = global_norm(&grads);
                (Some(n), clip_scale(n, c))
            }
            None => (None, 1.0),
        };
        let lr = cfg.schedule.rate(self.step);
        let t = self.step + 1;
        let tt = t.min(i32::MAX as u64) as i32;
        let bc1 = 1.0 - cfg.beta1.powi(tt);
        let bc2 = 1.0 - cfg.beta2.powi(tt);
        let keras = cfg.placement == EpsPlacement::Keras;
        let (decoupled, lam_dec, l2) = match cfg.weight_decay {
            WeightDecay::None => (false, 0.0, 0.0),
            WeightDecay::Decoupled(l) => (true, l, 0.0),
            WeightDecay::L2(l) => (false, 0.0, l),
        };
        let c = Coef {
            keras,
            b1: T::from_f64(cfg.beta1),
            b2: T::from_f64(cfg.beta2),
            omb1: T::from_f64(1.0 - cfg.beta1),
            omb2: T::from_f64(1.0 - cfg.beta2),
            eps: T::from_f64(cfg.eps),
            step_size: T::from_f64(if keras {
                lr * bc2.sqrt() / bc1
            } else {
                lr / bc1
            }),
            inv_sqrt_bc2: T::from_f64(1.0 / bc2.sqrt()),
            decay_mul: T::from_f64(1.0 - lr * lam_dec),
            decoupled,
            l2: T::from_f64(l2),
            gscale: T::from_f64(scale),
        };
        for (p, g) in params.iter_mut().zip(grads) {
            let slot = &mut self.slots[self.index[p.name]];
            let (w, m, v) = (&mut *p.value, &mut slot.m[..], &mut slot.v[..]);
            if cfg.parallel && w.len() >= PAR_MIN_LEN {
                w.par_chunks_mut(PAR_CHUNK)
                    .zip(g.par_chunks(PAR_CHUNK))
                    .zip(m.par_chunks_mut(PAR_CHUNK))
                    .zip(v.par_chunks_mut(PAR_CHUNK))
                    .for_each(|(((w, g), m), v)| fused(&c, w, g, m, v));
            } else {
                fused(&c, w, g, m, v);
            }
        }
        self.step = t;
        Ok(StepInfo {
            step: t,
            lr,
            grad_norm,
            clip_scale: scale,
        })
    }
}
