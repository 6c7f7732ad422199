//! A mixed-family EFA model built and trained from code, saved to a run directory and read
//! back through the library: the loaded model predicts the same bits as the one in memory.
//!
//! Sites with coordinates each carry a thermometer (Gaussian, mean and variance learned), a
//! rain gauge (Bernoulli) and an event counter (Poisson), read daily; a latent field shared by
//! the day's sites drives all three (as in `examples/mixed_sites_data.rs`). Every day is one
//! sequence; each reading is predicted from the day's other readings (bidirectional).
//!
//! Run: `cargo run --example train_from_code`.

use efa::model::efa::{ContinuousInputs, EfaConfig, Norm, Visibility};
use efa::model::ModelConfig;
use efa::train::run::{load_saved, RunDir};
use efa::train::userdata::{
    build, report::predict_rows, Direction, Families, FamilyRange, FamilySpec, Row, UserConfig,
    UserData, UserLoss,
};
use efa::train::{fit, Batching, Evaluator, FitOptions, Threads, TrainConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SITES: usize = 4;

/// The model: continuous inputs (a value MLP, a site MLP on the coordinates and a learned row
/// per item), one post-norm attention block, η two columns wide (the Gaussian's).
fn config(coords: &[(f64, f64)]) -> UserConfig {
    let items = 3 * SITES;
    let sites = (0..items).map(|i| {
        let (lat, lon) = coords[i % SITES];
        vec![lat, lon]
    });
    let range = |k: usize, family| FamilyRange {
        items: [k * SITES, (k + 1) * SITES - 1],
        family,
    };
    UserConfig {
        model: ModelConfig::Efa(EfaConfig {
            items,
            item_dim: 16,
            zero_padding: false,
            values: None,
            positions: None,
            layers: 1,
            heads: 2,
            key_dim: 8,
            ffn: Some(32),
            norm: Norm::Post,
            ln_eps: 1e-3,
            head_hidden: vec![32],
            out_dim: 2,
            out_bias: true,
            direction: Visibility::default(),
            continuous: Some(ContinuousInputs {
                hidden: 32,
                dim: 8,
                sites: sites.collect(),
                lag_rows: None,
                fuse: 32,
                item_embedding: true,
            }),
        }),
        family: Families::Ranges(vec![
            range(0, FamilySpec::Gaussian {}),
            range(1, FamilySpec::Bernoulli {}),
            range(2, FamilySpec::Poisson {}),
        ]),
        direction: Direction::Bi,
        train: TrainConfig {
            lr: 3e-3,
            batch_size: 32,
            max_epochs: 6,
            patience: 3,
            seed: 11,
            eval_batch: 256,
            batching: Batching::Samples,
        },
        init_seed: 5,
        loss: UserLoss::default(),
    }
}

/// A standard normal draw (Box–Muller).
fn normal(rng: &mut StdRng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A Poisson draw (Knuth; small means).
fn poisson(rng: &mut StdRng, mean: f64) -> f64 {
    let (limit, mut k, mut p) = ((-mean).exp(), 0.0, 1.0);
    loop {
        p *= rng.random::<f64>();
        if p <= limit {
            return k;
        }
        k += 1.0;
    }
}

/// `days` days of readings at the sites, one sequence per day, every reading a target.
fn days(rng: &mut StdRng, coords: &[(f64, f64)], first: usize, days: usize) -> UserData {
    let mut line = 1;
    let sequences = (first..first + days)
        .map(|d| {
            let (u, v) = (normal(rng), 0.5 * normal(rng));
            let field: Vec<f64> = coords
                .iter()
                .map(|&(lat, _)| u + v * (lat - 45.0) / 5.0)
                .collect();
            (0..3 * SITES)
                .map(|item| {
                    let (kind, f) = (item / SITES, field[item % SITES]);
                    let value = match kind {
                        0 => ((15.0 + 4.0 * f + 1.5 * normal(rng)) * 100.0).round() / 100.0,
                        1 => f64::from(u8::from(
                            rng.random::<f64>() < 1.0 / (1.0 + (-1.5 * f).exp()),
                        )),
                        _ => poisson(rng, (0.6 + 0.5 * f).exp()),
                    };
                    line += 1;
                    Row {
                        seq: format!("day{d}"),
                        order: item as i64,
                        item,
                        value,
                        line,
                        lag: 0,
                        target: true,
                        family: kind,
                    }
                })
                .collect()
        })
        .collect();
    UserData {
        file: format!("day{first}-{}", first + days - 1).into(),
        sequences,
    }
}

fn main() {
    let mut rng = StdRng::seed_from_u64(7);
    let coords: Vec<(f64, f64)> = (0..SITES)
        .map(|_| {
            (
                40.0 + 10.0 * rng.random::<f64>(),
                -105.0 + 10.0 * rng.random::<f64>(),
            )
        })
        .collect();
    let cfg = config(&coords);
    cfg.validate().expect("a valid configuration");
    let train = build(&days(&mut rng, &coords, 0, 60), &cfg);
    let valid = build(&days(&mut rng, &coords, 60, 20), &cfg);

    // Train a few epochs on two threads; the best epoch's weights are kept.
    let threads = Threads::new(2).unwrap();
    let objective = cfg.objective();
    let eval = Evaluator::new(&cfg.model, &objective).with_threads(&threads);
    let mut params = cfg.model.init::<f32>(cfg.init_seed);
    let before = eval.evaluate(&params, &valid.samples, 256).unwrap();
    let opts = FitOptions::default();
    let result = fit(
        &eval,
        &mut params,
        &train.samples,
        &valid.samples,
        &cfg.train,
        opts,
    )
    .unwrap();
    println!(
        "valid nll {before:.4} at initialisation, {:.4} after {} epochs (best epoch {})",
        result.best_val, result.epochs, result.best_epoch
    );
    assert!(
        result.best_val < before,
        "training lowers the validation loss"
    );

    // Save into a run directory and read it back through the library, as `efa evaluate`
    // and `efa predict` do.
    let root = std::env::temp_dir().join(format!("efa-train-from-code-{}", std::process::id()));
    let dir = RunDir::new(&root);
    dir.create().unwrap();
    dir.save_model(&cfg, &params).unwrap();
    let saved = load_saved(dir.path(), None).unwrap();
    assert_eq!(saved.config, cfg);
    let loaded = Evaluator::new(&saved.config.model, &objective).with_threads(&threads);

    // The loaded model predicts exactly what the one in memory does.
    let z = eval.predict(&params, &valid.samples, 256).unwrap();
    let z_loaded = loaded.predict(&saved.params, &valid.samples, 256).unwrap();
    let bits = |z: &ndarray::Array2<f64>| z.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&z),
        bits(&z_loaded),
        "the loaded model's predictions differ"
    );
    let preds = predict_rows(&saved.config, &valid.targets, &z_loaded).unwrap();
    for (row, p) in valid
        .targets
        .iter()
        .zip(&preds)
        .take(3 * SITES)
        .step_by(SITES)
    {
        println!(
            "{} item {:>2} ({:<9}): observed {:>6}, predicted mean {:.3}",
            row.seq,
            row.item,
            p.family.name(),
            row.value,
            p.mean[0]
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[cfg(test)]
mod tests {
    #[test]
    fn example_runs() {
        super::main();
    }
}
