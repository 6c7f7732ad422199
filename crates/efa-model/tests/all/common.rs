//! Builders shared by this crate's tests: the paper's models on small seeded inputs (cities
//! and days of temperatures, item baskets) and weight scaling.

use efa_data::temperature::{City, TempDay};
use efa_model::batch::Samples;
use efa_model::{ModelConfig, Objective, Params};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// `p` with every entry times `c`.
pub fn scaled(p: &Params<f64>, c: f64) -> Params<f64> {
    let mut q = p.clone();
    for (_, v) in q.iter_mut() {
        v.mapv_inplace(|x| x * c);
    }
    q
}

/// A model, its objective and a batch, with a name for messages.
pub struct Case {
    pub name: String,
    pub model: ModelConfig,
    pub objective: Objective,
    pub batch: Samples,
}

/// `n` seeded baskets of 1..=max_len distinct items of 1..=n_items.
pub fn baskets(seed: u64, n: usize, n_items: usize, max_len: usize) -> Vec<Vec<usize>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let len = rng.random_range(1..=max_len);
            let mut items: Vec<usize> = (1..=n_items).collect();
            items.shuffle(&mut rng);
            items.truncate(len);
            items
        })
        .collect()
}

/// Four cities (the paper's model reads their coordinates).
pub fn cities() -> Vec<City> {
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
        c("D", 40.1, -75.2),
    ]
}

/// Three days of four cities' temperatures of order 1, with `lags` previous days each.
pub fn days(lags: usize) -> Vec<TempDay> {
    (1..=3u32)
        .map(|day| {
            let d = day;
            // Temperatures of order 1 (as after standardising), so no ReLU layer is dead and
            // every gradient is exercised.
            let d = d as f64;
            let t = |k: f64| {
                vec![
                    0.6 + 0.1 * d + 0.3 * k,
                    -0.5 - 0.05 * d,
                    0.7 + 0.2 * d,
                    -0.2,
                ]
            };
            TempDay {
                date: (2010, 10, day),
                temps: t(0.0),
                lags: (1..=lags).map(|l| t(-(l as f64))).collect(),
            }
        })
        .collect()
}
