//! The query-stream shortcut of causal EFA models: with sequence ids, every target of a
//! sequence is computed from one causal pass over the sequence plus a one-row query stream per
//! target. Its losses and gradients must equal the per-sample computation (each sample its
//! own full forward pass) up to f64 round-off, for whole and partial sequences, any order,
//! and for every block variant (values, layer norm, feed-forward, head MLP).

use efa_check::{CheckOptions, Mode};
use efa_model::batch::{Samples, Targets};
use efa_model::{
    EfaConfig, ForwardPlan, ModelConfig, Norm, Objective, Params, Positions, ValueTable, Visibility,
};
use efa_paper::movielens::{item_efa_config, item_input};
use efa_train::audit::audit_model;
use efa_train::schedule::epoch_batches;
use efa_train::Evaluator;
use efa_train::{Batching, TrainConfig};
use ndarray::{Array2, ArrayD};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::common::{baskets, scaled};

type LossGrads = (f64, Vec<ArrayD<f64>>);

/// Loss and gradients with the shortcut (sequence ids) and without (each sample alone).
fn both(
    model: &ModelConfig,
    objective: &Objective,
    p: &Params<f64>,
    batch: &Samples,
) -> (LossGrads, LossGrads) {
    assert!(batch.group.is_some());
    let eval = Evaluator::new(model, objective);
    let stream = eval.loss_and_grads(p, batch).unwrap();
    let mut alone = batch.clone();
    alone.group = None;
    let plain = eval.loss_and_grads(p, &alone).unwrap();
    (stream, plain)
}

fn assert_close(p: &Params<f64>, got: &LossGrads, want: &LossGrads) {
    assert!(
        (got.0 - want.0).abs() <= 1e-12 * want.0.abs().max(1.0),
        "loss {} vs {}",
        got.0,
        want.0
    );
    let mut nonzero = 0;
    for ((name, _), (g, w)) in p.iter().zip(got.1.iter().zip(&want.1)) {
        assert_eq!(g.shape(), w.shape(), "{name}");
        for (i, (a, b)) in g.iter().zip(w.iter()).enumerate() {
            assert!(
                (a - b).abs() <= 1e-11 * (1.0 + b.abs()),
                "{name}[{i}]: stream {a} vs per-sample {b}"
            );
            nonzero += usize::from(*b != 0.0);
        }
    }
    assert!(nonzero > 100, "the comparison must see real gradients");
}

#[test]
fn item_model_stream_equals_per_sample_for_whole_and_partial_sequences() {
    let (n_items, max_len) = (9, 7);
    let b = baskets(1, 12, n_items, max_len);
    let all = item_input(&b, n_items, max_len, true, true).unwrap();
    let model = ModelConfig::Efa(item_efa_config(n_items, max_len, true));
    let p = scaled(&model.init::<f64>(3), 3.0);
    // Whole sequences, in sample order (more than one micro-batch).
    let (s, w) = both(&model, &Objective::CrossEntropy, &p, &all);
    assert_close(&p, &s, &w);
    // A shuffled subset: partial sequences, targets out of order, singletons.
    let mut rng = StdRng::seed_from_u64(9);
    let mut idx: Vec<usize> = (0..all.len()).collect();
    idx.shuffle(&mut rng);
    idx.truncate(all.len() / 2);
    let part = all.select(&idx);
    let (s, w) = both(&model, &Objective::CrossEntropy, &p, &part);
    assert_close(&p, &s, &w);
    // The same subset forced through the query stream (the model itself prefers the
    // per-sample pass when most sequences hold a single target).
    let forced = stream_only(&model, &Objective::CrossEntropy, &p, &part);
    assert_close(&p, &forced, &w);
}

/// Loss and gradients of one tape through the query-stream plan itself.
fn stream_only(
    model: &ModelConfig,
    objective: &Objective,
    p: &Params<f64>,
    batch: &Samples,
) -> LossGrads {
    let g = Evaluator::new(model, objective)
        .with_plan(Some(ForwardPlan::QueryStream))
        .micro(p, batch)
        .unwrap();
    assert_eq!(g.plan, ForwardPlan::QueryStream);
    (g.loss, g.grads)
}

/// A causal rating-style model with every block option, on hand-built sequences whose
/// samples share the items and mask only the target's value.
fn rich(norm: Norm, layers: usize) -> (ModelConfig, Samples) {
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
        ffn: Some(7),
        norm,
        ln_eps: 1e-3,
        head_hidden: vec![4],
        out_dim: 1,
        out_bias: true,
        direction: Visibility::Causal,
        continuous: None,
    };
    let mut rng = StdRng::seed_from_u64(4);
    let (mut tokens, mut values, mut lengths, mut pred, mut y, mut group) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let mask_row = 6;
    for g in 0..5 {
        let len = rng.random_range(1..=6);
        let t: Vec<usize> = (0..6)
            .map(|j| if j < len { rng.random_range(1..6) } else { 0 })
            .collect();
        let v: Vec<usize> = (0..6)
            .map(|j| if j < len { rng.random_range(1..6) } else { 0 })
            .collect();
        for i in 0..len {
            let mut vi = v.clone();
            vi[i] = mask_row;
            tokens.extend(&t);
            values.extend(vi);
            lengths.push(len);
            pred.push(i);
            y.push(v[i] as f64 - 2.5);
            group.push(g);
        }
    }
    let n = lengths.len();
    let batch = Samples {
        tokens: Array2::from_shape_vec((n, 6), tokens).unwrap(),
        values: Some(Array2::from_shape_vec((n, 6), values).unwrap()),
        weights: None,
        center: None,
        lengths,
        pred_idx: pred,
        targets: Targets::Real(y),
        group: Some(group),
    };
    (ModelConfig::Efa(cfg), batch)
}

#[test]
fn stream_equals_per_sample_with_values_norms_and_feed_forward() {
    for (norm, layers) in [(Norm::None, 1), (Norm::Post, 2), (Norm::Pre, 3)] {
        let (model, batch) = rich(norm, layers);
        let p = scaled(&model.init::<f64>(7), 2.0);
        let (s, w) = both(&model, &Objective::Mse, &p, &batch);
        assert_close(&p, &s, &w);
        let forced = stream_only(&model, &Objective::Mse, &p, &batch);
        assert_close(&p, &forced, &w);
    }
}

#[test]
fn stream_gradients_pass_the_finite_difference_audit() {
    let (model, batch) = rich(Norm::Post, 2);
    let eval = Evaluator::new(&model, &Objective::Mse);
    let audit = audit_model(
        &eval,
        &model.init::<f64>(5),
        &batch,
        &CheckOptions {
            mode: Mode::Full,
            ..CheckOptions::default()
        },
    )
    .unwrap();
    assert_eq!(audit.plan, ForwardPlan::QueryStream);
    assert!(audit.params.passed(), "{}", audit.params);
}

#[test]
fn inconsistent_sequence_ids_are_an_error_not_a_wrong_answer() {
    let (model, mut batch) = rich(Norm::None, 2);
    // Sample 1 claims sequence 0 but has another item before its target.
    assert_eq!(batch.group.as_ref().unwrap()[1], 0);
    assert!(batch.pred_idx[1] >= 1);
    batch.tokens[[1, 0]] = if batch.tokens[[0, 0]] == 1 { 2 } else { 1 };
    let p = model.init::<f64>(1);
    let e = Evaluator::new(&model, &Objective::Mse)
        .loss_and_grads(&p, &batch)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("field `group`") && e.contains("differ at position 0"),
        "{e}"
    );
}

#[test]
fn sequence_batches_hold_whole_sequences_and_every_sample_once() {
    let (n_items, max_len) = (9, 7);
    let b = baskets(2, 200, n_items, max_len);
    let all = item_input(&b, n_items, max_len, true, true).unwrap();
    let cfg = TrainConfig {
        batching: Batching::Sequences,
        batch_size: 32,
        ..TrainConfig::paper(1, 5)
    };
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut order: Vec<usize> = (0..all.len()).collect();
    let group = all.group.as_ref().unwrap();
    for _epoch in 0..2 {
        let batches = epoch_batches(&all, &cfg, &mut rng, &mut order).unwrap();
        let mut seen = vec![0; all.len()];
        for batch in &batches {
            assert!(batch.len() <= cfg.batch_size);
            for &i in batch {
                seen[i] += 1;
                // The whole sequence of every member is in this batch.
                let members = (0..all.len()).filter(|&j| group[j] == group[i]).count();
                assert_eq!(
                    batch.iter().filter(|&&j| group[j] == group[i]).count(),
                    members
                );
            }
        }
        assert!(seen.iter().all(|&c| c == 1));
        // Batches are filled: all but the last hold more than half the batch size.
        let full = batches[..batches.len() - 1]
            .iter()
            .filter(|b| b.len() > cfg.batch_size - max_len)
            .count();
        assert_eq!(full, batches.len() - 1);
    }
    // Paper batching is untouched by sequence ids.
    let paper = TrainConfig::paper(1, 5);
    let mut rng = StdRng::seed_from_u64(paper.seed);
    let batches = epoch_batches(&all, &paper, &mut rng, &mut order).unwrap();
    assert!(batches[..batches.len() - 1]
        .iter()
        .all(|b| b.len() == paper.batch_size));
    // Sequence batches without sequence ids are an error, not a silent fallback.
    let mut plain = all.clone();
    plain.group = None;
    let e = epoch_batches(&plain, &cfg, &mut rng, &mut order)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("field `train.batching`: \"sequences\" needs sequence ids"),
        "{e}"
    );
}
