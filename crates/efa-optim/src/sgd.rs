//! Plain SGD with (heavy-ball) momentum, mainly for tests: `b ← μ·b + g`, `w ← w − lr·b`
//! (`μ = 0` is vanilla SGD).

use crate::param::{check_params, Param};
use crate::OptimError;
use efa_num::Real;
use std::collections::HashMap;

/// SGD with momentum over named parameters.
#[derive(Clone, Debug)]
pub struct Sgd<T> {
    /// Learning rate.
    pub lr: f64,
    /// Momentum μ in [0, 1).
    pub momentum: f64,
    buf: HashMap<String, Vec<T>>,
}

impl<T: Real> Sgd<T> {
    /// A fresh optimizer; fails unless `lr ≥ 0` and `0 ≤ momentum < 1`.
    pub fn new(lr: f64, momentum: f64) -> Result<Self, OptimError> {
        if !(lr.is_finite() && lr >= 0.0 && (0.0..1.0).contains(&momentum)) {
            return Err(OptimError::BadConfig(format!(
                "sgd lr = {lr}, momentum = {momentum}"
            )));
        }
        Ok(Sgd {
            lr,
            momentum,
            buf: HashMap::new(),
        })
    }

    /// One step; errors as [`crate::Adam::step`] for missing gradients and lengths, and if a
    /// parameter's length changed since its momentum buffer was created.
    pub fn step(&mut self, params: &mut [Param<'_, T>]) -> Result<(), OptimError> {
        let grads = check_params(params)?;
        for p in params.iter() {
            if let Some(b) = self.buf.get(p.name) {
                if b.len() != p.value.len() {
                    return Err(OptimError::ShapeChanged {
                        name: p.name.to_string(),
                        expected: vec![b.len()],
                        got: p.shape.clone(),
                    });
                }
            }
        }
        let (lr, mu) = (T::from_f64(self.lr), T::from_f64(self.momentum));
        for (p, g) in params.iter_mut().zip(grads) {
            let b = self
                .buf
                .entry(p.name.to_string())
                .or_insert_with(|| vec![T::ZERO; g.len()]);
            for ((w, &gi), bi) in p.value.iter_mut().zip(g).zip(b.iter_mut()) {
                *bi = mu * *bi + gi;
                *w -= lr * *bi;
            }
        }
        Ok(())
    }
}
