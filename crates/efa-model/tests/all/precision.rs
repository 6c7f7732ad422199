//! Error budgets (docs/design.md §3c) of every forward plan of the paper's models, against the
//! `general` plan computed in double-double (`efa_train::precision`), at initial, sharp
//! (every weight ×3), sharp-attention (query/key kernels ×40) and few-epoch-trained weights:
//!
//! * f64: every gradient within 1e-11 of its tensor's largest entry or 1e-13 of the model's
//!   largest gradient, the loss within 1e-11;
//! * f32: every plan's error per tensor at most twice the `general` plan's f32 error (or 16 ε
//!   of the tensor's scale).
//!
//! The models are the paper's architectures at their own widths on small seeded inputs (a few
//! cities and days, short baskets), so the double-double reference stays cheap.

use crate::common::{baskets, Case};
use efa_data::samples::Direction;
use efa_data::temperature::{City, TempDay};
use efa_model::ForwardPlan;
use efa_model::{ModelConfig, Objective, Params};
use efa_paper::movielens::{item_efa_config, item_fm_config, item_input};
use efa_paper::ModelKind;
use efa_paper::{synthetic, temperature};
use efa_train::precision::{
    precision_audit, precision_audit_with_floor, sharpen, sharpen_attention, PrecisionAudit,
};
use efa_train::{Evaluator, FitOptions, Threads, TrainConfig};

/// Six cities with the paper's coordinates' spread (the site MLP reads raw degrees).
fn cities() -> Vec<City> {
    [
        (33.5, -86.8),
        (35.4, -94.4),
        (36.7, -119.8),
        (40.1, -75.2),
        (47.6, -122.3),
        (29.8, -95.4),
    ]
    .iter()
    .enumerate()
    .map(|(i, &(lat, lon))| City {
        state: format!("S{i}"),
        city: format!("C{i}"),
        latitude: lat,
        longitude: lon,
    })
    .collect()
}

/// Four days of six cities' temperatures in °F (the paper's scale: 40–80), with `lags`
/// previous days each.
fn days(lags: usize) -> Vec<TempDay> {
    let t = |d: f64, k: f64| -> Vec<f64> {
        (0..6)
            .map(|c| 55.0 + 12.0 * ((c as f64) * 1.3 + d * 0.7 + k * 0.4).sin() - 2.0 * d)
            .collect()
    };
    (1..=4u32)
        .map(|day| TempDay {
            date: (2010, 10, day),
            temps: t(day as f64, 0.0),
            lags: (1..=lags).map(|l| t(day as f64, -(l as f64))).collect(),
        })
        .collect()
}

/// The paper's models: synthetic EFA and FM (uni, bi), the item EFA and FM (uni, bi), and
/// the temperature EFA with 1, 2 and 4 blocks and with lags 1 and 2.
fn paper_cases() -> Vec<Case> {
    let mut out = Vec::new();
    for dir in [Direction::Uni, Direction::Bi] {
        for kind in [ModelKind::Efa, ModelKind::Fm] {
            let (model, batch) = synthetic::audit_batch(dir, kind, 12).unwrap();
            out.push(Case {
                name: format!("synthetic {kind:?} {dir:?}"),
                model,
                objective: Objective::Mse,
                batch,
            });
        }
    }
    for uni in [true, false] {
        let b = baskets(5, 6, 12, 6);
        out.push(Case {
            name: format!("items EFA uni={uni}"),
            model: ModelConfig::Efa(item_efa_config(12, 6, uni)),
            objective: Objective::CrossEntropy,
            batch: item_input(&b, 12, 6, uni, true).unwrap(),
        });
        out.push(Case {
            name: format!("items FM uni={uni}"),
            model: ModelConfig::Fm(item_fm_config(12, uni)),
            objective: Objective::CrossEntropy,
            batch: item_input(&b, 12, 6, uni, false).unwrap(),
        });
    }
    for (layers, lag) in [(1, 0), (2, 0), (4, 0), (4, 1), (4, 2)] {
        let cfg = temperature::efa_config(&cities(), layers, lag);
        out.push(Case {
            name: format!("temperature L={layers} lag {lag}"),
            model: ModelConfig::Efa(cfg),
            objective: Objective::Mse,
            batch: temperature::efa_samples(&days(lag), 6).unwrap(),
        });
    }
    out
}

/// The case's initial weights trained for a few epochs on its own batch (f32, Adam).
fn trained(case: &Case) -> Params<f64> {
    let mut p = case.model.init::<f32>(0);
    let cfg = TrainConfig {
        lr: 3e-3,
        batch_size: case.batch.len(),
        max_epochs: 5,
        patience: 5,
        seed: 0,
        eval_batch: 64,
        batching: Default::default(),
    };
    let eval = Evaluator::new(&case.model, &case.objective);
    efa_train::fit(
        &eval,
        &mut p,
        &case.batch,
        &case.batch,
        &cfg,
        FitOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{}: training: {e}", case.name));
    p.cast::<f64>()
}

fn audit(case: &Case, p: &Params<f64>) -> PrecisionAudit {
    precision_audit(
        &case.model,
        &case.objective,
        p,
        &case.batch,
        &ForwardPlan::ALL,
        &Threads::new(2).unwrap(),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", case.name))
}

/// Which f64 budget a setting is held to.
#[derive(Clone, Copy, PartialEq)]
enum F64 {
    /// Every plan, `general` included, within 1e-11 of the tensor's largest entry or 1e-13 of
    /// the model's largest gradient.
    Budget,
    /// Every plan within that budget or twice the `general` plan's own error: at sharp weights
    /// the definition itself misses the budget on the first block's query and key kernels
    /// (sums that cancel a large common part of the keys and values), and a plan may not be
    /// less accurate than it.
    NoWorseThanGeneral,
}

/// The `general` plan's f64 error above which a tensor is not compared (under 8 digits).
const NO_DIGITS: f64 = 1e-8;

/// Every budget of every case at `weights`; a failure lists every tensor over its budget.
fn check(weights: &str, f64_rule: F64, of: impl Fn(&Case) -> Params<f64>) {
    let mut misses = Vec::new();
    let mut plans_run = 0;
    for case in paper_cases() {
        let a = audit(&case, &of(&case));
        assert!(a.reference_loss.is_finite(), "{}", case.name);
        plans_run += a.rows.len() / 2;
        let f64_misses = match f64_rule {
            F64::Budget => a.f64_misses(),
            F64::NoWorseThanGeneral => {
                for m in a.f64_misses().iter().filter(|m| m.plan == "general") {
                    eprintln!("{} ({weights}): the definition over budget: {m}", case.name);
                }
                a.f64_misses_beyond_general()
            }
        };
        // A tensor the definition itself cannot compute to 8 digits in f64 (the first block's
        // query and key kernels at sharp weights on these small inputs, down to no digits
        // where the exact gradient nearly vanishes) has no digits for plans to agree on.
        let general = a.row(Some(ForwardPlan::General), "f64");
        let noise: Vec<&str> = general.map_or(vec![], |g| {
            g.params
                .iter()
                .filter(|e| e.rel > NO_DIGITS)
                .map(|e| e.name.as_str())
                .collect()
        });
        for name in &noise {
            eprintln!(
                "{} ({weights}): {name}: the definition has under 8 digits in f64",
                case.name
            );
        }
        let slack = |m: &efa_train::precision::BudgetMiss| noise.contains(&m.name.as_str());
        misses.extend(
            f64_misses
                .into_iter()
                .chain(a.f32_misses())
                .filter(|m| !slack(m))
                .map(|m| format!("{} ({weights}): {m}", case.name)),
        );
    }
    assert!(plans_run > 25, "only {plans_run} plan audits ran");
    assert!(misses.is_empty(), "over budget:\n{}", misses.join("\n"));
}

#[test]
fn every_plan_is_within_budget_at_initial_weights() {
    check("init", F64::Budget, |c| c.model.init::<f64>(0));
}

#[test]
fn every_plan_is_within_budget_at_sharp_weights() {
    check("sharp", F64::NoWorseThanGeneral, |c| {
        sharpen(&c.model.init::<f64>(0))
    });
}

#[test]
fn every_plan_is_within_budget_at_sharp_attention_weights() {
    check("sharp-attention", F64::NoWorseThanGeneral, |c| {
        sharpen_attention(&c.model.init::<f64>(0))
    });
}

#[test]
fn every_plan_is_within_budget_at_trained_weights() {
    check("trained", F64::Budget, trained);
}

/// The f64 floor (the definition with every stored value rounded to f64, computed exactly) on
/// the temperature model at sharp weights: storage alone costs the first block's query and
/// key kernels digits (its error is not 0), but less than the f64 plans lose with their
/// arithmetic on top, on every tensor where they lose more than 1e-12; and judging against the
/// floor only ever removes misses.
#[test]
fn the_f64_floor_is_what_f64_storage_costs() {
    let case = paper_cases()
        .into_iter()
        .find(|c| c.name == "temperature L=2 lag 0")
        .expect("case");
    let p = sharpen(&case.model.init::<f64>(0));
    let threads = Threads::new(2).unwrap();
    let a = precision_audit_with_floor(
        &case.model,
        &case.objective,
        &p,
        &case.batch,
        &[ForwardPlan::General, ForwardPlan::FusedBlocks],
        &threads,
    )
    .unwrap();
    let floor = a.floor().expect("the floor row");
    let q = floor
        .params
        .iter()
        .find(|e| e.name == "block0.attn.q.w")
        .unwrap();
    assert!(
        q.rel > 1e-15,
        "storage costs the query kernel nothing? {q:?}"
    );
    for plan in [ForwardPlan::General, ForwardPlan::FusedBlocks] {
        let row = a.row(Some(plan), "f64").unwrap();
        for (f, g) in floor.params.iter().zip(&row.params) {
            if g.rel > 1e-12 {
                assert!(
                    f.max_abs <= g.max_abs,
                    "{plan} {}: floor {f:?}, plan {g:?}",
                    f.name
                );
            }
        }
    }
    let plain = precision_audit(
        &case.model,
        &case.objective,
        &p,
        &case.batch,
        &[ForwardPlan::General, ForwardPlan::FusedBlocks],
        &threads,
    )
    .unwrap();
    let key = |m: &efa_train::precision::BudgetMiss| format!("{} {} {}", m.plan, m.dtype, m.name);
    let without: Vec<String> = plain.f64_misses().iter().map(key).collect();
    for m in a.f64_misses() {
        assert!(
            without.contains(&key(&m)),
            "a miss only with the floor: {m}"
        );
    }
}

/// The temperature model with 4 blocks and 2 lags on the first 16 training samples of the
/// paper's data, at sharp attention: the second block's feed-forward layer has a ReLU input
/// within f32 round-off of its kink (5e-8 of its layer's largest). While the shared-context
/// op formed its scores with a rounding per product and per sum, `fused-blocks` put it on the
/// other side of the kink in f32 and `general` did not, so `fused-blocks`' f32 error on that
/// layer's gradients was over 10× `general`'s; the audit's `f32-kinks` row measures what such
/// sides are worth, and with it every plan was within budget (without it, this audit failed on
/// `block1.ffn1.w` and `.b`). With one fused multiply-add per score term, both plans put the
/// input on the same side here: every plan is within budget, and where an f32 tensor would
/// not be without the kink row, the kink row accounts for the difference.
#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn a_relu_input_at_its_kink_in_f32_is_not_a_precision_loss() {
    let data = efa_paper::temperature::load(&efa_testkit::paper_data(), 2).unwrap();
    let tc = efa_paper::temperature::efa_train_config(2, Some(1), 0);
    let spec = efa_paper::temperature::efa_spec(&data, 4, 2, tc, 0).unwrap();
    let idx: Vec<usize> = (0..16).collect();
    let batch = spec.train.select(&idx);
    let p = sharpen_attention(&spec.model.init::<f64>(0));
    let a = precision_audit(
        &spec.model,
        &spec.objective,
        &p,
        &batch,
        &[ForwardPlan::General, ForwardPlan::FusedBlocks],
        &Threads::new(2).unwrap(),
    )
    .unwrap();
    let at = |row: &efa_train::precision::PrecisionRow, name: &str| {
        row.params.iter().find(|e| e.name == name).unwrap().rel
    };
    let general = a.row(Some(ForwardPlan::General), "f32").unwrap();
    let fused = a.row(Some(ForwardPlan::FusedBlocks), "f32").unwrap();
    for name in ["block1.ffn1.w", "block1.ffn1.b"] {
        let (g, f) = (at(general, name), at(fused, name));
        // Within twice `general`, or (a side of the kink apart) within the kink row's spread.
        let k = a.kinks().map_or(0.0, |kinks| at(kinks, name));
        assert!(
            f <= 2.0 * g + k,
            "{name}: fused {f:.2e}, general {g:.2e}, kinks {k:.2e}"
        );
    }
    let misses: Vec<String> = a.f32_misses().iter().map(|m| m.to_string()).collect();
    assert!(misses.is_empty(), "over budget:\n{}", misses.join("\n"));
}

/// The `tabled` plan computes the temperature models' forward with the `general` plan's bits
/// (its tables hold the rows the general plan computes at each position) and differs in the
/// backward only where it sums a table row's terms (the first block's projection kernels and
/// the input MLPs) or sums over the target rows only (the last block's kernels), by a few
/// ulps. The gradients of the head and the blocks in between are the general plan's, bit for
/// bit, in f32 and f64 at sharp weights: the last block must add the terms of its input's
/// gradient in the general plan's order, or that ulp reaches percents of the input MLPs'
/// gradients through the sharp attention below it (the f32 gap `tabled` had against `general`
/// at sharp weights).
#[test]
fn tabled_gradients_are_the_general_plans_bits_above_the_first_block() {
    fn run<T: efa_num::Real>(case: &Case, p: &Params<f64>) {
        let threads = Threads::new(2).unwrap();
        let p = p.cast::<T>();
        let eval = |plan| {
            Evaluator::new(&case.model, &case.objective)
                .with_plan(Some(plan))
                .with_threads(&threads)
        };
        let (lg, gg) = eval(ForwardPlan::General)
            .loss_and_grads::<T>(&p, &case.batch)
            .unwrap();
        let (lt, gt) = eval(ForwardPlan::Tabled)
            .loss_and_grads::<T>(&p, &case.batch)
            .unwrap();
        assert_eq!(lg.to_bits(), lt.to_bits(), "{}: loss", case.name);
        let blocks = p.iter().filter(|(n, _)| n.ends_with(".attn.q.w")).count();
        for ((name, _), (g, t)) in p.iter().zip(gg.iter().zip(&gt)) {
            // Bit for bit: the head and the blocks between the first and the last (the last
            // block's kernels sum over the target rows only, the general plan's over every
            // row with zeros elsewhere, which changes the blocks of the sum in f64).
            let block = name
                .strip_prefix("block")
                .and_then(|r| r.split('.').next())
                .and_then(|l| l.parse::<usize>().ok());
            let exact = match block {
                Some(l) => l > 0 && l + 1 < blocks,
                None => name.starts_with("head") || name.starts_with("out."),
            };
            let scale = g.iter().fold(0.0f64, |m, x| m.max(x.to_f64().abs()));
            let worst = g
                .iter()
                .zip(t)
                .fold(0.0f64, |m, (a, b)| m.max((a.to_f64() - b.to_f64()).abs()));
            // The first block's query and key kernels sum terms that cancel to under 8 digits
            // of the definition itself at these weights (see `check`): any other order of
            // the same sum moves them by far more than a few ulps of the result.
            let cancels = name.starts_with("block0.attn.q.") || name.starts_with("block0.attn.k.");
            if cancels {
                continue;
            }
            if !exact {
                let ulps = if scale > 0.0 {
                    worst / scale / T::EPSILON.to_f64()
                } else {
                    worst
                };
                assert!(
                    ulps <= 16.0,
                    "{} {name} {}: {ulps:.1} ulps",
                    case.name,
                    T::NAME
                );
            } else {
                assert!(
                    g.iter()
                        .zip(t)
                        .all(|(a, b)| a.to_bits_u64() == b.to_bits_u64()),
                    "{} {name}: differs by {:.3e} of its largest entry",
                    case.name,
                    worst / scale
                );
            }
        }
    }
    for case in paper_cases()
        .iter()
        .filter(|c| c.name.starts_with("temperature"))
    {
        let p = sharpen(&case.model.init::<f64>(0));
        run::<f32>(case, &p);
        run::<f64>(case, &p);
    }
}
