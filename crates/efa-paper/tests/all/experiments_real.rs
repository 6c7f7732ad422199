//! The real-data experiments' models on tiny hand-made inputs: whole-model f64 gradient audits
//! (item EFA / FM, temperature EFA), short overfit runs, and hand-derived values of the
//! analysis helpers (Haversine, neighbours, similarity, attention maps, the mask branch).

use efa_data::samples::Direction;
use efa_data::temperature::{City, TempDay};
use efa_model::{ModelConfig, Objective};
use efa_nn::params::Params;
use efa_paper::movielens::{item_efa_config, item_fm_config, item_input};
use efa_paper::ModelKind;
use efa_paper::{instacart, temperature};
use efa_train::audit::{audit_model, default_options};
use efa_train::Evaluator;
use efa_train::FitOptions;
use efa_train::{fit, TrainConfig};
use ndarray::{ArrayD, IxDyn};

const BASKETS: [&[usize]; 4] = [&[1, 2, 3], &[4, 5], &[2, 5, 1, 3], &[3]];

fn baskets() -> Vec<Vec<usize>> {
    BASKETS.iter().map(|b| b.to_vec()).collect()
}

fn cities() -> Vec<City> {
    let c = |s: &str, lat, lon| City {
        state: s.into(),
        city: s.into(),
        latitude: lat,
        longitude: lon,
    };
    vec![
        c("A", 33.5, -86.8),
        c("B", 35.4, -94.4),
        c("C", 36.7, -119.8),
    ]
}

fn days() -> Vec<TempDay> {
    (1..=4)
        .map(|d| TempDay {
            date: (2010, 10, d),
            temps: vec![60.0 + d as f64, 55.0 - d as f64, 70.0 + 0.5 * d as f64],
            lags: vec![vec![59.0 + d as f64, 54.0, 71.0]],
        })
        .collect()
}

/// The item models at reduced widths (the same code paths, fewer finite differences).
fn small_item_model(uni: bool, efa: bool) -> ModelConfig {
    if efa {
        let mut c = item_efa_config(5, 4, uni);
        (c.item_dim, c.key_dim) = (8, 4);
        ModelConfig::Efa(c)
    } else {
        ModelConfig::Fm(efa_model::FmConfig::Item {
            tokens: 5 + if uni { 2 } else { 1 },
            dim: 8,
            classes: 5,
        })
    }
}

/// The temperature EFA at reduced widths.
fn small_temperature_model(layers: usize, lag: usize) -> ModelConfig {
    let mut c = temperature::efa_config(&cities(), layers, lag);
    (c.item_dim, c.key_dim, c.ffn, c.head_hidden) = (8, 4, Some(8), vec![8, 4]);
    let inputs = c.continuous.as_mut().unwrap();
    (inputs.hidden, inputs.dim, inputs.fuse) = (16, 8, 8);
    ModelConfig::Efa(c)
}

#[test]
fn item_models_pass_the_finite_difference_audit() {
    for uni in [true, false] {
        for efa in [true, false] {
            let batch = item_input(&baskets(), 5, 4, uni, efa).unwrap();
            let model = small_item_model(uni, efa);
            let eval = Evaluator::new(&model, &Objective::CrossEntropy);
            let report = audit_model(&eval, &model.init::<f64>(3), &batch, &default_options())
                .unwrap()
                .params;
            assert!(report.passed(), "uni={uni} efa={efa}:\n{report}");
            assert_eq!(report.params.len(), model.init::<f64>(3).len());
            assert!(report.params.iter().all(|p| p.checked > 0));
        }
    }
}

#[test]
fn temperature_efa_with_lags_passes_the_finite_difference_audit() {
    let model = small_temperature_model(1, 1);
    let all = temperature::efa_samples(&days()[..2], 3).unwrap();
    let eval = Evaluator::new(&model, &Objective::Mse);
    let report = audit_model(&eval, &model.init::<f64>(5), &all, &default_options())
        .unwrap()
        .params;
    assert!(report.passed(), "{report}");
    // Every parameter was audited, mask_emb row 0 included (its gradient is exactly 0).
    assert_eq!(report.params.len(), model.init::<f64>(5).len());
    assert!(report.summary("lag_emb").is_some() && report.summary("site_mlp1.w").is_some());
}

#[test]
fn the_masked_value_never_reaches_the_model_but_the_others_do() {
    let model = ModelConfig::Efa(temperature::efa_config(&cities(), 2, 0));
    let params = model.init::<f32>(1);
    let day = TempDay {
        date: (2010, 10, 1),
        temps: vec![61.0, 54.0, 70.5],
        lags: vec![],
    };
    let base = temperature::efa_samples(std::slice::from_ref(&day), 3).unwrap();
    let eval = Evaluator::new(&model, &Objective::Mse);
    let eta = |s| eval.predict(&params, &s, 8).unwrap();
    let e0 = eta(base.clone());
    // Change the masked city's value in sample 0 (position 0): η is unchanged.
    let mut masked = base.clone();
    masked.weights.as_mut().unwrap()[[0, 0]] = 99.0;
    assert_eq!(eta(masked)[[0, 0]], e0[[0, 0]]);
    // Change a visible city's value (position 1 of sample 0): η moves. Sample 0 then no longer
    // shares its day's inputs, so it gets a sequence id of its own (sharing one would be an
    // error naming both samples and the position).
    let mut visible = base;
    visible.weights.as_mut().unwrap()[[0, 1]] = 99.0;
    visible.group = Some(vec![1, 0, 0]);
    assert!((eta(visible)[[0, 0]] - e0[[0, 0]]).abs() > 1e-6);
}

fn short_fit(
    model: &ModelConfig,
    objective: &Objective,
    data: &efa_model::Samples,
    lr: f64,
    epochs: usize,
) -> Vec<f64> {
    let mut params = model.init::<f32>(0);
    let cfg = TrainConfig {
        lr,
        batch_size: data.len(),
        max_epochs: epochs,
        patience: epochs,
        seed: 1,
        eval_batch: 64,
        batching: Default::default(),
    };
    let eval = Evaluator::new(model, objective);
    let r = fit(&eval, &mut params, data, data, &cfg, FitOptions::default()).unwrap();
    assert_eq!(r.epochs, epochs);
    r.history.iter().map(|h| h.train_loss).collect()
}

#[test]
fn short_runs_overfit_tiny_sets() {
    for efa in [true, false] {
        let data = item_input(&baskets(), 5, 4, false, efa).unwrap();
        let model = if efa {
            ModelConfig::Efa(item_efa_config(5, 4, false))
        } else {
            ModelConfig::Fm(item_fm_config(5, false))
        };
        let l = short_fit(&model, &Objective::CrossEntropy, &data, 1e-2, 40);
        assert!(l.iter().all(|v| v.is_finite()));
        // Starts near log 5 (near-uniform softmax) and must drop well below it.
        assert!((l[0] - 5f64.ln()).abs() < 0.3, "{l:?}");
        assert!(l[39] < l[0] - 0.3, "efa={efa}: {l:?}");
    }
    let data = temperature::efa_samples(&days(), 3).unwrap();
    let model = ModelConfig::Efa(temperature::efa_config(&cities(), 1, 1));
    let l = short_fit(&model, &Objective::Mse, &data, 1e-2, 30);
    assert!(l.iter().all(|v| v.is_finite()));
    assert!(l[29] < 0.5 * l[0], "{l:?}");
}

#[test]
fn short_runs_of_the_rating_and_neighbour_models_reduce_their_losses() {
    use efa_data::samples::RatingData;
    use efa_paper::movielens::{exp2_spec, Variant};
    // Exp-2 models on six hand-made users (movies 1..=4, ratings 1..=3), both variants.
    let seq = |v: &[(usize, f64)]| v.to_vec();
    let users = vec![
        seq(&[(1, 3.0), (2, 1.0), (3, 2.0)]),
        seq(&[(2, 1.0), (1, 3.0), (4, 2.0), (3, 2.0)]),
        seq(&[(4, 2.0), (1, 3.0)]),
        seq(&[(3, 2.0), (2, 1.0), (1, 3.0)]),
    ];
    let test = vec![seq(&[(1, 3.0), (4, 2.0)])];
    let data = RatingData::new(users, test, Some(4), 42).unwrap();
    for v in [Variant::V1, Variant::V2] {
        for kind in [ModelKind::Efa, ModelKind::Fm] {
            let spec =
                exp2_spec(&data, v, Direction::Bi, kind, TrainConfig::paper(1, 0), 0).unwrap();
            let l = short_fit(&spec.model, &spec.objective, &spec.train, 1e-2, 30);
            assert!(l.iter().all(|x| x.is_finite()));
            assert!(l[29] < l[0] - 0.01, "{v:?} {kind:?}: {l:?}");
        }
    }
    // The k-nearest-city FM (k = 2) on four days of three cities.
    let data = temperature::fm_samples(&days(), &temperature::neighbours(&cities()), 2).unwrap();
    let model = ModelConfig::Fm(efa_model::FmConfig::Rating { items: 4, dim: 32 });
    let l = short_fit(&model, &Objective::Mse, &data, 1e-2, 30);
    assert!(l.iter().all(|x| x.is_finite()));
    assert!(l[29] < 0.5 * l[0], "{l:?}");
}

#[test]
fn haversine_and_neighbours_match_hand_values() {
    // A quarter of the equator: 6371·π/2 km.
    let q = temperature::haversine_km((0.0, 0.0), (0.0, 90.0));
    assert!(
        (q - 6371.0 * std::f64::consts::FRAC_PI_2).abs() < 1e-9,
        "{q}"
    );
    // Pole to pole through any meridian: 6371·π.
    assert!(
        (temperature::haversine_km((90.0, 10.0), (-90.0, 0.0)) - 6371.0 * std::f64::consts::PI)
            .abs()
            < 1e-6
    );
    // A–B are ~730 km apart, B–C ~2,300 km, A–C ~3,000 km.
    assert_eq!(
        temperature::neighbours(&cities()),
        vec![vec![1, 2], vec![0, 2], vec![1, 0]]
    );
    // FM samples: k = 1 uses the nearest city's value that day, center = own id + 1.
    let s = temperature::fm_samples(&days()[..1], &temperature::neighbours(&cities()), 1).unwrap();
    assert_eq!(
        s.weights.unwrap().column(0).to_vec(),
        vec![54.0, 61.0, 54.0]
    );
    assert_eq!(s.center.unwrap(), vec![1, 2, 3]);
    assert!(temperature::fm_samples(&days(), &temperature::neighbours(&cities()), 3).is_err());
}

#[test]
fn similarity_is_the_symmetrised_product_with_a_masked_diagonal() {
    // Items 1..=2, width 1: A = [2, 3] (row 0 = padding, ignored), W = [[1, −1]].
    let model = ModelConfig::Fm(item_fm_config(2, false));
    let mut p = Params::<f32>::new();
    p.insert(
        "alpha",
        ArrayD::from_shape_vec(IxDyn(&[3, 1]), vec![9.0, 2.0, 3.0]).unwrap(),
    );
    p.insert(
        "out.w",
        ArrayD::from_shape_vec(IxDyn(&[1, 2]), vec![1.0, -1.0]).unwrap(),
    );
    let s = instacart::similarity(&model, &p, 2).unwrap();
    // AW = [[2, −2], [3, −3]]; S = AW + (AW)ᵀ = [[4, 1], [1, −6]], diagonal −1000.
    assert_eq!(s, ndarray::arr2(&[[-1000.0, 1.0], [1.0, -1000.0]]));
    assert_eq!(instacart::top_k(&s, 1, 1), vec![(2, 1.0)]);
}

#[test]
fn attention_maps_are_uniform_over_visible_keys_when_scores_are_constant() {
    for uni in [true, false] {
        let cfg = item_efa_config(5, 6, uni);
        let mut p = ModelConfig::Efa(cfg.clone()).init::<f32>(2);
        // Zero query kernels and biases: every score is 0, so attention is uniform over the
        // keys the mask leaves visible (j < length for bidir, j ≤ i for unidir).
        for l in 0..2 {
            for n in ["w", "b"] {
                p.get_mut(&format!("block{l}.attn.q.{n}"))
                    .unwrap()
                    .fill(0.0);
            }
        }
        let basket = [3, 1, 4, 5];
        let maps = instacart::basket_attention(&cfg, &p, &basket, 5, 6).unwrap();
        assert_eq!(maps.len(), 2);
        for m in &maps {
            for i in 0..4 {
                for j in 0..4 {
                    let want = if uni {
                        if j <= i {
                            1.0 / (i + 1) as f64
                        } else {
                            0.0
                        }
                    } else {
                        0.25
                    };
                    assert!(
                        (m[[i, j]] - want).abs() < 1e-12,
                        "uni={uni} ({i},{j}) {} vs {want}",
                        m[[i, j]]
                    );
                }
            }
        }
    }
}

#[test]
fn bad_continuous_inputs_are_errors_naming_field_row_and_position() {
    let model = small_temperature_model(1, 1);
    let params = model.init::<f32>(0);
    let good = temperature::efa_samples(&days()[..2], 3).unwrap();
    let eval = Evaluator::new(&model, &Objective::Mse);
    let err = |s: efa_model::Samples| eval.predict(&params, &s, 8).unwrap_err().to_string();
    let mut s = good.clone();
    s.tokens[[1, 2]] = 3;
    let e = err(s);
    assert!(
        e.contains("`tokens` row 1, position 2") && e.contains("site id 3"),
        "{e}"
    );
    let mut s = good.clone();
    s.weights.as_mut().unwrap()[[2, 4]] = f64::NAN;
    let e = err(s);
    assert!(
        e.contains("`weights` row 2, position 4") && e.contains("NaN"),
        "{e}"
    );
    let mut s = good.clone();
    s.values.as_mut().unwrap()[[0, 5]] = 2;
    let e = err(s);
    assert!(
        e.contains("`values` row 0, position 5") && e.contains("lag indicator 2 outside 0..2"),
        "{e}"
    );
    let mut s = good;
    s.values = None;
    let e = err(s);
    assert!(e.contains("lag indicators in `values`"), "{e}");
}
