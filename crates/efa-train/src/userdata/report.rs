//! What `efa evaluate` and `efa predict` report per target row and per family: the natural
//! parameter, mean and variance of each target under its row's family, and the mean nll
//! (and, for Gaussian families, the mean squared error of the predicted mean).

use super::{Row, UserConfig};
use efa_expfam::{ExpfamError, Family};
use ndarray::Array2;

/// The prediction of one target row under its family.
#[derive(Clone, Debug, PartialEq)]
pub struct RowPrediction {
    /// The row's family.
    pub family: Family,
    /// η (the family's `eta_dim` values).
    pub eta: Vec<f64>,
    /// ∇A(η): the mean of each sufficient statistic.
    pub mean: Vec<f64>,
    /// diag ∇²A(η): the variance of each sufficient statistic.
    pub variance: Vec<f64>,
    /// nll(y; η), fully normalised, in f64.
    pub nll: f64,
}

/// The prediction of target row `row` (index `i` in its batch, for errors) from the model
/// output `z` (one row of [`crate::Evaluator::predict`]), under the configuration's loss and
/// the row's family.
pub fn predict_row(
    cfg: &UserConfig,
    row: &Row,
    z: &[f64],
    i: usize,
) -> Result<RowPrediction, ExpfamError> {
    let family = cfg.family.list()[row.family].family();
    let d = family.eta_dim();
    let eta = cfg.loss.natural(&family, z);
    let mut mean = vec![0.0; d];
    let mut hess = vec![0.0; d * d];
    family.mean(&eta, &mut mean, i)?;
    family.hessian(&eta, &mut hess, i)?;
    let nll = family.nll(&[row.value], &eta, i)?;
    Ok(RowPrediction {
        family,
        variance: (0..d).map(|k| hess[k * d + k]).collect(),
        eta,
        mean,
        nll,
    })
}

/// One family's share of a split.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FamilyReport {
    /// The family's name.
    pub family: String,
    /// Its items (`[first, last]`), or `None` for a family of every item.
    pub items: Option<[usize; 2]>,
    /// Target rows of the family.
    pub samples: usize,
    /// Mean nll of those rows (f64, from the predicted η).
    pub mean_nll: f64,
    /// Gaussian families: mean squared error of the predicted mean, `mean (y − E[y])²`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mse_of_mean: Option<f64>,
}

/// Per configured family (in configuration order, families without rows left out): the
/// number of target rows, their mean nll, and for Gaussian families the MSE of the mean.
/// `preds[i]` is the prediction of `targets[i]`.
pub fn family_reports(
    cfg: &UserConfig,
    targets: &[Row],
    preds: &[RowPrediction],
) -> Vec<FamilyReport> {
    let ranges = match &cfg.family {
        super::Families::Ranges(r) => r.iter().map(|r| Some(r.items)).collect(),
        super::Families::All(_) => vec![None],
    };
    let list = cfg.family.list();
    let mut out = Vec::new();
    for (k, spec) in list.iter().enumerate() {
        let rows: Vec<usize> = (0..targets.len())
            .filter(|&i| targets[i].family == k)
            .collect();
        if rows.is_empty() {
            continue;
        }
        let n = rows.len() as f64;
        let family = spec.family();
        let gaussian = matches!(family, Family::Gaussian | Family::GaussianKnownVar { .. });
        out.push(FamilyReport {
            family: family.name().to_string(),
            items: ranges[k],
            samples: rows.len(),
            mean_nll: rows.iter().map(|&i| preds[i].nll).sum::<f64>() / n,
            mse_of_mean: gaussian.then(|| {
                rows.iter()
                    .map(|&i| (targets[i].value - preds[i].mean[0]).powi(2))
                    .sum::<f64>()
                    / n
            }),
        });
    }
    out
}

/// Every target row's prediction from the model outputs `z` (`[n, out_dim]`, row `i` for
/// `targets[i]`); the error names the row's index.
pub fn predict_rows(
    cfg: &UserConfig,
    targets: &[Row],
    z: &Array2<f64>,
) -> Result<Vec<RowPrediction>, (usize, ExpfamError)> {
    targets
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let zi: Vec<f64> = z.row(i).to_vec();
            predict_row(cfg, r, &zi, i).map_err(|e| (i, e))
        })
        .collect()
}
