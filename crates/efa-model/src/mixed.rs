//! The mixed-family nll of [`crate::Objective::MixedNll`], built from tape ops only (row
//! gather, column slice, the family's link, its nll, sums), so its gradient is the exact
//! reverse of its forward.

use crate::ModelError;
use efa_expfam::Family;
use efa_nn::TapeNn;
use efa_num::Real;
use efa_tape::{Tape, Var};
use ndarray::{Array2, ArrayD, IxDyn};

/// The rows of each distinct family, in order of first appearance.
pub fn family_groups(families: &[Family]) -> Vec<(Family, Vec<usize>)> {
    let mut groups: Vec<(Family, Vec<usize>)> = Vec::new();
    for (b, f) in families.iter().enumerate() {
        match groups.iter_mut().find(|(g, _)| g == f) {
            Some((_, rows)) => rows.push(b),
            None => groups.push((*f, vec![b])),
        }
    }
    groups
}

/// `Σ_f Σ_{b ∈ f} nll_f(y_b; link_f(z[b, ..dim_f])) / B` for `z` `[B, W]`: per family, its
/// rows gathered, the first `dim_f` columns sliced, the family's link and nll applied, the
/// rows summed; the family sums added in order of first appearance and divided by `B`.
///
/// # Errors
/// `y` or `families` not of `B` entries, a family wider than `W`, and the nll's errors
/// (support, domain).
pub fn mixed_nll<T: Real>(
    tape: &mut Tape<T>,
    z: Var,
    y: &[f64],
    families: &[Family],
) -> Result<Var, ModelError> {
    let shape = tape.try_value(z)?.shape().to_vec();
    let (b, w) = (shape[0], shape.get(1).copied().unwrap_or(0));
    if y.len() != b || families.len() != b || shape.len() != 2 {
        return Err(ModelError::Batch(format!(
            "mixed-family nll: η {shape:?} with {} observations and {} families",
            y.len(),
            families.len()
        )));
    }
    let mut total: Option<Var> = None;
    for (family, rows) in family_groups(families) {
        let d = family.eta_dim();
        if d > w {
            return Err(ModelError::Batch(format!(
                "family `{}` needs {d} natural parameters but η has {w} columns",
                family.name()
            )));
        }
        let ids = ArrayD::from_shape_vec(IxDyn(&[rows.len()]), rows.clone())
            .map_err(|e| ModelError::Batch(e.to_string()))?;
        let zf = tape.embedding(z, &ids)?;
        let zf = if d < w { tape.slice(zf, 1, 0, d)? } else { zf };
        let eta = tape.natural(&family, zf)?;
        let obs = Array2::from_shape_fn((rows.len(), 1), |(r, _)| T::from_f64(y[rows[r]]));
        let per_row = tape.nll(&family, eta, &obs, None)?;
        let sum = tape.sum_all(per_row)?;
        total = Some(match total {
            Some(t) => tape.add(t, sum)?,
            None => sum,
        });
    }
    let total = total.ok_or_else(|| ModelError::Batch("mixed-family nll of no rows".into()))?;
    Ok(tape.scale(total, T::from_f64(1.0 / b as f64))?)
}
