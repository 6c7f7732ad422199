//! Links from a model's unconstrained output `z` to the natural parameter space of a family.
//!
//! A network head produces any real numbers; several families need η in a subset. Each
//! coordinate of η is either `zⱼ` itself or `sign·softplus(±zⱼ) + shift`:
//!
//! | family | domain | link |
//! |---|---|---|
//! | Gaussian (unknown variance) | η₂ < 0 | η = (z₁, −softplus(z₂)) |
//! | Gamma | η₁ > −1, η₂ < 0 | η = (softplus(z₁) − 1, −softplus(z₂)) |
//! | Exponential | η < 0 | η = −softplus(z) |
//! | Beta | η₁, η₂ > −1 | ηᵢ = softplus(zᵢ) − 1 |
//! | Negative binomial | η < 0 | η = log σ(z) = −softplus(−z) |
//! | every other family | ℝᵈ | η = z |
//!
//! softplus is positive for every z above about −745 (f64) or −103 (f32); beyond that it
//! underflows to 0 and the family's domain check reports the row instead of a silent NaN.
//! The tape op built from this table is `efa_nn`'s `TapeNn::natural`.
//!
//! ```
//! use efa_expfam::{link, Family};
//! // Exponential: η = −softplus(0) = −ln 2.
//! assert_eq!(link::natural(&Family::Exponential, &[0.0f64]), vec![-std::f64::consts::LN_2]);
//! ```

use crate::Family;
use efa_num::scalar::{sigmoid, softplus};
use efa_num::Real;
use ndarray::Array2;

/// The link of one coordinate of η.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LinkStep {
    /// ηⱼ = zⱼ.
    Identity,
    /// ηⱼ = sign·softplus(reflect ? −zⱼ : zⱼ) + shift.
    Softplus {
        /// +1 or −1.
        sign: f64,
        /// Added after the softplus.
        shift: f64,
        /// Apply softplus to −zⱼ instead of zⱼ.
        reflect: bool,
    },
}

impl LinkStep {
    /// ηⱼ from zⱼ.
    pub fn apply<T: Real>(&self, z: T) -> T {
        match *self {
            LinkStep::Identity => z,
            LinkStep::Softplus {
                sign,
                shift,
                reflect,
            } => {
                let s = softplus(if reflect { -z } else { z });
                T::from_f64(sign) * s + T::from_f64(shift)
            }
        }
    }

    /// dηⱼ/dzⱼ: 1, or sign·σ(zⱼ) (sign·(−1)·σ(−zⱼ) when reflected).
    pub fn derivative<T: Real>(&self, z: T) -> T {
        match *self {
            LinkStep::Identity => T::ONE,
            LinkStep::Softplus { sign, reflect, .. } => {
                if reflect {
                    -T::from_f64(sign) * sigmoid(-z)
                } else {
                    T::from_f64(sign) * sigmoid(z)
                }
            }
        }
    }
}

/// The link of every coordinate of η for `family` (see the module table).
pub fn steps(family: &Family) -> Vec<LinkStep> {
    let neg = LinkStep::Softplus {
        sign: -1.0,
        shift: 0.0,
        reflect: false,
    };
    let above_minus_one = LinkStep::Softplus {
        sign: 1.0,
        shift: -1.0,
        reflect: false,
    };
    match family {
        Family::Gaussian => vec![LinkStep::Identity, neg],
        Family::Gamma => vec![above_minus_one, neg],
        Family::Exponential => vec![neg],
        Family::Beta => vec![above_minus_one, above_minus_one],
        Family::NegativeBinomial { .. } => vec![LinkStep::Softplus {
            sign: -1.0,
            shift: 0.0,
            reflect: true,
        }],
        other => vec![LinkStep::Identity; other.eta_dim()],
    }
}

/// True when the link is the identity in every coordinate.
pub fn is_identity(family: &Family) -> bool {
    steps(family).iter().all(|s| *s == LinkStep::Identity)
}

/// η = link(z) for one output row `z` (length `eta_dim`; extra coordinates are left as they
/// are, missing ones are absent from the result).
pub fn natural<T: Real>(family: &Family, z: &[T]) -> Vec<T> {
    let steps = steps(family);
    z.iter()
        .enumerate()
        .map(|(j, &v)| steps.get(j).map_or(v, |s| s.apply(v)))
        .collect()
}

/// η = link(z) row by row, `z` of shape `[B, eta_dim]`.
pub fn natural_rows(family: &Family, z: &Array2<f64>) -> Array2<f64> {
    let steps = steps(family);
    let mut eta = z.clone();
    for (j, step) in steps.iter().enumerate().take(eta.ncols()) {
        eta.column_mut(j).mapv_inplace(|v| step.apply(v));
    }
    eta
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derivatives_match_central_differences() {
        // Central differences with h = 1e-6 have error O(h²·f''') ≈ 1e-12 here.
        for family in [
            Family::Gaussian,
            Family::Gamma,
            Family::Exponential,
            Family::Beta,
            Family::NegativeBinomial { r: 2.0 },
        ] {
            for step in steps(&family) {
                for z in [-20.0, -1.3, 0.0, 0.7, 15.0] {
                    let fd = efa_check::central_difference(
                        &mut |x| step.apply(x[0]),
                        &mut [z],
                        0,
                        &efa_check::FdOptions::default(),
                    );
                    let d: f64 = step.derivative(z);
                    assert!(
                        (fd - d).abs() < 1e-8,
                        "{family:?} {step:?} z={z}: {fd} vs {d}"
                    );
                }
            }
        }
    }

    #[test]
    fn hand_values() {
        let ln2 = std::f64::consts::LN_2;
        assert_eq!(natural(&Family::Exponential, &[0.0]), vec![-ln2]);
        assert_eq!(
            natural(&Family::NegativeBinomial { r: 1.0 }, &[0.0]),
            vec![-ln2]
        );
        assert_eq!(
            natural(&Family::Beta, &[0.0, 0.0]),
            vec![ln2 - 1.0, ln2 - 1.0]
        );
        assert_eq!(natural(&Family::Poisson, &[-3.5]), vec![-3.5]);
        assert!(is_identity(&Family::Categorical { k: 3 }));
        assert!(!is_identity(&Family::Gamma));
    }
}
