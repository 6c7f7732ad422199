//! Links from a model's unconstrained output `z` to the natural parameter space of a family.
//!
//! A network head produces any real numbers; several families need η in a subset:
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

use efa_expfam::Family;
use efa_num::scalar::softplus;
use efa_num::Real;
use efa_tape::{Tape, TapeError, Var};
use ndarray::Array2;

/// Per column: `None` = identity, `Some((sign, shift, reflect))` = sign·softplus(±z) + shift.
fn plan(family: &Family) -> Vec<Option<(f64, f64, bool)>> {
    let neg = Some((-1.0, 0.0, false));
    let above_minus_one = Some((1.0, -1.0, false));
    match family {
        Family::Gaussian => vec![None, neg],
        Family::Gamma => vec![above_minus_one, neg],
        Family::Exponential => vec![neg],
        Family::Beta => vec![above_minus_one, above_minus_one],
        Family::NegativeBinomial { .. } => vec![Some((-1.0, 0.0, true))],
        other => vec![None; other.eta_dim()],
    }
}

/// η = link(z) on the tape, `z` of shape `[B, eta_dim]` (see the module table).
pub fn natural<T: Real>(tape: &mut Tape<T>, family: &Family, z: Var) -> Result<Var, TapeError> {
    let plan = plan(family);
    let shape = tape.shape(z).to_vec();
    if shape.len() != 2 || shape[1] != plan.len() {
        return Err(TapeError::new(
            format!("link[{}]", family.name()),
            format!("model output must be [B, {}], got {shape:?}", plan.len()),
        ));
    }
    if plan.iter().all(Option::is_none) {
        return Ok(z);
    }
    let mut cols = Vec::with_capacity(plan.len());
    for (j, step) in plan.iter().enumerate() {
        let c = tape.slice(z, 1, j, j + 1)?;
        cols.push(match *step {
            None => c,
            Some((sign, shift, reflect)) => {
                let c = if reflect { tape.neg(c)? } else { c };
                let s = tape.softplus(c)?;
                let s = tape.scale(s, T::from_f64(sign))?;
                if shift == 0.0 {
                    s
                } else {
                    tape.shift(s, T::from_f64(shift))?
                }
            }
        });
    }
    if cols.len() == 1 {
        Ok(cols[0])
    } else {
        tape.concat(&cols, 1)
    }
}

/// The same link on plain values (for predictions), `z` of shape `[B, eta_dim]`.
pub fn natural_values(family: &Family, z: &Array2<f64>) -> Array2<f64> {
    let plan = plan(family);
    let mut eta = z.clone();
    for (j, step) in plan.iter().enumerate().take(eta.ncols()) {
        if let Some((sign, shift, reflect)) = *step {
            eta.column_mut(j)
                .mapv_inplace(|v| sign * softplus(if reflect { -v } else { v }) + shift);
        }
    }
    eta
}
