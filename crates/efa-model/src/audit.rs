//! Whole-model gradient audits: every parameter gradient of a model's loss on a batch,
//! computed by the tape in f64, against central finite differences (through `efa-check`).

use crate::batch::Samples;
use crate::objective::Objective;
use crate::{ModelConfig, ModelError};
use efa_check::{CheckOptions, Mode, Report};
use efa_tape::audit::audit;
use std::collections::HashMap;

/// Default audit options for whole models: parameters with at most 4,096 elements are
/// checked element by element, larger ones along 24 seeded random directions; tolerance
/// abs 1e-5, rel 1e-3; central differences with step 1e-6·max(1, |θ|).
pub fn default_options() -> CheckOptions {
    CheckOptions {
        mode: Mode::Auto {
            max_full: 4096,
            n: 24,
            seed: 17,
        },
        ..CheckOptions::default()
    }
}

/// Audits the mean loss of `model` on `batch` with respect to every parameter, at the
/// parameters `model.init::<f64>(seed)`.
pub fn audit_model(
    model: &ModelConfig,
    objective: &Objective,
    batch: &Samples,
    seed: u64,
    opts: &CheckOptions,
) -> Result<Report, ModelError> {
    model.validate()?;
    batch.validate("audit batch").map_err(ModelError::Batch)?;
    let params = model.init::<f64>(seed);
    let list: Vec<(&str, ndarray::ArrayD<f64>)> =
        params.iter().map(|(n, v)| (n, v.clone())).collect();
    let names: Vec<String> = list.iter().map(|(n, _)| n.to_string()).collect();
    let report = audit(
        &list,
        |tape, vars| {
            let map: HashMap<String, efa_tape::Var> =
                names.iter().cloned().zip(vars.iter().copied()).collect();
            let eta = model.forward(tape, &map, batch).map_err(to_tape)?;
            objective.loss(tape, eta, &batch.targets).map_err(to_tape)
        },
        opts,
    )?;
    Ok(report)
}

fn to_tape(e: ModelError) -> efa_tape::TapeError {
    match e {
        ModelError::Tape(t) => t,
        other => efa_tape::TapeError::new("model", other.to_string()),
    }
}
