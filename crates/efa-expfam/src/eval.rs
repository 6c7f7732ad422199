//! One-off calls: the [`Family`] methods without the `row` argument, returning owned values.
//!
//! The row-taking methods on [`Family`] write into caller buffers and name a batch row in their
//! errors; they are what loops over a batch use. For a single η or y,
//! `family.eval().log_partition(&eta)` reads better, and its errors name no row:
//!
//! ```
//! use efa_expfam::Family;
//! let gamma = Family::Gamma.eval();
//! // Gamma with shape α = 1 + η₁ = 3 and rate β = −η₂ = 2: A = lnΓ(3) − 3 ln 2 = ln(2/8).
//! let a: f64 = gamma.log_partition(&[2.0, -2.0]).unwrap();
//! assert!((a - 0.25f64.ln()).abs() < 1e-15);
//! // ∇A = (ψ(α) − ln β, α/β): E y = 3/2.
//! assert_eq!(gamma.mean(&[2.0, -2.0]).unwrap()[1], 1.5);
//! let err = gamma.log_partition(&[2.0, 1e-300]).unwrap_err().to_string();
//! assert!(err.contains("eta[1] = 1e-300") && !err.contains("row"), "{err}");
//! ```

use crate::{ExpfamError, Family};
use efa_num::Real;
use rand::Rng;

/// A [`Family`] for one-off evaluation (see the module docs); made by [`Family::eval`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Eval {
    family: Family,
}

impl Family {
    /// The one-off form of this family's methods: no `row` argument, owned results, errors
    /// without a row.
    pub fn eval(self) -> Eval {
        Eval { family: self }
    }
}

/// Drops the (placeholder) row from an error of a row-taking method.
fn one_off<V>(r: Result<V, ExpfamError>) -> Result<V, ExpfamError> {
    r.map_err(ExpfamError::without_row)
}

impl Eval {
    /// The family.
    pub fn family(&self) -> Family {
        self.family
    }

    /// Support check of y ([`Family::check_obs`]).
    pub fn check_obs<T: Real>(&self, y: &[T]) -> Result<(), ExpfamError> {
        one_off(self.family.check_obs(y, 0))
    }

    /// Domain check of η ([`Family::check_eta`]).
    pub fn check_eta<T: Real>(&self, eta: &[T]) -> Result<(), ExpfamError> {
        one_off(self.family.check_eta(eta, 0))
    }

    /// A(η) ([`Family::log_partition`]).
    pub fn log_partition<T: Real>(&self, eta: &[T]) -> Result<T, ExpfamError> {
        one_off(self.family.log_partition(eta, 0))
    }

    /// ∇A(η) = E t(y), length `eta_dim` ([`Family::mean`]).
    pub fn mean<T: Real>(&self, eta: &[T]) -> Result<Vec<T>, ExpfamError> {
        let mut out = vec![T::ZERO; self.family.eta_dim()];
        one_off(self.family.mean(eta, &mut out, 0))?;
        Ok(out)
    }

    /// ∇²A(η), row-major `eta_dim × eta_dim` ([`Family::hessian`]).
    pub fn hessian<T: Real>(&self, eta: &[T]) -> Result<Vec<T>, ExpfamError> {
        let d = self.family.eta_dim();
        let mut out = vec![T::ZERO; d * d];
        one_off(self.family.hessian(eta, &mut out, 0))?;
        Ok(out)
    }

    /// t(y), length `eta_dim` ([`Family::suff_stat`]).
    pub fn suff_stat<T: Real>(&self, y: &[T]) -> Result<Vec<T>, ExpfamError> {
        let mut out = vec![T::ZERO; self.family.eta_dim()];
        one_off(self.family.suff_stat(y, &mut out, 0))?;
        Ok(out)
    }

    /// log h(y) ([`Family::log_base`]).
    pub fn log_base<T: Real>(&self, y: &[T]) -> Result<T, ExpfamError> {
        one_off(self.family.log_base(y, 0))
    }

    /// nll(y, η) = −ln p(y | η) ([`Family::nll`]).
    pub fn nll<T: Real>(&self, y: &[T], eta: &[T]) -> Result<T, ExpfamError> {
        one_off(self.family.nll(y, eta, 0))
    }

    /// (nll(y, η), ∂nll/∂η = ∇A(η) − t(y)) ([`Family::nll_grad`]).
    pub fn nll_grad<T: Real>(&self, y: &[T], eta: &[T]) -> Result<(T, Vec<T>), ExpfamError> {
        let mut grad = vec![T::ZERO; self.family.eta_dim()];
        let nll = one_off(self.family.nll_grad(y, eta, &mut grad, 0))?;
        Ok((nll, grad))
    }

    /// The η with ∇A(η) = `mean` ([`Family::natural_from_mean`]).
    pub fn natural_from_mean<T: Real>(&self, mean: &[T]) -> Result<Vec<T>, ExpfamError> {
        let mut out = vec![T::ZERO; self.family.eta_dim()];
        one_off(self.family.natural_from_mean(mean, &mut out, 0))?;
        Ok(out)
    }

    /// One draw y ~ p(· | η), length `obs_dim` ([`Family::sample`]).
    pub fn sample<T: Real, R: Rng + ?Sized>(
        &self,
        eta: &[T],
        rng: &mut R,
    ) -> Result<Vec<T>, ExpfamError> {
        let mut out = vec![T::ZERO; self.family.obs_dim()];
        one_off(self.family.sample(eta, rng, &mut out, 0))?;
        Ok(out)
    }
}
