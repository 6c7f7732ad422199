//! Forward plans: every plan that applies to a model gives the general plan's loss and every
//! parameter gradient on the same batch, in f64 to 1e-12 (the paper's two-block models, the
//! item models with and without sequence ids, the temperature model, norm and feed-forward
//! variants); the automatic choice is documented and checked; a parameter that does not
//! reach the loss is an error naming it and the plan, in every plan, unless allowed.

use efa_data::samples::Direction;
use efa_model::batch::{Samples, Targets};
use efa_model::{
    EfaConfig, FmConfig, ForwardPlan, ModelConfig, ModelError, ModelVars, Norm, Objective, Params,
    Positions, ValueTable, Visibility,
};
use efa_paper::movielens::{item_efa_config, item_input};
use efa_paper::ModelKind;
use efa_paper::{synthetic, temperature};
use efa_train::{Evaluator, TrainError};
use ndarray::{Array2, ArrayD};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{baskets, cities, days, scaled, Case};

/// A causal (or bidirectional) rating-style model with every block option.
fn rich(norm: Norm, layers: usize, ffn: Option<usize>, direction: Visibility) -> Case {
    let cfg = EfaConfig {
        items: 6,
        item_dim: 5,
        zero_padding: true,
        values: Some(ValueTable { rows: 7, dim: 3 }),
        positions: Some(Positions {
            max_len: 6,
            only_valid: true,
        }),
        layers,
        heads: 2,
        key_dim: 3,
        ffn,
        norm,
        ln_eps: 1e-3,
        head_hidden: vec![4],
        out_dim: 1,
        out_bias: true,
        direction,
        continuous: None,
    };
    let mut rng = StdRng::seed_from_u64(4);
    let (mut tokens, mut values, mut lengths, mut pred, mut y, mut group) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for g in 0..4 {
        let len = rng.random_range(2..=6);
        let t: Vec<usize> = (0..6)
            .map(|j| if j < len { rng.random_range(1..6) } else { 0 })
            .collect();
        let v: Vec<usize> = (0..6)
            .map(|j| if j < len { rng.random_range(1..6) } else { 0 })
            .collect();
        for i in 0..len {
            let mut vi = v.clone();
            vi[i] = 6;
            tokens.extend(&t);
            values.extend(vi);
            lengths.push(len);
            pred.push(i);
            y.push(v[i] as f64 - 2.5);
            group.push(g);
        }
    }
    let n = lengths.len();
    Case {
        name: format!("rich {norm:?} L={layers} ffn={ffn:?} {direction:?}"),
        model: ModelConfig::Efa(cfg),
        objective: Objective::Mse,
        batch: Samples {
            tokens: Array2::from_shape_vec((n, 6), tokens).unwrap(),
            values: Some(Array2::from_shape_vec((n, 6), values).unwrap()),
            weights: None,
            center: None,
            lengths,
            pred_idx: pred,
            targets: Targets::Real(y),
            group: Some(group),
        },
    }
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    // The paper's synthetic EFAs (two blocks, value table, positions everywhere).
    for (uni, dir) in [(true, Direction::Uni), (false, Direction::Bi)] {
        let (model, batch) = synthetic::audit_batch(dir, ModelKind::Efa, 10).unwrap();
        out.push(Case {
            name: format!("synthetic uni={uni}"),
            model,
            objective: Objective::Mse,
            batch,
        });
    }
    // The paper's item EFAs (zeroed padding, positions at valid tokens), causal ones with
    // sequence ids.
    for uni in [true, false] {
        let b = baskets(1, 6, 9, 7);
        out.push(Case {
            name: format!("item uni={uni}"),
            model: ModelConfig::Efa(item_efa_config(9, 7, uni)),
            objective: Objective::CrossEntropy,
            batch: item_input(&b, 9, 7, uni, true).unwrap(),
        });
    }
    // The temperature EFA (continuous inputs, post-norm, feed-forward), with and without lags,
    // at reduced widths: one block (the last block is the first), two, three and four blocks,
    // lag 0, 1 and 2 (8 and 12 positions). (One block with lag 2 is left out: at these
    // doubled weights its gradient is ill-conditioned — a 1e-15 relative change of every
    // parameter moves the general plan's own gradient by 1.2e-12 of its largest entry — so
    // plans agree only to that; it is covered by the loop reference instead.)
    for (layers, lag) in [(1, 0), (2, 1), (3, 0), (4, 2)] {
        let mut c = temperature::efa_config(&cities(), layers, lag);
        (c.item_dim, c.key_dim, c.ffn, c.head_hidden) = (8, 4, Some(8), vec![8, 4]);
        let inputs = c.continuous.as_mut().unwrap();
        (inputs.hidden, inputs.dim, inputs.fuse) = (16, 8, 8);
        out.push(Case {
            name: format!("temperature L={layers} lag {lag}"),
            model: ModelConfig::Efa(c),
            objective: Objective::Mse,
            batch: temperature::efa_samples(&days(lag), 4).unwrap(),
        });
    }
    // Partial days: three, three and four samples per day (sequence ids kept by `select`), one
    // of them twice (two samples with the same target), so the first block's attention runs
    // once per day with leave-one-out sums over days whose targets are not all present.
    {
        let mut c = temperature::efa_config(&cities(), 2, 1);
        (c.item_dim, c.key_dim, c.ffn, c.head_hidden) = (8, 4, Some(8), vec![8, 4]);
        let inputs = c.continuous.as_mut().unwrap();
        (inputs.hidden, inputs.dim, inputs.fuse) = (16, 8, 8);
        let all = temperature::efa_samples(&days(1), 4).unwrap();
        out.push(Case {
            name: "temperature L=2 lag 1 partial days".into(),
            model: ModelConfig::Efa(c),
            objective: Objective::Mse,
            batch: all.select(&[0, 2, 3, 5, 6, 7, 8, 9, 9, 11]),
        });
    }
    // Your own data's general model: continuous inputs with a lag, a learned row per item
    // (`item_embedding`), and a family per target (mixed-family nll over a 2-wide η). (Two
    // blocks are left out: at these doubled weights the site MLP's raw-degree inputs make its
    // kernel's gradient a sum of terms ~100× the result, and plans agree only to 1.2e-12 of
    // the largest entry; one and three blocks stay within 1e-12.)
    for layers in [1, 3] {
        let mut c = temperature::efa_config(&cities(), layers, 1);
        (c.item_dim, c.key_dim, c.ffn, c.head_hidden) = (8, 4, Some(8), vec![8]);
        (c.items, c.out_dim) = (4, 2);
        let inputs = c.continuous.as_mut().unwrap();
        (inputs.hidden, inputs.dim, inputs.fuse) = (16, 8, 8);
        inputs.item_embedding = true;
        let mut batch = temperature::efa_samples(&days(1), 4).unwrap();
        let Targets::Real(y) = &batch.targets else {
            unreachable!()
        };
        use efa_expfam::Family;
        let (y, families) = y
            .iter()
            .enumerate()
            .map(|(r, &t)| match r % 3 {
                0 => (t, Family::Gaussian),
                1 => ((r % 2) as f64, Family::Bernoulli),
                _ => ((r % 4) as f64, Family::Poisson),
            })
            .unzip();
        batch.targets = Targets::Mixed { y, families };
        out.push(Case {
            name: format!("mixed families L={layers} lag 1 item rows"),
            model: ModelConfig::Efa(c),
            objective: Objective::MixedNll,
            batch,
        });
    }
    // Norm, feed-forward and depth variants, causal and bidirectional.
    out.push(rich(Norm::None, 2, None, Visibility::Causal));
    out.push(rich(Norm::Post, 2, Some(7), Visibility::Causal));
    out.push(rich(Norm::Pre, 3, Some(7), Visibility::Causal));
    out.push(rich(Norm::Pre, 1, None, Visibility::CausalPadding));
    out.push(rich(Norm::Post, 2, None, Visibility::Padding));
    // Post-norm with feed-forward and key padding (sequences of 2–6 of 6 positions).
    out.push(rich(Norm::Post, 3, Some(7), Visibility::Padding));
    out.push(rich(Norm::Post, 1, Some(7), Visibility::Padding));
    out.push(rich(Norm::None, 0, None, Visibility::Padding));
    out
}

type LossGrads = (f64, Vec<ArrayD<f64>>);

fn run(case: &Case, p: &Params<f64>, plan: ForwardPlan) -> LossGrads {
    let g = Evaluator::new(&case.model, &case.objective)
        .with_plan(Some(plan))
        .micro(p, &case.batch)
        .unwrap_or_else(|e| panic!("{} plan {plan}: {e}", case.name));
    assert_eq!(g.plan, plan);
    (g.loss, g.grads)
}

#[test]
fn every_applicable_plan_equals_the_general_plan() {
    let mut checked = Vec::new();
    for case in cases() {
        let p = scaled(&case.model.init::<f64>(3), 2.0);
        let general = run(&case, &p, ForwardPlan::General);
        assert!(general.0.is_finite(), "{}", case.name);
        // The definition in double-double: where the f64 general plan's own round-off exceeds
        // the tolerance (an entry whose exact gradient is 0 at 1.2e-12 of the largest on AVX2),
        // a plan may be as far from the definition as the f64 general plan is.
        let exact: Vec<ArrayD<f64>> = Evaluator::new(&case.model, &case.objective)
            .with_plan(Some(ForwardPlan::General))
            .micro(&p.cast::<efa_num::Dd>(), &case.batch)
            .unwrap_or_else(|e| panic!("{} double-double: {e}", case.name))
            .grads
            .iter()
            .map(|g| g.mapv(efa_num::Real::to_f64))
            .collect();
        for plan in ForwardPlan::ALL {
            if plan == ForwardPlan::General || case.model.plan_for(&case.batch, Some(plan)).is_err()
            {
                continue;
            }
            let (loss, grads) = run(&case, &p, plan);
            let tol = |w: f64| 1e-12 * w.abs().max(1.0);
            assert!(
                (loss - general.0).abs() <= tol(general.0),
                "{} plan {plan}: loss {loss} vs general {}",
                case.name,
                general.0
            );
            // Gradients agree to 1e-12 relative to the model's largest gradient entry. The
            // round-off of a backward sum is relative to the size of its terms, not of the
            // result: a tensor whose gradient is small through cancellation (the temperature
            // model's first-block query and key kernels under nearly uniform attention, whose
            // score gradients P∘(dP − D) cancel) carries absolute errors of the terms' size,
            // while its forward η is bitwise the same in both plans.
            let scale = general
                .1
                .iter()
                .flat_map(|g| g.iter())
                .fold(0.0f64, |m, x| m.max(x.abs()));
            let mut nonzero = 0;
            for ((name, _), ((g, w), x)) in p.iter().zip(grads.iter().zip(&general.1).zip(&exact)) {
                assert_eq!(g.shape(), w.shape(), "{name}");
                for (i, ((a, b), e)) in g.iter().zip(w.iter()).zip(x.iter()).enumerate() {
                    assert!(
                        (a - b).abs() <= tol(scale) || (a - e).abs() <= (b - e).abs(),
                        "{} plan {plan}: {name}[{i}] = {a}, general {b} (largest entry {scale})",
                        case.name
                    );
                    nonzero += usize::from(*b != 0.0);
                }
            }
            assert!(nonzero > 50, "{} plan {plan}: real gradients", case.name);
            checked.push((case.name.clone(), plan));
        }
    }
    // The comparisons that matter ran: the fold on the paper's two-block models, the query
    // stream on causal models with sequence ids, the tabled plan on the temperature model.
    let ran = |name: &str, plan| checked.iter().any(|(n, p)| n == name && *p == plan);
    assert!(ran("synthetic uni=false", ForwardPlan::TwoBlockFold));
    assert!(ran("item uni=true", ForwardPlan::TwoBlockFold));
    assert!(ran("item uni=true", ForwardPlan::QueryStream));
    assert!(ran("temperature L=2 lag 1", ForwardPlan::Tabled));
    assert!(ran(
        "mixed families L=3 lag 1 item rows",
        ForwardPlan::Tabled
    ));
    assert!(ran(
        "mixed families L=1 lag 1 item rows",
        ForwardPlan::FusedBlocks
    ));
    for name in [
        "temperature L=1 lag 0",
        "temperature L=2 lag 1",
        "temperature L=3 lag 0",
        "temperature L=4 lag 2",
        "temperature L=2 lag 1 partial days",
        "rich Post L=3 ffn=Some(7) Padding",
        "rich Post L=1 ffn=Some(7) Padding",
    ] {
        assert!(ran(name, ForwardPlan::FusedBlocks), "{name}");
    }
    assert!(ran(
        "rich Pre L=3 ffn=Some(7) Causal",
        ForwardPlan::QueryStream
    ));
    assert!(checked.len() >= 20, "{checked:?}");
}

/// The temperature cases of two blocks or more run their first block's attention once per day
/// (one `shared_context_attention` node), partial days included; with one block (the first is
/// the last, at the target rows only) or without sequence ids they do not.
#[test]
fn days_with_several_targets_share_the_first_block() {
    let shared = |case: &Case| {
        let p = case.model.init::<f64>(1);
        let mut tape = efa_tape::Tape::<f64>::new();
        let reg = case.model.register(&mut tape, &p).unwrap();
        let plan = Some(ForwardPlan::FusedBlocks);
        case.model
            .forward_with(&mut tape, &reg.vars, &case.batch, plan)
            .unwrap();
        tape.dump().contains("shared_context_attention")
    };
    let by_name = |n: &str| cases().into_iter().find(|c| c.name == n).unwrap();
    for name in [
        "temperature L=2 lag 1",
        "temperature L=3 lag 0",
        "temperature L=4 lag 2",
        "temperature L=2 lag 1 partial days",
    ] {
        assert!(shared(&by_name(name)), "{name}");
    }
    assert!(!shared(&by_name("temperature L=1 lag 0")));
    let mut case = by_name("temperature L=2 lag 1");
    case.batch.group = None;
    assert!(!shared(&case));
}

#[test]
fn the_automatic_choice_follows_its_documented_rule() {
    let t_batch = || {
        cases()
            .into_iter()
            .find(|c| c.name == "rich Post L=2 ffn=Some(7) Causal")
            .unwrap()
            .batch
    };
    let by_name = |n: &str| cases().into_iter().find(|c| c.name == n).unwrap();
    let choose = |c: &Case| c.model.plan_for(&c.batch, None).unwrap();
    // Two blocks without norm or feed-forward: the fold.
    assert_eq!(
        choose(&by_name("synthetic uni=true")),
        ForwardPlan::TwoBlockFold
    );
    // Causal with sequence ids holding ≥ 2 targets each on average: the query stream.
    assert_eq!(choose(&by_name("item uni=true")), ForwardPlan::QueryStream);
    // ... but not when most sequences hold a single target of the batch.
    let mut c = by_name("item uni=true");
    let firsts: Vec<usize> = (0..c.batch.len())
        .filter(|&i| c.batch.pred_idx[i] == 0)
        .collect();
    c.batch = c.batch.select(&firsts);
    assert_eq!(choose(&c), ForwardPlan::TwoBlockFold);
    // Post-norm with a feed-forward block, padding-only attention and at least two blocks:
    // the fused blocks; with one block (queries at the target rows only) the tabled plan.
    assert_eq!(
        choose(&by_name("temperature L=2 lag 1")),
        ForwardPlan::FusedBlocks
    );
    assert_eq!(
        choose(&by_name("temperature L=1 lag 0")),
        ForwardPlan::Tabled
    );
    assert_eq!(
        choose(&by_name("rich Post L=1 ffn=Some(7) Padding")),
        ForwardPlan::Tabled
    );
    assert_eq!(
        choose(&by_name("rich Post L=3 ffn=Some(7) Padding")),
        ForwardPlan::FusedBlocks
    );
    let e = by_name("rich Post L=2 ffn=Some(7) Causal")
        .model
        .plan_for(&t_batch(), Some(ForwardPlan::FusedBlocks))
        .unwrap_err()
        .to_string();
    assert!(e.contains("direction = padding"), "{e}");
    // Everything else: tabled; the general plan is never chosen.
    assert_eq!(
        choose(&by_name("rich Post L=2 ffn=None Padding")),
        ForwardPlan::Tabled
    );
    // A forced plan that does not apply is an error saying why.
    let t = by_name("temperature L=2 lag 1");
    let e = t
        .model
        .plan_for(&t.batch, Some(ForwardPlan::QueryStream))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`query-stream` does not apply") && e.contains("causal"),
        "{e}"
    );
    let e = t
        .model
        .plan_for(&t.batch, Some(ForwardPlan::TwoBlockFold))
        .unwrap_err()
        .to_string();
    assert!(e.contains("norm = none"), "{e}");
    let fm = ModelConfig::Fm(FmConfig::Rating { items: 4, dim: 2 });
    assert_eq!(fm.plan_for(&t.batch, None).unwrap(), ForwardPlan::General);
    assert!(fm.plan_for(&t.batch, Some(ForwardPlan::Tabled)).is_err());
}

/// Builds the loss with `plant` applied to the typed handles, then collects the gradients.
fn planted(
    case: &Case,
    plan: ForwardPlan,
    allow: bool,
    plant: impl Fn(&mut ModelVars),
) -> Result<Vec<ArrayD<f64>>, TrainError> {
    let p = case.model.init::<f64>(2);
    let eval = Evaluator::new(&case.model, &case.objective)
        .with_plan(Some(plan))
        .with_allow_unused(allow);
    let mut tape = efa_tape::Tape::new();
    let mut reg = case.model.register(&mut tape, &p)?;
    plant(&mut reg.vars);
    let (loss, used) = eval.build(&mut tape, &reg, &case.batch)?;
    assert_eq!(used, plan);
    let grads = tape.backward(loss).map_err(ModelError::from)?;
    eval.collect(&tape, &grads, &reg, plan)
}

#[test]
fn a_disconnected_parameter_is_an_error_naming_it_and_the_plan_in_every_plan() {
    // The forward reads block 0's key kernel where it should read its query kernel, so the
    // query kernel never reaches the loss (its finite-difference derivative is zero too: only
    // this check can see the bug).
    let reads_k_for_q = |v: &mut ModelVars| {
        if let ModelVars::Efa(e) = v {
            e.blocks[0].attn.q.w = e.blocks[0].attn.k.w;
        }
    };
    let mut planted_in = Vec::new();
    for case in cases() {
        let ModelConfig::Efa(cfg) = &case.model else {
            continue;
        };
        if cfg.layers == 0 {
            continue;
        }
        for plan in ForwardPlan::ALL {
            if case.model.plan_for(&case.batch, Some(plan)).is_err() {
                continue;
            }
            let e = planted(&case, plan, false, reads_k_for_q).unwrap_err();
            assert!(
                matches!(&e, TrainError::Model(ModelError::Unused { param, .. })
                    if param == "block0.attn.q.w"),
                "{}: {e}",
                case.name
            );
            let msg = e.to_string();
            assert!(
                msg.contains("`block0.attn.q.w` does not reach the loss")
                    && msg.contains(&format!("forward plan `{plan}`")),
                "{} plan {plan}: {msg}",
                case.name
            );
            // The explicit opt-in gives it a zero gradient and keeps every other one.
            let g = planted(&case, plan, true, reads_k_for_q).unwrap();
            let k = case
                .model
                .layout()
                .entries
                .iter()
                .position(|(n, _)| n == "block0.attn.q.w")
                .unwrap();
            assert!(g[k].iter().all(|&x| x == 0.0));
            planted_in.push(plan);
        }
    }
    for plan in ForwardPlan::ALL {
        assert!(planted_in.contains(&plan), "no case exercised {plan}");
    }
    // The factor model's single forward: ρ read where α should be.
    let (model, batch) = synthetic::audit_batch(Direction::Uni, ModelKind::Fm, 8).unwrap();
    let fm = Case {
        name: "fm".into(),
        model,
        objective: Objective::Mse,
        batch,
    };
    let e = planted(&fm, ForwardPlan::General, false, |v| {
        if let ModelVars::Fm(efa_model::fm::FmVars::Rating { alpha, rho }) = v {
            *alpha = *rho;
        }
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("`alpha` does not reach the loss in forward plan `general`"),
        "{e}"
    );
    // Without a planted bug every parameter reaches the loss.
    assert!(planted(&fm, ForwardPlan::General, false, |_| {}).is_ok());
}

#[test]
fn a_parameter_set_that_does_not_match_the_declaration_is_an_error_naming_it() {
    let model = ModelConfig::Efa(item_efa_config(4, 3, false));
    let p = model.init::<f64>(0);
    // A parameter of the wrong shape.
    let mut bad = Params::new();
    for (name, v) in p.iter() {
        let v = if name == "block1.attn.v.w" {
            ArrayD::zeros(ndarray::IxDyn(&[2, 2]))
        } else {
            v.clone()
        };
        bad.insert(name, v);
    }
    let e = model
        .register(&mut efa_tape::Tape::<f64>::new(), &bad)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("declares `block1.attn.v.w` [32, 32]") && e.contains("[2, 2]"),
        "{e}"
    );
    // An extra tensor.
    let mut extra = p.clone();
    extra.insert("stray", ArrayD::zeros(ndarray::IxDyn(&[1])));
    let e = model
        .register(&mut efa_tape::Tape::<f64>::new(), &extra)
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not declare: stray"), "{e}");
}
