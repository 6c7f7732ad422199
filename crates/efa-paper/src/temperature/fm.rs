//! The temperature FM baseline (docs/paper.md §6.4, a best guess: its code was never published):
//! the k nearest cities by Haversine distance, each weighted by its temperature that day,
//! ŷᵢ = ⟨ρᵢ, (1/k) Σ_{j∈N_k(i)} y_j α_j⟩ ([`FmConfig::Rating`]).

use crate::{ModelKind, PaperError, RunKey, RunSpec};
use efa_data::temperature::{City, TempDay, TemperatureData};
use efa_model::fm::FmConfig;
use efa_model::objective::Objective;
use efa_model::{ModelConfig, Samples, Targets};
use efa_train::recipe::TrainConfig;
use ndarray::Array2;

/// The FM test MSE per k hard-coded in the paper's visualization notebook (§6.4).
pub const PAPER_FM: [(usize, f64); 12] = [
    (1, 37.394913),
    (2, 31.901176),
    (3, 23.062382),
    (4, 22.766298),
    (5, 22.684772),
    (10, 29.917351),
    (15, 34.258610),
    (20, 40.502869),
    (25, 47.626366),
    (30, 52.712200),
    (35, 60.980519),
    (40, 75.550880),
];

/// The paper's FM test MSE for `k` neighbours, if it reported one.
pub fn paper_fm(k: usize) -> Option<f64> {
    PAPER_FM.iter().find(|p| p.0 == k).map(|p| p.1)
}

/// Great-circle distance in km between two (latitude, longitude) points in degrees
/// (Haversine, Earth radius 6371 km).
pub fn haversine_km(a: (f64, f64), b: (f64, f64)) -> f64 {
    let (p1, p2) = (a.0.to_radians(), b.0.to_radians());
    let (dp, dl) = (p2 - p1, (b.1 - a.1).to_radians());
    let h = (dp / 2.0).sin().powi(2) + p1.cos() * p2.cos() * (dl / 2.0).sin().powi(2);
    2.0 * 6371.0 * h.sqrt().min(1.0).asin()
}

/// For each city, the other cities sorted by Haversine distance (nearest first; ties by index).
pub fn neighbours(cities: &[City]) -> Vec<Vec<usize>> {
    (0..cities.len())
        .map(|i| {
            let at = |c: &City| (c.latitude, c.longitude);
            let mut v: Vec<(f64, usize)> = (0..cities.len())
                .filter(|&j| j != i)
                .map(|j| (haversine_km(at(&cities[i]), at(&cities[j])), j))
                .collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            v.into_iter().map(|x| x.1).collect()
        })
        .collect()
}

/// FM input of `days` (§6.4 best guess): for city i, center = i + 1 and context = its `k`
/// nearest cities (ids + 1) weighted by their temperatures that day, so the model is
/// ŷᵢ = ⟨ρᵢ, (1/k) Σ_{j∈N_k(i)} y_j α_j⟩ ([`FmConfig::Rating`]).
pub fn fm_samples(days: &[TempDay], nbrs: &[Vec<usize>], k: usize) -> Result<Samples, PaperError> {
    let c = nbrs.len();
    if k == 0 || k >= c {
        return Err(PaperError::setting(
            "k",
            k,
            format!("must be in 1..={} (the other cities)", c.saturating_sub(1)),
        ));
    }
    let n = days.len() * c;
    if let Some(d) = days.iter().find(|d| d.temps.len() != c) {
        return Err(PaperError::Samples(format!(
            "day {:?}: {} cities, expected {c}",
            d.date,
            d.temps.len()
        )));
    }
    let at = |r: usize| (&days[r / c], r % c);
    Ok(Samples {
        tokens: Array2::from_shape_fn((n, k), |(r, j)| nbrs[r % c][j] + 1),
        values: None,
        weights: Some(Array2::from_shape_fn((n, k), |(r, j)| {
            let (d, i) = at(r);
            d.temps[nbrs[i][j]]
        })),
        center: Some((0..n).map(|r| r % c + 1).collect()),
        lengths: vec![k; n],
        pred_idx: vec![0; n],
        targets: Targets::Real((0..n).map(|r| at(r).0.temps[r % c]).collect()),
        group: None,
    })
}

/// The FM recipe (unverified, §6.4): Adam 1e-3, batch 256, `epochs` with patience = epochs.
pub fn fm_train_config(epochs: usize, seed: u64) -> TrainConfig {
    TrainConfig {
        lr: 1e-3,
        batch_size: 256,
        max_epochs: epochs,
        patience: epochs,
        seed,
        eval_batch: 1024,
        batching: Default::default(),
    }
}

/// The FM run with `k` nearest cities.
pub fn fm_spec(
    data: &TemperatureData,
    k: usize,
    train_config: TrainConfig,
    init_seed: u64,
) -> Result<RunSpec, PaperError> {
    let nbrs = neighbours(&data.table.cities);
    Ok(RunSpec {
        key: RunKey {
            k: Some(k),
            ..RunKey::new(ModelKind::Fm)
        },
        model: ModelConfig::Fm(FmConfig::Rating {
            items: nbrs.len() + 1,
            dim: 32,
        }),
        objective: Objective::Mse,
        paper: paper_fm(k).unwrap_or(f64::NAN),
        train: fm_samples(&data.train, &nbrs, k)?,
        val: fm_samples(&data.val, &nbrs, k)?,
        test: fm_samples(&data.test, &nbrs, k)?,
        train_config,
        init_seed,
        plan: None,
    })
}
