//! Whole-model gradient audits: every parameter gradient of a model's loss on a batch,
//! computed by the tape in f64, against central finite differences (through `efa-check`),
//! and an op-level audit of every fused node recorded on the model's tape (each op's
//! backward against finite differences of its own forward at its recorded inputs), so a
//! failure is localised to op, input index and element.

use crate::evaluator::Evaluator;
use crate::TrainError;
use efa_check::{CheckOptions, Mode, Report};
use efa_model::batch::Samples;
use efa_model::efa::ForwardPlan;
use efa_model::ModelError;
use efa_nn::params::{FromVars, Params};
use efa_tape::audit::{audit, FusedNodeReport};
use efa_tape::Tape;

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

/// The audit of one model on one batch.
#[derive(Debug)]
pub struct ModelAudit {
    /// The forward plan that was audited.
    pub plan: ForwardPlan,
    /// The loss at the audited parameters.
    pub loss: f64,
    /// Every parameter's gradient against finite differences.
    pub params: Report,
    /// Every fused node of the recorded tape, audited at its recorded inputs.
    pub fused: Vec<FusedNodeReport>,
}

impl ModelAudit {
    /// True iff every parameter and every fused node passed (a non-finite loss never passes).
    pub fn passed(&self) -> bool {
        self.params.passed() && self.fused.iter().all(FusedNodeReport::passed)
    }
}

/// Audits the mean loss of `eval`'s model on `batch` with respect to every parameter, at
/// `params`, with the evaluator's plan (or the automatic choice). A parameter that does not
/// reach the loss is an error unless the evaluator allows unused parameters.
pub fn audit_model(
    eval: &Evaluator<'_>,
    params: &Params<f64>,
    batch: &Samples,
    opts: &CheckOptions,
) -> Result<ModelAudit, TrainError> {
    eval.model.validate()?;
    batch
        .validate("audit batch")
        .map_err(|e| TrainError::Model(ModelError::Batch(e)))?;
    let plan = eval.model.plan_for(batch, eval.plan)?;
    let eval = eval.with_plan(Some(plan));
    let list: Vec<(&str, ndarray::ArrayD<f64>)> =
        params.iter().map(|(n, v)| (n, v.clone())).collect();
    // The op-level audit on one recorded tape at the given parameters.
    let mut tape = Tape::<f64>::new();
    let reg = eval.model.register(&mut tape, params)?;
    let (loss, _) = eval.build(&mut tape, &reg, batch)?;
    let loss = tape.value(loss).iter().next().copied().unwrap_or(f64::NAN);
    let fused = tape.audit_fused_nodes(opts_seed(opts), opts)?;
    let report = audit(
        &list,
        |tape, vars| {
            let typed = eval
                .model
                .declare(&mut FromVars::new(vars))
                .map_err(to_tape)?;
            let reg = efa_model::model::Registered {
                vars: typed,
                list: Vec::new(),
            };
            Ok(eval.build(tape, &reg, batch).map_err(to_tape)?.0)
        },
        opts,
    )?;
    Ok(ModelAudit {
        plan,
        loss,
        params: report,
        fused,
    })
}

/// The seed of the random directions in `opts` (0 in full mode), reused for the cotangents of
/// the op-level audit.
fn opts_seed(opts: &CheckOptions) -> u64 {
    match opts.mode {
        Mode::Auto { seed, .. } | Mode::Directions { seed, .. } => seed,
        Mode::Full => 0,
    }
}

fn to_tape(e: ModelError) -> efa_tape::TapeError {
    match e {
        ModelError::Tape(t) => t,
        other => efa_tape::TapeError::new("model", other.to_string()),
    }
}
