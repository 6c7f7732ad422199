//! Losses on the natural parameter η, as the paper's reference code computed them, and the
//! fully normalised negative log-likelihood of any efa-expfam family.

use crate::batch::Targets;
use crate::ModelError;
use efa_expfam::Family;
use efa_nn::TapeNn;
use efa_num::Real;
use efa_tape::{Tape, Var};
use ndarray::{ArrayD, IxDyn};

/// The training and evaluation loss (a mean over the minibatch): one of the paper's
/// objectives as its reference code computed them, or the fully normalised mean nll of an
/// efa-expfam family.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Objective {
    /// mean (y − η)² (Keras `mean_squared_error`; the Gaussian nll with σ² = ½ up to a constant).
    Mse,
    /// `σ²·mean (z − η)²` for standardised targets `z = (y − μ)/σ`: the mean squared error of
    /// the prediction `μ + σ·η` in the units of `y`, so losses and the test metric read as
    /// [`Objective::Mse`] on the raw scale while the model works on the standardised one.
    /// `std` is σ (finite, positive).
    StandardisedMse {
        /// σ, the standard deviation the targets were divided by.
        std: f64,
    },
    /// mean −log softmax(η)\[y\] (categorical nll).
    CrossEntropy,
    /// docs/paper.md §4.3 v1: λ = e^η, mean(λ − (y−1)·ln(λ + 1e-8)) (Poisson on y − 1, no ln y!).
    PoissonShifted,
    /// docs/paper.md §4.3 v2: μ = 1 + e^η, mean(μ − y·ln μ) (Poisson with mean 1 + e^η, no ln y!).
    PoissonOnePlus,
    /// λ = e^η, mean(λ − y·ln(λ + 1e-8)): [`Objective::PoissonShifted`] on the count `y`
    /// itself (the v1 data written as counts `rating − 1`; the same values bit for bit).
    PoissonLogEps,
    /// The mean over targets of the fully normalised nll of each target's own family
    /// (`Targets::Mixed`): row `b` of family `f` uses `link_f(η[b, ..dim_f])`, so η is as wide
    /// as the widest family; Σ_f Σ_{b ∈ f} nll_f(y_b; link_f(η[b, ..dim_f])) / B.
    MixedNll,
    /// mean nll(y; link(η)) of an efa-expfam family, fully normalised (A(η) − ⟨t(y), η⟩ −
    /// log h(y) in each family's stable form), with the model output mapped into the family's
    /// natural parameter space by `efa_expfam::link` (identity for most families). Targets are
    /// `Targets::Real` holding one observation per sample (class indices as reals for the
    /// categorical family).
    Nll(Family),
}

impl Objective {
    /// Name of the reported test metric.
    pub fn metric(&self) -> &'static str {
        match self {
            Objective::Mse | Objective::StandardisedMse { .. } => "test_mse",
            Objective::CrossEntropy => "test_ce",
            Objective::PoissonShifted | Objective::PoissonOnePlus | Objective::PoissonLogEps => {
                "test_loss"
            }
            Objective::Nll(_) | Objective::MixedNll => "test_nll",
        }
    }

    /// Mean loss of η `[B, width]` against the targets, on the tape.
    pub fn loss<T: Real>(
        &self,
        tape: &mut Tape<T>,
        eta: Var,
        targets: &Targets,
    ) -> Result<Var, ModelError> {
        let shape = tape.try_value(eta)?.shape().to_vec();
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
                _ => Err(ModelError::Batch(
                    "this objective needs real-valued targets (one family)".into(),
                )),
            }
        };
        if !matches!(
            self,
            Objective::CrossEntropy | Objective::Nll(_) | Objective::MixedNll
        ) && shape != [b, 1]
        {
            return Err(ModelError::Batch(format!(
                "objective {self:?} needs η of shape [B, 1], got {shape:?}"
            )));
        }
        match self {
            Objective::Mse => Ok(tape.mse(eta, &real(targets)?)?),
            Objective::StandardisedMse { std } => {
                if !(std.is_finite() && *std > 0.0) {
                    return Err(ModelError::config(
                        "objective.std",
                        format!("standardised MSE: σ must be finite and positive, got {std}"),
                    ));
                }
                let mse = tape.mse(eta, &real(targets)?)?;
                Ok(tape.scale(mse, T::from_f64(std * std))?)
            }
            Objective::CrossEntropy => match targets {
                Targets::Class(y) => Ok(tape.softmax_cross_entropy(eta, y)?),
                _ => Err(ModelError::Batch(
                    "cross-entropy needs class targets".into(),
                )),
            },
            Objective::PoissonLogEps => {
                // loss = λ − y·ln(λ + 1e-8), λ = e^η (the ops of `PoissonShifted`).
                let lam = tape.exp(eta)?;
                let shifted = tape.shift(lam, T::from_f64(1e-8))?;
                let log = tape.log(shifted)?;
                let y = tape.constant(real(targets)?);
                let t = tape.mul(y, log)?;
                let l = tape.sub(lam, t)?;
                Ok(tape.mean_all(l)?)
            }
            Objective::MixedNll => match targets {
                Targets::Mixed { y, families } => crate::mixed::mixed_nll(tape, eta, y, families),
                _ => Err(ModelError::Batch(
                    "the mixed-family nll needs targets with a family per sample".into(),
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
            Objective::Nll(family) => {
                // The model's output is unconstrained; the link maps it into the family's
                // natural parameter space (identity for most families).
                let y = real(targets)?;
                let y = y
                    .into_dimensionality::<ndarray::Ix2>()
                    .map_err(|e| ModelError::Batch(e.to_string()))?;
                let eta = tape.natural(family, eta)?;
                let per_row = tape.nll(family, eta, &y, None)?;
                Ok(tape.mean_all(per_row)?)
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
