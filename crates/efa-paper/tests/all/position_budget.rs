//! The position budget of micro-batches and evaluation chunks never binds for the paper's
//! experiments: every sample is at most 512 positions long, so their micro-batches are cut by
//! count alone, as before the budget existed.

use efa_model::batch::{length_order, micro_batches};
use efa_paper::{
    instacart, movielens, synthetic, temperature, DataOptions, ExperimentOptions, RunSettings,
};
use efa_train::evaluator::{eval_positions, MICRO_BATCH, MICRO_POSITIONS};

/// The synthetic experiment: every sample is at most 512 positions long, so micro-batches of
/// 128 and evaluation chunks of any size are never cut by the position budget and every result
/// is the same as with count-only batches.
#[test]
fn the_position_budget_never_binds_for_the_synthetic_experiment() {
    check(&[ExperimentOptions::Synthetic(synthetic::Options::default())]);
}

/// The same for the real-data experiments.
#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn the_position_budget_never_binds_for_the_real_data_experiments() {
    let data_options = DataOptions {
        data: Some(efa_testkit::paper_data()),
        ..Default::default()
    };
    let mut experiments = vec![ExperimentOptions::MovielensItems(movielens::ItemsOptions {
        data: data_options.clone(),
        ..Default::default()
    })];
    for variant in [movielens::Variant::V1, movielens::Variant::V2] {
        experiments.push(ExperimentOptions::MovielensRatings(
            movielens::RatingsOptions {
                variant,
                data: data_options.clone(),
                ..Default::default()
            },
        ));
    }
    experiments.push(ExperimentOptions::Instacart(instacart::Options {
        data: data_options.clone(),
        ..Default::default()
    }));
    for lag in [0, 2] {
        experiments.push(ExperimentOptions::Temperature(temperature::Options {
            lag,
            k: vec![1, 40],
            data: data_options.clone(),
            ..Default::default()
        }));
    }
    check(&experiments);
}

fn check(experiments: &[ExperimentOptions]) {
    let mut widest = 0;
    for e in experiments {
        let exp = e.build().unwrap();
        for spec in exp.runs(&RunSettings::default()).unwrap() {
            for s in [&spec.train, &spec.val, &spec.test] {
                let all: Vec<usize> = (0..s.len()).collect();
                let longest = s.lengths.iter().copied().max().unwrap_or(0);
                widest = widest.max(longest).max(s.width());
                assert!(
                    longest <= MICRO_POSITIONS / MICRO_BATCH && s.width() <= 512,
                    "{} {}",
                    exp.name(),
                    spec.setting()
                );
                let order = length_order(s, &all);
                let pieces = micro_batches(s, &order, MICRO_BATCH, MICRO_POSITIONS);
                assert_eq!(pieces.len(), s.len().div_ceil(MICRO_BATCH));
                let eb = spec.train_config.eval_batch;
                let pieces = micro_batches(s, &order, eb, eval_positions(eb));
                assert_eq!(pieces.len(), s.len().div_ceil(eb));
            }
        }
    }
    eprintln!(
        "{} experiment(s) checked; widest sample {widest} positions",
        experiments.len()
    );
}
