//! Whole-model gradient audits (`efa audit synthetic`): every parameter gradient of the
//! synthetic experiment's EFA and FM models, both directions, built in f64 on a small batch,
//! against central finite differences.

use efa::check::{CheckOptions, Mode};
use efa::data::samples::Direction;
use efa::model::Objective;
use efa::paper::{synthetic, ModelKind};
use efa::train::audit::{audit_model, default_options};
use efa::train::Evaluator;

#[test]
fn synthetic_models_pass_the_finite_difference_audit_in_both_directions() {
    for dir in [Direction::Uni, Direction::Bi] {
        for kind in [ModelKind::Fm, ModelKind::Efa] {
            let (model, batch) = synthetic::audit_batch(dir, kind, 6).unwrap();
            // Tensors up to 640 elements element by element, larger ones along 24 seeded
            // random directions (the CLI audits up to 4,096 elements in full).
            let opts = CheckOptions {
                mode: Mode::Auto {
                    max_full: 640,
                    n: 24,
                    seed: 3,
                },
                ..default_options()
            };
            let params = model.init::<f64>(0);
            let eval = Evaluator::new(&model, &Objective::Mse);
            let report = audit_model(&eval, &params, &batch, &opts).unwrap().params;
            assert!(report.passed(), "{dir:?} {kind:?}:\n{report}");
            // Every parameter tensor was audited, with real comparisons.
            assert_eq!(report.params.len(), params.len());
            assert!(report.params.iter().all(|p| p.checked > 0));
        }
    }
}
