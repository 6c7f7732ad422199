//! The closed set of families and per-observation dispatch.

use crate::common::c;
use crate::{
    bernoulli, beta, binomial, categorical, exponential, gamma, gaussian, gaussian_known,
    multinomial, negbin, ordinal, poisson, ExpfamError,
};
use efa_num::Real;
use rand::Rng;

/// An exponential family (or the ordinal cumulative-logit model) with its fixed parameters.
///
/// Per observation, η is a slice of length [`Family::eta_dim`] and y a slice of length
/// [`Family::obs_dim`] (category indices are stored as reals). Every method validates its
/// inputs and returns an [`ExpfamError`] naming the family, the value and `row` (the index of
/// the observation in the caller's batch, used only in errors). For a single η or y,
/// [`Family::eval`] gives the same methods without `row`, returning owned values; for whole
/// batches see [`crate::nll_batch`], [`crate::log_partition_batch`], [`crate::mean_batch`] and
/// [`crate::hessian_batch`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Family {
    /// N(μ, s2) with s2 known: η = μ/s2, A = s2 η²/2.
    GaussianKnownVar {
        /// Known variance s2 > 0.
        s2: f64,
    },
    /// N(μ, s2): η = (μ/s2, −1/(2 s2)), t = (y, y²).
    Gaussian,
    /// Bernoulli: η = logit p, A = softplus(η).
    Bernoulli,
    /// Binomial(n): η = logit p, A = n softplus(η).
    Binomial {
        /// Number of trials.
        n: u64,
    },
    /// Poisson: η = ln λ, A = e^η.
    Poisson,
    /// Categorical over K classes: A = logsumexp(η).
    Categorical {
        /// Number of categories K ≥ 1.
        k: usize,
    },
    /// Multinomial(n) over K classes: A = n logsumexp(η).
    Multinomial {
        /// Number of trials.
        n: u64,
        /// Number of categories K ≥ 1.
        k: usize,
    },
    /// Gamma: η = (α − 1, −β), t = (ln y, y).
    Gamma,
    /// Exponential: η = −λ, A = −ln(−η).
    Exponential,
    /// Beta: η = (a − 1, b − 1), t = (ln y, ln(1 − y)).
    Beta,
    /// Negative binomial(r): η = ln p, A = −r ln(1 − e^η).
    NegativeBinomial {
        /// Number of failures r > 0 (real).
        r: f64,
    },
    /// Ordinal cumulative logit with K categories (K − 1 cut-points supplied separately).
    OrdinalLogit {
        /// Number of categories K ≥ 2.
        k: usize,
    },
}

fn shape(family: &'static str, what: &'static str, expected: usize, got: usize) -> ExpfamError {
    ExpfamError::Shape {
        family,
        what,
        expected,
        got,
    }
}

impl Family {
    /// The family's name as in the reference file (`"bernoulli"`, `"gaussian_known_var"`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Family::GaussianKnownVar { .. } => gaussian_known::NAME,
            Family::Gaussian => gaussian::NAME,
            Family::Bernoulli => bernoulli::NAME,
            Family::Binomial { .. } => binomial::NAME,
            Family::Poisson => poisson::NAME,
            Family::Categorical { .. } => categorical::NAME,
            Family::Multinomial { .. } => multinomial::NAME,
            Family::Gamma => gamma::NAME,
            Family::Exponential => exponential::NAME,
            Family::Beta => beta::NAME,
            Family::NegativeBinomial { .. } => negbin::NAME,
            Family::OrdinalLogit { .. } => ordinal::NAME,
        }
    }

    /// Length of η (= length of t(y)): 1, 2 (Gaussian, Gamma, Beta) or K.
    pub fn eta_dim(&self) -> usize {
        match self {
            Family::Gaussian | Family::Gamma | Family::Beta => 2,
            Family::Categorical { k } | Family::Multinomial { k, .. } => *k,
            _ => 1,
        }
    }

    /// Length of one observation y: K for the multinomial (counts), else 1.
    pub fn obs_dim(&self) -> usize {
        match self {
            Family::Multinomial { k, .. } => *k,
            _ => 1,
        }
    }

    /// Checks the fixed parameters (s2 > 0, r > 0, K ≥ 1, ordinal K ≥ 2).
    pub fn validate(&self) -> Result<(), ExpfamError> {
        let bad = |name: &str, value: f64, expected| {
            Err(ExpfamError::Param {
                family: self.name(),
                name: name.into(),
                value,
                expected,
            })
        };
        match *self {
            Family::GaussianKnownVar { s2 } if !(s2 > 0.0 && s2.is_finite()) => {
                bad("s2", s2, "finite s2 > 0")
            }
            Family::NegativeBinomial { r } if !(r > 0.0 && r.is_finite()) => {
                bad("r", r, "finite r > 0")
            }
            Family::Categorical { k } | Family::Multinomial { k, .. } if k == 0 => {
                bad("k", 0.0, "k >= 1")
            }
            Family::OrdinalLogit { k } if k < 2 => bad("k", k as f64, "k >= 2"),
            _ => Ok(()),
        }
    }

    fn check_lens<T: Real>(&self, y: Option<&[T]>, eta: Option<&[T]>) -> Result<(), ExpfamError> {
        self.validate()?;
        if let Some(y) = y {
            if y.len() != self.obs_dim() {
                return Err(shape(self.name(), "y", self.obs_dim(), y.len()));
            }
        }
        if let Some(eta) = eta {
            if eta.len() != self.eta_dim() {
                return Err(shape(self.name(), "eta", self.eta_dim(), eta.len()));
            }
        }
        Ok(())
    }

    fn unsupported(&self, what: &'static str) -> ExpfamError {
        ExpfamError::Unsupported {
            family: self.name(),
            what,
        }
    }

    /// Support check of one observation y (row `row`).
    pub fn check_obs<T: Real>(&self, y: &[T], row: usize) -> Result<(), ExpfamError> {
        self.check_lens(Some(y), None)?;
        self.check_obs_values(y, row)
    }

    /// [`Family::check_obs`] once parameters and lengths are known to be valid.
    pub(crate) fn check_obs_values<T: Real>(&self, y: &[T], row: usize) -> Result<(), ExpfamError> {
        match *self {
            Family::GaussianKnownVar { .. } => gaussian_known::check_obs(y[0], row),
            Family::Gaussian => gaussian::check_obs(y[0], row),
            Family::Bernoulli => bernoulli::check_obs(y[0], row),
            Family::Binomial { n } => binomial::check_obs(c(n as f64), y[0], row),
            Family::Poisson => poisson::check_obs(y[0], row),
            Family::Categorical { k } => categorical::check_obs(k, y[0], row).map(|_| ()),
            Family::Multinomial { n, .. } => multinomial::check_obs(c(n as f64), y, row),
            Family::Gamma => gamma::check_obs(y[0], row),
            Family::Exponential => exponential::check_obs(y[0], row),
            Family::Beta => beta::check_obs(y[0], row),
            Family::NegativeBinomial { .. } => negbin::check_obs(y[0], row),
            Family::OrdinalLogit { k } => ordinal::check_obs(k, y[0], row).map(|_| ()),
        }
    }

    /// Domain check of one natural parameter η (row `row`).
    pub fn check_eta<T: Real>(&self, eta: &[T], row: usize) -> Result<(), ExpfamError> {
        self.check_lens(None, Some(eta))?;
        self.check_eta_values(eta, row)
    }

    /// [`Family::check_eta`] once parameters and lengths are known to be valid.
    pub(crate) fn check_eta_values<T: Real>(
        &self,
        eta: &[T],
        row: usize,
    ) -> Result<(), ExpfamError> {
        match *self {
            Family::GaussianKnownVar { .. } => gaussian_known::check_eta(eta[0], row),
            Family::Gaussian => gaussian::check_eta(eta, row),
            Family::Bernoulli => bernoulli::check_eta(eta[0], row),
            Family::Binomial { .. } => binomial::check_eta(eta[0], row),
            Family::Poisson => poisson::check_eta(eta[0], row),
            Family::Categorical { .. } => categorical::check_eta(eta, row),
            Family::Multinomial { .. } => multinomial::check_eta(eta, row),
            Family::Gamma => gamma::check_eta(eta, row),
            Family::Exponential => exponential::check_eta(eta[0], row),
            Family::Beta => beta::check_eta(eta, row),
            Family::NegativeBinomial { .. } => negbin::check_eta(eta[0], row),
            Family::OrdinalLogit { .. } => ordinal::check_eta(eta[0], row),
        }
    }

    /// Log-partition A(η) (η checked; `row` only names the row in errors — for one-off calls
    /// see [`Family::eval`], for batches [`crate::log_partition_batch`]).
    pub fn log_partition<T: Real>(&self, eta: &[T], row: usize) -> Result<T, ExpfamError> {
        self.check_eta(eta, row)?;
        if let Family::OrdinalLogit { .. } = self {
            return Err(self.unsupported("A(eta)"));
        }
        Ok(self.log_partition_checked(eta))
    }

    /// [`Family::log_partition`] once η is validated (NaN for the ordinal model, which callers
    /// exclude).
    pub(crate) fn log_partition_checked<T: Real>(&self, eta: &[T]) -> T {
        match *self {
            Family::GaussianKnownVar { s2 } => gaussian_known::log_partition(c(s2), eta[0]),
            Family::Gaussian => gaussian::log_partition(eta),
            Family::Bernoulli => bernoulli::log_partition(eta[0]),
            Family::Binomial { n } => binomial::log_partition(c(n as f64), eta[0]),
            Family::Poisson => poisson::log_partition(eta[0]),
            Family::Categorical { .. } => categorical::log_partition(eta),
            Family::Multinomial { n, .. } => multinomial::log_partition(c(n as f64), eta),
            Family::Gamma => gamma::log_partition(eta),
            Family::Exponential => exponential::log_partition(eta[0]),
            Family::Beta => beta::log_partition(eta),
            Family::NegativeBinomial { r } => negbin::log_partition(c(r), eta[0]),
            Family::OrdinalLogit { .. } => T::NAN,
        }
    }

    /// Mean parameter ∇A(η) = E t(y), written into `out` (length `eta_dim`).
    pub fn mean<T: Real>(&self, eta: &[T], out: &mut [T], row: usize) -> Result<(), ExpfamError> {
        self.check_eta(eta, row)?;
        self.check_lens(None, Some(&*out))?;
        if let Family::OrdinalLogit { .. } = self {
            return Err(self.unsupported("grad A(eta)"));
        }
        self.mean_checked(eta, out);
        Ok(())
    }

    /// [`Family::mean`] once η and `out` are validated (ordinal excluded by the callers).
    pub(crate) fn mean_checked<T: Real>(&self, eta: &[T], out: &mut [T]) {
        match *self {
            Family::GaussianKnownVar { s2 } => out[0] = gaussian_known::mean(c(s2), eta[0]),
            Family::Gaussian => gaussian::mean(eta, out),
            Family::Bernoulli => out[0] = bernoulli::mean(eta[0]),
            Family::Binomial { n } => out[0] = binomial::mean(c(n as f64), eta[0]),
            Family::Poisson => out[0] = eta[0].exp(),
            Family::Categorical { .. } => categorical::mean(eta, out),
            Family::Multinomial { n, .. } => multinomial::mean(c(n as f64), eta, out),
            Family::Gamma => gamma::mean(eta, out),
            Family::Exponential => out[0] = exponential::mean(eta[0]),
            Family::Beta => beta::mean(eta, out),
            Family::NegativeBinomial { r } => out[0] = negbin::mean(c(r), eta[0]),
            Family::OrdinalLogit { .. } => out.fill(T::NAN),
        }
    }

    /// Hessian ∇²A(η) (covariance of t(y)), row-major `eta_dim × eta_dim` into `out`.
    pub fn hessian<T: Real>(
        &self,
        eta: &[T],
        out: &mut [T],
        row: usize,
    ) -> Result<(), ExpfamError> {
        self.check_eta(eta, row)?;
        let d = self.eta_dim();
        if out.len() != d * d {
            return Err(shape(self.name(), "hessian output", d * d, out.len()));
        }
        if let Family::OrdinalLogit { .. } = self {
            return Err(self.unsupported("hessian of A(eta)"));
        }
        self.hessian_checked(eta, out);
        Ok(())
    }

    /// [`Family::hessian`] once η and `out` are validated (ordinal excluded by the callers).
    pub(crate) fn hessian_checked<T: Real>(&self, eta: &[T], out: &mut [T]) {
        match *self {
            Family::GaussianKnownVar { s2 } => out[0] = gaussian_known::hessian(c(s2), eta[0]),
            Family::Gaussian => gaussian::hessian(eta, out),
            Family::Bernoulli => out[0] = bernoulli::hessian(eta[0]),
            Family::Binomial { n } => out[0] = binomial::hessian(c(n as f64), eta[0]),
            Family::Poisson => out[0] = eta[0].exp(),
            Family::Categorical { .. } => categorical::hessian(eta, out),
            Family::Multinomial { n, .. } => multinomial::hessian(c(n as f64), eta, out),
            Family::Gamma => gamma::hessian(eta, out),
            Family::Exponential => out[0] = exponential::hessian(eta[0]),
            Family::Beta => beta::hessian(eta, out),
            Family::NegativeBinomial { r } => out[0] = negbin::hessian(c(r), eta[0]),
            Family::OrdinalLogit { .. } => out.fill(T::NAN),
        }
    }

    /// Sufficient statistic t(y) into `out` (length `eta_dim`).
    pub fn suff_stat<T: Real>(
        &self,
        y: &[T],
        out: &mut [T],
        row: usize,
    ) -> Result<(), ExpfamError> {
        self.check_obs(y, row)?;
        self.check_lens(None, Some(&*out))?;
        match *self {
            Family::Gaussian => gaussian::suff_stat(y[0], out),
            Family::Gamma => gamma::suff_stat(y[0], out),
            Family::Beta => beta::suff_stat(y[0], out),
            Family::Categorical { k } => {
                let idx = categorical::check_obs(k, y[0], row)?;
                out.iter_mut()
                    .enumerate()
                    .for_each(|(i, o)| *o = c(f64::from(i == idx)));
            }
            Family::Multinomial { .. } => out.copy_from_slice(y),
            Family::OrdinalLogit { .. } => return Err(self.unsupported("t(y)")),
            _ => out[0] = y[0],
        }
        Ok(())
    }

    /// Base measure log h(y).
    pub fn log_base<T: Real>(&self, y: &[T], row: usize) -> Result<T, ExpfamError> {
        self.check_obs(y, row)?;
        Ok(match *self {
            Family::GaussianKnownVar { s2 } => gaussian_known::log_base(c(s2), y[0]),
            Family::Gaussian => gaussian::log_base(),
            Family::Binomial { n } => binomial::log_base(c(n as f64), y[0]),
            Family::Poisson => poisson::log_base(y[0]),
            Family::Multinomial { .. } => multinomial::log_base(y),
            Family::NegativeBinomial { r } => negbin::log_base(c(r), y[0]),
            Family::OrdinalLogit { .. } => return Err(self.unsupported("log h(y)")),
            _ => T::ZERO,
        })
    }

    /// nll(y, η) = −ln p(y | η) in the family's stable form.
    pub fn nll<T: Real>(&self, y: &[T], eta: &[T], row: usize) -> Result<T, ExpfamError> {
        let mut g = [T::ZERO; 8];
        if self.eta_dim() <= 8 {
            self.nll_grad(y, eta, &mut g[..self.eta_dim()], row)
        } else {
            let mut g = vec![T::ZERO; self.eta_dim()];
            self.nll_grad(y, eta, &mut g, row)
        }
    }

    /// nll(y, η) and ∂nll/∂η = ∇A(η) − t(y) (written into `grad`, length `eta_dim`), after
    /// checking y, η and the lengths. Not available for the ordinal model, which needs its
    /// cut-points: use [`ordinal::nll_grad`] or [`crate::ordinal_nll_batch`].
    pub fn nll_grad<T: Real>(
        &self,
        y: &[T],
        eta: &[T],
        grad: &mut [T],
        row: usize,
    ) -> Result<T, ExpfamError> {
        if let Family::OrdinalLogit { .. } = self {
            return Err(self.unsupported("nll without cut-points (use ordinal::nll_grad)"));
        }
        self.check_obs(y, row)?;
        self.check_eta(eta, row)?;
        self.check_lens(None, Some(&*grad))?;
        Ok(self.nll_grad_checked(y, eta, grad))
    }

    /// [`Family::nll_grad`] without the checks (inputs already validated).
    pub(crate) fn nll_grad_checked<T: Real>(&self, y: &[T], eta: &[T], grad: &mut [T]) -> T {
        let scalar = |grad: &mut [T], (v, g): (T, T)| {
            grad[0] = g;
            v
        };
        match *self {
            Family::GaussianKnownVar { s2 } => {
                scalar(grad, gaussian_known::nll_grad(c(s2), y[0], eta[0]))
            }
            Family::Gaussian => gaussian::nll_grad(y[0], eta, grad),
            Family::Bernoulli => scalar(grad, bernoulli::nll_grad(y[0], eta[0])),
            Family::Binomial { n } => scalar(grad, binomial::nll_grad(c(n as f64), y[0], eta[0])),
            Family::Poisson => scalar(grad, poisson::nll_grad(y[0], eta[0])),
            Family::Categorical { .. } => categorical::nll_grad(y[0].to_f64() as usize, eta, grad),
            Family::Multinomial { n, .. } => multinomial::nll_grad(c(n as f64), y, eta, grad),
            Family::Gamma => gamma::nll_grad(y[0], eta, grad),
            Family::Exponential => scalar(grad, exponential::nll_grad(y[0], eta[0])),
            Family::Beta => beta::nll_grad(y[0], eta, grad),
            Family::NegativeBinomial { r } => scalar(grad, negbin::nll_grad(c(r), y[0], eta[0])),
            Family::OrdinalLogit { .. } => T::NAN, // excluded by the callers
        }
    }

    /// Mean → natural parameters: the η with ∇A(η) = `mean` (closed forms; Newton for the
    /// Gamma shape and the Beta shapes).
    pub fn natural_from_mean<T: Real>(
        &self,
        mean: &[T],
        out: &mut [T],
        row: usize,
    ) -> Result<(), ExpfamError> {
        self.check_lens(None, Some(mean))?;
        self.check_lens(None, Some(&*out))?;
        match *self {
            Family::GaussianKnownVar { s2 } => {
                out[0] = gaussian_known::natural_from_mean(c(s2), mean[0])
            }
            Family::Gaussian => gaussian::natural_from_mean(mean, out, row)?,
            Family::Bernoulli => out[0] = bernoulli::natural_from_mean(mean[0], row)?,
            Family::Binomial { n } => {
                out[0] = binomial::natural_from_mean(c(n as f64), mean[0], row)?
            }
            Family::Poisson => out[0] = poisson::natural_from_mean(mean[0], row)?,
            Family::Categorical { .. } => categorical::natural_from_mean(mean, out, row)?,
            Family::Multinomial { n, .. } => {
                multinomial::natural_from_mean(c(n as f64), mean, out, row)?
            }
            Family::Gamma => gamma::natural_from_mean(mean, out, row)?,
            Family::Exponential => out[0] = exponential::natural_from_mean(mean[0], row)?,
            Family::Beta => beta::natural_from_mean(mean, out, row)?,
            Family::NegativeBinomial { r } => {
                out[0] = negbin::natural_from_mean(c(r), mean[0], row)?
            }
            Family::OrdinalLogit { .. } => return Err(self.unsupported("mean to natural")),
        }
        Ok(())
    }

    /// Draws one observation y ~ p(· | η) into `out` (length `obs_dim`).
    pub fn sample<T: Real, R: Rng + ?Sized>(
        &self,
        eta: &[T],
        rng: &mut R,
        out: &mut [T],
        row: usize,
    ) -> Result<(), ExpfamError> {
        self.check_eta(eta, row)?;
        self.check_lens(Some(&*out), None)?;
        match *self {
            Family::GaussianKnownVar { s2 } => {
                out[0] = gaussian_known::sample(c(s2), eta[0], rng, row)?
            }
            Family::Gaussian => out[0] = gaussian::sample(eta, rng, row)?,
            Family::Bernoulli => out[0] = bernoulli::sample(eta[0], rng),
            Family::Binomial { n } => out[0] = binomial::sample(n, eta[0], rng),
            Family::Poisson => out[0] = poisson::sample(eta[0], rng, row)?,
            Family::Categorical { .. } => out[0] = categorical::sample(eta, rng),
            Family::Multinomial { n, .. } => multinomial::sample(n, eta, rng, out),
            Family::Gamma => out[0] = gamma::sample(eta, rng, row)?,
            Family::Exponential => out[0] = exponential::sample(eta[0], rng),
            Family::Beta => out[0] = beta::sample(eta, rng),
            Family::NegativeBinomial { r } => out[0] = negbin::sample(r, eta[0], rng, row)?,
            Family::OrdinalLogit { .. } => {
                return Err(self.unsupported("sampling without cut-points (use ordinal::sample)"))
            }
        }
        Ok(())
    }
}
