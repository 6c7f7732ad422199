//! Learning-rate schedules: small values that report the rate for step `t`.
//!
//! `t` counts the steps already taken (0 for the first update), so a schedule's position is
//! the optimizer's step counter and is saved with it.

use crate::OptimError;

/// A learning-rate schedule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Schedule {
    /// `rate(t) = lr`.
    Constant {
        /// The rate.
        lr: f64,
    },
    /// `rate(t) = lr · gamma^⌊t / every⌋`.
    Step {
        /// Initial rate.
        lr: f64,
        /// Steps between decays (> 0).
        every: u64,
        /// Multiplicative decay.
        gamma: f64,
    },
    /// Linear warm-up then cosine decay:
    /// `t < warmup`: `lr · (t + 1) / warmup`;
    /// otherwise with `p = min(1, (t − warmup) / (total − warmup))`:
    /// `min_lr + (lr − min_lr) · (1 + cos πp) / 2` (so `min_lr` from `t ≥ total` on).
    WarmupCosine {
        /// Peak rate.
        lr: f64,
        /// Warm-up steps (may be 0).
        warmup: u64,
        /// Total steps (> warmup).
        total: u64,
        /// Final rate.
        min_lr: f64,
    },
}

impl Schedule {
    /// The learning rate for step `t` (0-based).
    pub fn rate(&self, t: u64) -> f64 {
        match *self {
            Schedule::Constant { lr } => lr,
            Schedule::Step { lr, every, gamma } => {
                lr * gamma.powi((t / every.max(1)).min(i32::MAX as u64) as i32)
            }
            Schedule::WarmupCosine {
                lr,
                warmup,
                total,
                min_lr,
            } => {
                if t < warmup {
                    lr * (t + 1) as f64 / warmup as f64
                } else {
                    let span = total.saturating_sub(warmup).max(1) as f64;
                    let p = ((t - warmup) as f64 / span).min(1.0);
                    min_lr + (lr - min_lr) * 0.5 * (1.0 + (std::f64::consts::PI * p).cos())
                }
            }
        }
    }

    /// Checks the hyper-parameters: finite non-negative rates, `every > 0`, `total > warmup`.
    pub fn validate(&self) -> Result<(), OptimError> {
        let bad = |m: String| Err(OptimError::BadConfig(m));
        match *self {
            Schedule::Constant { lr } if !(lr.is_finite() && lr >= 0.0) => bad(format!("lr = {lr}")),
            Schedule::Step { lr, every, gamma } if !(lr.is_finite() && lr >= 0.0 && every > 0 && gamma.is_finite() && gamma >= 0.0) => {
                bad(format!("step schedule lr = {lr}, every = {every}, gamma = {gamma}"))
            }
            Schedule::WarmupCosine { lr, warmup, total, min_lr }
                if !(lr.is_finite() && lr >= 0.0 && min_lr.is_finite() && min_lr >= 0.0 && total > warmup) =>
            {
                bad(format!("cosine schedule lr = {lr}, warmup = {warmup}, total = {total}, min_lr = {min_lr}"))
            }
            _ => Ok(()),
        }
    }
}
