//! The clean temperature protocol (`--protocol clean`): the paper's data, splits and models,
//! trained the way a stable recipe would train them.
//!
//! - Temperatures are standardised, `z = (y − μ)/σ` with μ and σ the mean and (population)
//!   standard deviation of every training-day temperature; the lag days use the same μ, σ.
//! - The EFA's site coordinates are standardised per coordinate over the cities (latitude and
//!   longitude separately). The FM's neighbour choice keeps the raw coordinates (Haversine).
//! - The loss is [`Objective::StandardisedMse`]: `σ²·mean (z − η)²`, the MSE of the
//!   prediction `μ + σ·η` in °F², so validation losses and the test MSE are on the paper's
//!   scale.
//! - Minibatches of whole days, at most [`CLEAN_BATCH`] samples (two days of 44 cities; a
//!   day's targets share their inputs, so the continuous-input branch runs once per day),
//!   Adam 1e-3, at most [`CLEAN_EPOCHS`] epochs with early
//!   stopping after [`CLEAN_PATIENCE`] epochs without a better validation loss (best weights
//!   restored); the FM the same with its batch of 256.

use crate::PaperError;
use efa_data::temperature::{TempDay, TemperatureData};
use efa_model::efa::EfaConfig;
use efa_model::objective::Objective;
use efa_train::recipe::TrainConfig;

/// Minibatch size of the clean EFA recipe.
pub const CLEAN_BATCH: usize = 128;
/// Most epochs of the clean recipe.
pub const CLEAN_EPOCHS: usize = 200;
/// Epochs without a better validation loss before the clean recipe stops.
pub const CLEAN_PATIENCE: usize = 20;

/// The affine maps of the clean protocol, fitted on the training split.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Standardiser {
    /// Mean training temperature μ (°F).
    pub temp_mean: f64,
    /// Population standard deviation σ of the training temperatures (°F).
    pub temp_std: f64,
    /// Mean and population standard deviation of the cities' latitudes.
    pub latitude: (f64, f64),
    /// Mean and population standard deviation of the cities' longitudes.
    pub longitude: (f64, f64),
}

/// Mean and population standard deviation of `xs`, or an error naming `what` when there is
/// nothing to fit or the spread is zero or not finite.
fn moments(xs: impl Iterator<Item = f64>, what: &str) -> Result<(f64, f64), PaperError> {
    // Two passes over a collected copy: the mean first, then the centred squares.
    let xs: Vec<f64> = xs.collect();
    if xs.is_empty() {
        return Err(PaperError::Samples(format!(
            "clean protocol: no {what} to standardise"
        )));
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let std = (xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n).sqrt();
    if !(std.is_finite() && std > 0.0 && mean.is_finite()) {
        return Err(PaperError::Samples(format!(
            "clean protocol: the {what} have mean {mean} and standard deviation {std}; \
             standardising needs a finite, positive spread"
        )));
    }
    Ok((mean, std))
}

impl Standardiser {
    /// Fits μ, σ on the training days' temperatures (today's, not the lag days', so each
    /// temperature counts once) and the coordinate moments on the cities.
    pub fn fit(data: &TemperatureData) -> Result<Self, PaperError> {
        let (temp_mean, temp_std) = moments(
            data.train.iter().flat_map(|d| d.temps.iter().copied()),
            "training temperatures",
        )?;
        let cities = &data.table.cities;
        Ok(Standardiser {
            temp_mean,
            temp_std,
            latitude: moments(cities.iter().map(|c| c.latitude), "city latitudes")?,
            longitude: moments(cities.iter().map(|c| c.longitude), "city longitudes")?,
        })
    }

    /// `days` with every temperature (today's and the lag days') standardised.
    pub fn days(&self, days: &[TempDay]) -> Vec<TempDay> {
        let z = |v: &Vec<f64>| -> Vec<f64> {
            v.iter()
                .map(|y| (y - self.temp_mean) / self.temp_std)
                .collect()
        };
        days.iter()
            .map(|d| TempDay {
                date: d.date,
                temps: z(&d.temps),
                lags: d.lags.iter().map(z).collect(),
            })
            .collect()
    }

    /// `data` with its three splits standardised (the city table, coordinates included, is
    /// kept raw: the FM picks neighbours by Haversine distance in degrees).
    pub fn data(&self, data: &TemperatureData) -> TemperatureData {
        TemperatureData {
            table: data.table.clone(),
            train: self.days(&data.train),
            val: self.days(&data.val),
            test: self.days(&data.test),
        }
    }

    /// `cfg` with its site coordinates (latitude, longitude) standardised.
    pub fn sites(&self, mut cfg: EfaConfig) -> EfaConfig {
        if let Some(c) = &mut cfg.continuous {
            for site in &mut c.sites {
                if let [lat, lon] = site.as_mut_slice() {
                    *lat = (*lat - self.latitude.0) / self.latitude.1;
                    *lon = (*lon - self.longitude.0) / self.longitude.1;
                }
            }
        }
        cfg
    }

    /// The loss on the standardised targets, in °F².
    pub fn objective(&self) -> Objective {
        Objective::StandardisedMse { std: self.temp_std }
    }
}

/// The clean recipe: Adam 1e-3, minibatches of `batch`, at most `epochs` (default
/// [`CLEAN_EPOCHS`]) with patience [`CLEAN_PATIENCE`] (or the epoch count, when smaller).
pub fn clean_train_config(batch: usize, epochs: Option<usize>, seed: u64) -> TrainConfig {
    let e = epochs.unwrap_or(CLEAN_EPOCHS);
    TrainConfig {
        lr: 1e-3,
        batch_size: batch,
        max_epochs: e,
        patience: CLEAN_PATIENCE.min(e),
        seed,
        eval_batch: 1024,
        batching: Default::default(),
    }
}
