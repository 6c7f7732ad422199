//! A non-finite training loss explained by the sample behind it: which target row (file,
//! line, item, value) and family first gives a non-finite loss at the weights training
//! stopped at.

use super::{UserConfig, UserSamples};
use crate::{Evaluator, TrainError};
use efa_nn::params::Params;
use efa_tape::Tape;
use ndarray::ArrayD;

/// `err` with, when it is a [`TrainError::NonFinite`], the first sample of `train` (in file
/// order) whose loss is non-finite at `params` (the weights training stopped at: the failing
/// step is not taken): its target row's file, line, sequence, item and value, its family and
/// loss, and the model output. Each sample's loss is the objective on its own output row in
/// the training dtype. Other errors are returned unchanged.
pub fn explain_nonfinite(
    err: TrainError,
    eval: &Evaluator<'_>,
    params: &Params<f32>,
    train: &UserSamples,
    cfg: &UserConfig,
) -> TrainError {
    let TrainError::NonFinite(msg) = err else {
        return err;
    };
    let found = first_nonfinite(eval, params, train, cfg.train.eval_batch);
    let detail = match found {
        Ok(Some((i, loss, z))) => {
            let r = &train.targets[i];
            let family = cfg.family.list()[r.family].family().name();
            format!(
                "; the first training sample with a non-finite loss at these weights is {}:{}: \
                 seq `{}`, item {}, value {} (family {family}): loss {loss}, model output {z:?}",
                train.file.display(),
                r.line,
                r.seq,
                r.item,
                r.value
            )
        }
        Ok(None) => "; no single training sample has a non-finite loss at these weights (the \
                     minibatch's sum or a gradient overflowed)"
            .to_string(),
        Err(e) => format!("; looking for the sample behind it failed: {e}"),
    };
    TrainError::NonFinite(format!("{msg}{detail}"))
}

/// The first sample of `train` whose loss is non-finite at `params`, with that loss and the
/// model's output row.
pub fn first_nonfinite(
    eval: &Evaluator<'_>,
    params: &Params<f32>,
    train: &UserSamples,
    batch: usize,
) -> Result<Option<(usize, f64, Vec<f64>)>, TrainError> {
    let z = eval.predict(params, &train.samples, batch)?;
    for i in 0..train.samples.len() {
        let zi: Vec<f64> = z.row(i).to_vec();
        let targets = train.samples.select(&[i]).targets;
        let mut tape = Tape::<f32>::new();
        let row = ArrayD::from_shape_fn(ndarray::IxDyn(&[1, zi.len()]), |ix| zi[ix[1]] as f32);
        let v = tape.constant(row);
        let loss = match eval.objective.loss(&mut tape, v, &targets) {
            Ok(l) => tape
                .value(l)
                .iter()
                .next()
                .map_or(f64::NAN, |x| f64::from(*x)),
            Err(_) => f64::NAN,
        };
        if !loss.is_finite() || zi.iter().any(|x| !x.is_finite()) {
            return Ok(Some((i, loss, zi)));
        }
    }
    Ok(None)
}
