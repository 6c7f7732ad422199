//! Losses on the natural parameter η, as the paper's reference code computed them, and the
//! fully normalised negative log-likelihood of any efa-expfam family.

use crate::batch::Targets;
use crate::ModelError;
use efa_num::Real;
use efa_tape::{Tape, Var};
use ndarray::{ArrayD, IxDyn};
use serde::{Deserialize, Serialize};

/// The training and evaluation loss (a mean over the minibatch).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Objective {
    /// mean (y − η)² (Keras `mean_squared_error`; the Gaussian nll with σ² = ½ up to a constant).
    Mse,
    /// mean −log softmax(η)\[y\] (categorical nll).
    CrossEntropy,
    /// PAPER.md §4.3 v1: λ = e^η, mean(λ − (y−1)·ln(λ + 1e-8)) (Poisson on y − 1, no ln y!).
    PoissonShifted,
    /// PAPER.md §4.3 v2: μ = 1 + e^η, mean(μ − y·ln μ) (Poisson with mean 1 + e^η, no ln y!).
    PoissonOnePlus,
}

impl Objective {
    /// Name of the reported test metric.
    pub fn metric(&self) -> &'static str {
        match self {
            Objective::Mse => "test_mse",
            Objective::CrossEntropy => "test_ce",
            Objective::PoissonShifted | Objective::PoissonOnePlus => "test_loss",
        }
    }

    /// Mean loss of η `[B, width]` against the targets, on the tape.
    pub fn loss<T: Real>(
        &self,
        tape: &mut Tape<T>,
        eta: Var,
        targets: &Targets,
    ) -> Result<Var, ModelError> {
        let shape = tape.shape(eta).to_vec();
        let b = shape[0];
        if targets.len() != b {
            return Err(ModelError::Batch(format!(
                "η has {b} rows but there are {} targets",
                targets.len()
            )));
        }
        let real = |targets: &Targets| -> Result<ArrayD<T>, ModelError> {
            match targets {
                Targets::Real(y) => Ok(ArrayD::from_shape_fn(IxDyn(&[b, 1]), |i| {
                    T::from_f64(y[i[0]])
                })),
                Targets::Class(_) => Err(ModelError::Batch(
                    "this objective needs real-valued targets".into(),
                )),
            }
        };
        if !matches!(self, Objective::CrossEntropy) && shape != [b, 1] {
            return Err(ModelError::Batch(format!(
                "objective {self:?} needs η of shape [B, 1], got {shape:?}"
            )));
        }
        match self {
            Objective::Mse => Ok(tape.mse(eta, &real(targets)?)?),
            Objective::CrossEntropy => match targets {
                Targets::Class(y) => Ok(tape.softmax_cross_entropy(eta, y)?),
                Targets::Real(_) => Err(ModelError::Batch(
                    "cross-entropy needs class targets".into(),
                )),
            },
            Objective::PoissonShifted => {
                // loss = λ − (y−1)·ln(λ + 1e-8), λ = e^η.
                let y1 = real(targets)?.mapv(|v| v - T::ONE);
                let lam = tape.exp(eta)?;
                let shifted = tape.shift(lam, T::from_f64(1e-8))?;
                let log = tape.log(shifted)?;
                let y1 = tape.constant(y1);
                let t = tape.mul(y1, log)?;
                let l = tape.sub(lam, t)?;
                Ok(tape.mean_all(l)?)
            }
            Objective::PoissonOnePlus => {
                // loss = μ − y·ln μ with μ = 1 + e^η, so ln μ = softplus(η).
                let y = tape.constant(real(targets)?);
                let e = tape.exp(eta)?;
                let mu = tape.shift(e, T::ONE)?;
                let log_mu = tape.softplus(eta)?;
                let t = tape.mul(y, log_mu)?;
                let l = tape.sub(mu, t)?;
                Ok(tape.mean_all(l)?)
            }
        }
    }
}
