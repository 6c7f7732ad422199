//! A non-finite training loss explained by the sample behind it: which target row (file,
//! line, item, value) and family first gives a non-finite loss at the weights training
//! stopped at.

use super::{UserConfig, UserSamples};
use crate::{Evaluator, TrainError};
use efa_data::written;
use efa_nn::params::Params;
use efa_tape::Tape;
use ndarray::ArrayD;

/// `err` with, when it is a [`TrainError::NonFinite`], the first sample (in file order)
/// whose loss is non-finite at `params` (the weights training stopped at: the failing step is
/// not taken): of `train`, else of `valid` (a validation loss that is not finite while every
/// training sample's is): its target row's file, line, sequence, item and value, its family
/// and loss, and the model output. Each sample's loss is the objective on its own output row
/// in the training dtype. Other errors are returned unchanged.
pub fn explain_nonfinite(
    err: TrainError,
    eval: &Evaluator<'_>,
    params: &Params<f32>,
    (train, valid): (&UserSamples, &UserSamples),
    cfg: &UserConfig,
) -> TrainError {
    let TrainError::NonFinite(msg) = err else {
        return err;
    };
    let batch = cfg.train.eval_batch;
    let mut detail = String::new();
    for (split, what) in [(train, "training"), (valid, "validation")] {
        if what == "validation" && std::ptr::eq(split, train) {
            break;
        }
        match first_nonfinite(eval, params, split, batch) {
            Ok(Some(found)) => {
                detail = describe(found, split, what, cfg);
                break;
            }
            Ok(None) => {}
            Err(e) => {
                detail = format!("; looking for the sample behind it failed: {e}");
                break;
            }
        }
    }
    if detail.is_empty() {
        detail = "; no single training sample has a non-finite loss at these weights (the \
                  minibatch's sum or a gradient overflowed)"
            .to_string();
    }
    TrainError::NonFinite(format!("{msg}{detail}"))
}

/// Checks that `nll`, the mean loss of the split `split` (`what`: `"test"`, `"evaluation"`)
/// at `params`, is finite; otherwise a [`TrainError::NonFinite`] naming the split's first
/// sample whose loss is not finite (as [`explain_nonfinite`] does), instead of a mean written
/// as JSON `null`.
pub fn check_split_loss(
    nll: f64,
    what: &str,
    eval: &Evaluator<'_>,
    params: &Params<f32>,
    split: &UserSamples,
    cfg: &UserConfig,
) -> Result<f64, TrainError> {
    if nll.is_finite() {
        return Ok(nll);
    }
    let detail = match first_nonfinite(eval, params, split, cfg.train.eval_batch)? {
        Some(found) => describe(found, split, what, cfg),
        None => format!("; no single {what} sample has a non-finite loss (the sum overflowed)"),
    };
    Err(TrainError::NonFinite(format!(
        "{what} loss {nll} over {}{detail}",
        split.file.display()
    )))
}

/// `; the first {what} sample with a non-finite loss at these weights is file:line: …` for
/// the sample `found` of `split` ([`first_nonfinite`]).
fn describe(
    (i, loss, z): (usize, f64, Vec<f64>),
    split: &UserSamples,
    what: &str,
    cfg: &UserConfig,
) -> String {
    let r = &split.targets[i];
    let family = cfg.family.list()[r.family].family().name();
    // The item and value as written in the file (`1e38`, not its 39 digits).
    let item = written::integer(&split.file, r.line, "item", r.item);
    let value = written::real(&split.file, r.line, "value", r.value);
    format!(
        "; the first {what} sample with a non-finite loss at these weights is {}:{}: seq `{}`, \
         item {item}, value {value} (family {family}): loss {loss}, model output {z:?}",
        split.file.display(),
        r.line,
        r.seq,
    )
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
