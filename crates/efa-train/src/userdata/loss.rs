//! The `loss` of a user configuration: the fully normalised nll of each target's family (the
//! default), or one of the paper's losses as its code computed them, for reproducing the
//! paper exactly through `efa train` (`efa export`).

use super::family::{Families, FamilySpec};
use crate::TrainError;
use efa_expfam::{link, Family};
use efa_model::Objective;
use serde::{Deserialize, Serialize};

/// What training minimises (a mean over the targets).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UserLoss {
    /// The nll of each target under its row's family, with the model output mapped into the
    /// family's natural parameter space by its link ([`Objective::Nll`], or
    /// [`Objective::MixedNll`] with `[[family]]` ranges).
    #[default]
    Nll,
    /// The paper's `mean (y − z)²` (Keras MSE) on the model output `z` as the mean: one
    /// `gaussian_known_var` family, η = z / s2 ([`Objective::Mse`]).
    Mse,
    /// The paper's MovieLens v1 loss on counts `y` (= rating − 1): `mean(λ − y·ln(λ + 1e-8))`,
    /// λ = e^z, one `poisson` family, η = z ([`Objective::PoissonLogEps`]).
    PoissonV1,
    /// The paper's MovieLens v2 loss: `mean(μ − y·ln μ)`, μ = 1 + e^z, one `poisson` family,
    /// η = ln μ ([`Objective::PoissonOnePlus`]).
    PoissonV2,
}

impl UserLoss {
    /// True for the default ([`UserLoss::Nll`]; not written to model files).
    pub fn is_nll(&self) -> bool {
        *self == UserLoss::Nll
    }

    /// `"nll"`, `"mse"`, `"poisson_v1"` or `"poisson_v2"`.
    pub fn name(&self) -> &'static str {
        match self {
            UserLoss::Nll => "nll",
            UserLoss::Mse => "mse",
            UserLoss::PoissonV1 => "poisson_v1",
            UserLoss::PoissonV2 => "poisson_v2",
        }
    }

    /// The training objective for `families`.
    pub fn objective(&self, families: &Families) -> Objective {
        match (self, families) {
            (UserLoss::Nll, Families::All(f)) => Objective::Nll(f.family()),
            (UserLoss::Nll, Families::Ranges(_)) => Objective::MixedNll,
            (UserLoss::Mse, _) => Objective::Mse,
            (UserLoss::PoissonV1, _) => Objective::PoissonLogEps,
            (UserLoss::PoissonV2, _) => Objective::PoissonOnePlus,
        }
    }

    /// The paper's losses need one family of their kind (field `loss`).
    pub fn validate(&self, families: &Families) -> Result<(), TrainError> {
        let want = match self {
            UserLoss::Nll => return Ok(()),
            UserLoss::Mse => "one [family] of kind gaussian_known_var",
            UserLoss::PoissonV1 | UserLoss::PoissonV2 => "one [family] of kind poisson",
        };
        let ok = matches!(
            (self, families),
            (
                UserLoss::Mse,
                Families::All(FamilySpec::GaussianKnownVar { .. })
            ) | (
                UserLoss::PoissonV1 | UserLoss::PoissonV2,
                Families::All(FamilySpec::Poisson {})
            )
        );
        if ok {
            Ok(())
        } else {
            Err(TrainError::config(
                "loss",
                format!(
                    "\"{}\" needs {want}, not {}",
                    self.name(),
                    families.describe()
                ),
            ))
        }
    }

    /// The natural parameter of `family` (η, `family.eta_dim()` values) for the model output
    /// row `z` (at least that wide) under this loss: the family's link for the nll; `z/s2`
    /// for the MSE (z is the mean); `z` (v1, λ = e^z) and `ln(1 + e^z)` (v2) for the
    /// Poisson losses.
    pub fn natural(&self, family: &Family, z: &[f64]) -> Vec<f64> {
        match (self, family) {
            (UserLoss::Mse, Family::GaussianKnownVar { s2 }) => vec![z[0] / s2],
            (UserLoss::PoissonV1, _) => vec![z[0]],
            (UserLoss::PoissonV2, _) => vec![efa_num::scalar::softplus(z[0])],
            _ => link::natural(family, &z[..family.eta_dim()]),
        }
    }
}
