//! U.S. city temperatures (docs/paper.md §6): the masked city's October temperature from the other
//! 43 cities of the same day (and, with lags, the previous days), by the temperature EFA of
//! §6.2–§6.3, and the k-nearest-city factor model of §6.4 ([`fm`], a best guess: its code was
//! never published). [`clean`] is the stable recipe of `protocol = clean`.

pub mod clean;
pub mod fm;

pub use fm::{fm_samples, fm_spec, fm_train_config, haversine_km, neighbours, paper_fm, PAPER_FM};

use self::clean::{clean_train_config, Standardiser, CLEAN_BATCH, CLEAN_PATIENCE};
use crate::options::{at_least_one, first_repeat, parse_checked};
use crate::paper_data::{DataSet, PaperData};
use crate::{
    Analysis, DataOptions, Experiment, Figure, ModelKind, Models, PaperError, Protocol, RunKey,
    RunSettings, RunSpec, TrainedRun,
};
use efa_data::fingerprint::Mismatch;
use efa_data::temperature::{load_temperature, City, TempDay, TemperatureData};
use efa_model::efa::{ContinuousInputs, EfaConfig, Norm, Visibility};
use efa_model::objective::Objective;
use efa_model::size::MAX_LAYERS;
use efa_model::{ModelConfig, Samples, Targets};
use efa_train::recipe::{Batching, TrainConfig};
use ndarray::Array2;
use serde::Serialize;
use serde_json::json;
use std::path::Path;

/// Most lag days: the paper's models use 0, 1 or 2.
pub const MAX_LAG: usize = 2;

/// `lag` at most [`MAX_LAG`].
pub fn check_lag(lag: usize) -> Result<(), PaperError> {
    if lag > MAX_LAG {
        return Err(PaperError::setting(
            "lag",
            lag,
            "the paper's models use 0, 1 or 2 lag days",
        ));
    }
    Ok(())
}

/// `layers` in `1..=MAX_LAYERS`.
pub fn check_layers(layers: usize) -> Result<(), PaperError> {
    if layers == 0 || layers > MAX_LAYERS {
        return Err(PaperError::setting(
            "layers",
            layers,
            format!("must be in 1..={MAX_LAYERS}"),
        ));
    }
    Ok(())
}

/// The paper's EFA test MSE for L = 1, 2, 4 without lags, and L = 4 with lag 1 and lag 2.
pub fn paper_efa(layers: usize, lag: usize) -> Option<f64> {
    match (layers, lag) {
        (1, 0) => Some(17.135),
        (2, 0) => Some(11.522),
        (4, 0) => Some(11.224),
        (4, 1) => Some(9.248),
        (4, 2) => Some(10.420),
        _ => None,
    }
}

/// Loads `DIR/temperature/{us_cities_fall.csv, cities.csv}` with `lag` previous days and the
/// year splits (train 2007–12, val 2013–16, test 2017–19: 8,184 / 5,456 / 4,092 samples).
pub fn load(dir: &Path, lag: usize) -> Result<TemperatureData, PaperError> {
    check_lag(lag)?;
    let d = dir.join("temperature");
    for f in ["us_cities_fall.csv", "cities.csv"] {
        if !d.join(f).is_file() {
            return Err(PaperError::MissingData {
                path: d.join(f),
                how: DataSet::Temperature.how().into(),
            });
        }
    }
    Ok(load_temperature(&d, lag)?)
}

/// The temperature EFA (§6.2–§6.3): value MLP 128 → 32 with the mask row at the target, site
/// MLP 128 → 32 on (latitude, longitude) in degrees, a lag embedding when `lag > 0`, fusion
/// Dense 64 ReLU → Dense 32; `layers` post-LN blocks (MHA 2 × 16, FFN 64, ε 1e-3), no
/// positions and no mask; head Dense 128 ReLU, Dense 16 ReLU, Dense 1.
pub fn efa_config(cities: &[City], layers: usize, lag: usize) -> EfaConfig {
    EfaConfig {
        items: 1,
        item_dim: 32,
        zero_padding: false,
        values: None,
        positions: None,
        layers,
        heads: 2,
        key_dim: 16,
        ffn: Some(64),
        norm: Norm::Post,
        ln_eps: 1e-3,
        head_hidden: vec![128, 16],
        out_dim: 1,
        out_bias: true,
        direction: Visibility::Padding,
        continuous: Some(ContinuousInputs {
            hidden: 128,
            dim: 32,
            sites: cities
                .iter()
                .map(|c| vec![c.latitude, c.longitude])
                .collect(),
            lag_rows: (lag > 0).then_some(lag + 1),
            fuse: 64,
            item_embedding: false,
        }),
    }
}

/// EFA input of `days`: for each day, each city masked in turn (city order). Tokens are the
/// city index of each position (tiled over lag days), `weights` the temperatures (the masked
/// one 0), `values` the lag indicators, no padding; the sequence id (`group`) of a sample is
/// its day's index.
pub fn efa_samples(days: &[TempDay], n_cities: usize) -> Result<Samples, PaperError> {
    let mut rows = Vec::with_capacity(days.len() * n_cities);
    for day in days {
        for i in 0..n_cities {
            rows.push(
                day.sample(i)
                    .map_err(|e| PaperError::Samples(format!("day {:?}: {e}", day.date)))?,
            );
        }
    }
    let n = rows.len();
    let w = rows.first().map_or(n_cities, |s| s.temps.len());
    if let Some((r, s)) = rows.iter().enumerate().find(|(_, s)| s.temps.len() != w) {
        return Err(PaperError::Samples(format!(
            "temperature sample {r}: {} positions, expected {w}",
            s.temps.len()
        )));
    }
    Ok(Samples {
        tokens: Array2::from_shape_fn((n, w), |(_, j)| j % n_cities),
        values: Some(Array2::from_shape_fn((n, w), |(i, j)| rows[i].lag_ids[j])),
        weights: Some(Array2::from_shape_fn((n, w), |(i, j)| rows[i].temps[j])),
        center: None,
        lengths: vec![w; n],
        pred_idx: rows.iter().map(|s| s.masked_idx).collect(),
        targets: Targets::Real(rows.iter().map(|s| s.target).collect()),
        // A day's samples share every input but their own target's.
        group: Some((0..n).map(|r| r / n_cities.max(1)).collect()),
    })
}

/// The recipe of §6.2 / §6.3: Adam 1e-3; without lags batch 10,000 (one full batch per epoch),
/// 2000 epochs; with lags batch 128, 200 epochs; patience = epochs (best weights restored).
pub fn efa_train_config(lag: usize, epochs: Option<usize>, seed: u64) -> TrainConfig {
    let (bs, e) = if lag == 0 { (10_000, 2000) } else { (128, 200) };
    let e = epochs.unwrap_or(e);
    TrainConfig {
        lr: 1e-3,
        batch_size: bs,
        max_epochs: e,
        patience: e,
        seed,
        eval_batch: 1024,
        batching: Default::default(),
    }
}

/// The EFA run for `layers` blocks and `lag` previous days.
pub fn efa_spec(
    data: &TemperatureData,
    layers: usize,
    lag: usize,
    train_config: TrainConfig,
    init_seed: u64,
) -> Result<RunSpec, PaperError> {
    let c = data.table.cities.len();
    Ok(RunSpec {
        key: RunKey {
            layers: Some(layers),
            lag: Some(lag),
            ..RunKey::new(ModelKind::Efa)
        },
        model: ModelConfig::Efa(efa_config(&data.table.cities, layers, lag)),
        objective: Objective::Mse,
        paper: paper_efa(layers, lag).unwrap_or(f64::NAN),
        train: efa_samples(&data.train, c)?,
        val: efa_samples(&data.val, c)?,
        test: efa_samples(&data.test, c)?,
        train_config,
        init_seed,
        plan: None,
    })
}

/// Options of the temperature experiment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, clap::Args)]
pub struct Options {
    /// EFA blocks (default: 1, 2 and 4 without lags, 4 with lags).
    #[arg(long, value_parser = |s: &str| parse_checked(s, |&l| check_layers(l)))]
    pub layers: Option<usize>,
    /// Previous days in the context (0, 1 or 2).
    #[arg(long, default_value_t = 0, value_parser = |s: &str| parse_checked(s, |&l| check_lag(l)))]
    pub lag: usize,
    /// Models to run.
    #[arg(long, value_enum, default_value_t = Models::Both)]
    pub model: Models,
    /// Neighbour counts of the FM (comma-separated).
    #[arg(long, value_delimiter = ',',
        default_values_t = vec![1, 2, 3, 4, 5, 10, 15, 20, 25, 30, 35, 40],
        value_parser = |s: &str| parse_checked(s, |&k| at_least_one("k", k)))]
    pub k: Vec<usize>,
    /// Epochs of each FM run (its recipe is unknown; Adam 1e-3, batch 256, no early stop); a
    /// smaller `--epochs` caps it too.
    #[arg(long, default_value_t = 200,
        value_parser = |s: &str| parse_checked(s, |&e| at_least_one("fm_epochs", e)))]
    pub fm_epochs: usize,
    /// Train each EFA once per seed (comma-separated, replacing --seed for the EFA) and report
    /// the spread of test MSE beside the paper's figure, which is a single run.
    #[arg(long, value_delimiter = ',')]
    pub seeds: Vec<u64>,
    /// Data directory and protocol.
    #[command(flatten)]
    #[serde(flatten)]
    pub data: DataOptions,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            layers: None,
            lag: 0,
            model: Models::Both,
            k: vec![1, 2, 3, 4, 5, 10, 15, 20, 25, 30, 35, 40],
            fm_epochs: 200,
            seeds: Vec::new(),
            data: DataOptions::default(),
        }
    }
}

impl Options {
    /// Checks the options before any data are read, naming the field: `layers` in
    /// `1..=MAX_LAYERS`; `lag` at most [`MAX_LAG`]; `seeds` only where an EFA runs and
    /// without repeats; where the FM runs, `fm_epochs` at least 1 and `k` not empty, every k at
    /// least 1 and none repeated (the upper bound, the number of cities − 1, is checked once
    /// the cities are known).
    pub fn validate(&self) -> Result<(), PaperError> {
        if let Some(l) = self.layers {
            check_layers(l)?;
        }
        check_lag(self.lag)?;
        if !self.seeds.is_empty() && self.model == Models::Fm {
            return Err(PaperError::setting(
                "seeds",
                format!("{:?}", self.seeds),
                "sets the EFA's seeds, but model = fm runs no EFA (the FM uses the run seed)",
            ));
        }
        if self.model != Models::Efa {
            at_least_one("fm_epochs", self.fm_epochs)?;
            if self.k.is_empty() || self.k.contains(&0) {
                return Err(PaperError::setting(
                    "k",
                    format!("{:?}", self.k),
                    "needs neighbour counts of at least 1",
                ));
            }
            if let Some(k) = first_repeat(&self.k) {
                return Err(PaperError::setting("k", k, "is given twice"));
            }
        }
        if let Some(s) = first_repeat(&self.seeds) {
            return Err(PaperError::setting("seeds", s, "is given twice"));
        }
        Ok(())
    }
}

/// The temperature experiment with its data (and, for lag models, the lag-0 data of the FM);
/// under the clean protocol the data are standardised (see `temperature_clean`).
pub struct Temperature {
    options: Options,
    data: TemperatureData,
    fm_data: Option<TemperatureData>,
    clean: Option<Standardiser>,
    source: PaperData,
}

impl Temperature {
    /// Checks the options and loads the data.
    pub fn new(options: &Options) -> Result<Self, PaperError> {
        options.validate()?;
        let source = options.data.verified(DataSet::Temperature)?;
        let dir = &source.dir;
        let mut data = load(dir, options.lag)?;
        let mut fm_data = if options.lag > 0 && options.model != Models::Efa {
            Some(load(dir, 0)?)
        } else {
            None
        };
        let clean = match options.data.protocol {
            Protocol::Paper => None,
            Protocol::Clean => {
                // μ, σ from the training days' own temperatures, the same for the FM's data.
                let st = Standardiser::fit(&data)?;
                data = st.data(&data);
                fm_data = fm_data.map(|d| st.data(&d));
                Some(st)
            }
        };
        Ok(Self {
            options: options.clone(),
            data,
            fm_data,
            clean,
            source,
        })
    }

    fn layer_list(&self) -> Vec<usize> {
        match (self.options.layers, self.options.lag) {
            (Some(l), _) => vec![l],
            (None, 0) => vec![1, 2, 4],
            (None, _) => vec![4],
        }
    }
}

/// Test MSE of one EFA setting over several seeds, against the paper's single run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SeedSpread {
    /// Setting, e.g. `"L=1"`.
    pub setting: String,
    /// Seeds, in run order.
    pub seeds: Vec<u64>,
    /// Test MSE per seed.
    pub values: Vec<f64>,
    /// Smallest value.
    pub min: f64,
    /// Median (mean of the middle two for an even count).
    pub median: f64,
    /// Largest value.
    pub max: f64,
    /// The paper's figure.
    pub paper: f64,
    /// Runs at most 1% above the paper's value.
    pub within_1pct: usize,
}

impl SeedSpread {
    /// The spread of `values` (not empty), one per seed of `seeds`.
    pub fn new(setting: String, seeds: &[u64], values: Vec<f64>, paper: f64) -> Self {
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            0.5 * (sorted[n / 2 - 1] + sorted[n / 2])
        };
        SeedSpread {
            setting,
            seeds: seeds.to_vec(),
            min: sorted[0],
            median,
            max: sorted[n - 1],
            paper,
            within_1pct: values.iter().filter(|&&v| v <= 1.01 * paper).count(),
            values,
        }
    }
}

impl Experiment for Temperature {
    fn name(&self) -> String {
        let clean = if self.clean.is_some() { "-clean" } else { "" };
        format!("temperature-lag{}{clean}", self.options.lag)
    }

    fn describe(&self) -> Vec<String> {
        let d = &self.data;
        let protocol = match &self.clean {
            None => self.options.data.protocol.describe(false).to_string(),
            Some(st) => format!(
                "protocol: clean (temperatures standardised with μ = {:.3} °F, σ = {:.3} °F from \
                 the training days, coordinates standardised; minibatches of {CLEAN_BATCH} (FM \
                 256), early stopping with patience {CLEAN_PATIENCE}; MSE in °F²)",
                st.temp_mean, st.temp_std
            ),
        };
        let mut lines = vec![
            protocol,
            format!(
                "temperature: {} cities, {} / {} / {} samples, lag {}",
                d.table.cities.len(),
                d.n_samples(&d.train),
                d.n_samples(&d.val),
                d.n_samples(&d.test),
                self.options.lag
            ),
        ];
        if self.options.model != Models::Efa {
            lines.push(
                "FM baseline: the paper's code is not published; k nearest cities by Haversine \
                 distance is a best guess (docs/paper.md §6.4, unverified)"
                    .into(),
            );
        }
        lines
    }

    fn other_data(&self) -> &[Mismatch] {
        &self.source.other
    }

    fn grid(&self, s: &RunSettings) -> Result<Vec<RunSpec>, PaperError> {
        let lag = self.options.lag;
        let mut out = Vec::new();
        if self.options.model != Models::Fm {
            let one = [s.seed];
            let seeds: &[u64] = if self.options.seeds.is_empty() {
                &one
            } else {
                &self.options.seeds
            };
            for l in self.layer_list() {
                for &seed in seeds {
                    let cfg = match self.clean {
                        None => efa_train_config(lag, s.epochs, seed),
                        Some(_) => clean_train_config(CLEAN_BATCH, s.epochs, seed),
                    };
                    let mut spec = efa_spec(&self.data, l, lag, cfg, seed)?;
                    if let (Some(st), ModelConfig::Efa(c)) = (&self.clean, &spec.model) {
                        spec.model = ModelConfig::Efa(st.sites(c.clone()));
                        spec.objective = st.objective();
                        // Minibatches of whole days (the samples' sequence ids): a day's 44
                        // targets share their inputs.
                        spec.train_config.batching = Batching::Sequences;
                    }
                    if seeds.len() > 1 {
                        spec.key.spread_seed = Some(seed);
                    }
                    out.push(spec);
                }
            }
        }
        if self.options.model != Models::Efa {
            let data = self.fm_data.as_ref().unwrap_or(&self.data);
            for &k in &self.options.k {
                // `epochs` caps every model, the FM's own recipe length included.
                let epochs = s
                    .epochs
                    .map_or(self.options.fm_epochs, |e| e.min(self.options.fm_epochs));
                let cfg = match self.clean {
                    None => fm_train_config(epochs, s.seed),
                    Some(_) => clean_train_config(256, Some(epochs), s.seed),
                };
                let mut spec = fm_spec(data, k, cfg, s.seed)?;
                if let Some(st) = &self.clean {
                    spec.objective = st.objective();
                }
                out.push(spec);
            }
        }
        Ok(out)
    }

    /// The FM test MSE against k beside the paper's (Figure 6), and with several seeds the
    /// spread of each EFA setting's test MSE beside the paper's single run.
    fn analyse(&self, runs: &[TrainedRun<'_>]) -> Result<Analysis, PaperError> {
        let mut a = Analysis::default();
        let mut spreads = Vec::new();
        if self.options.seeds.len() > 1 {
            for l in self.layer_list() {
                let key = RunKey {
                    layers: Some(l),
                    lag: Some(self.options.lag),
                    ..RunKey::new(ModelKind::Efa)
                };
                let setting = key.setting();
                let values: Vec<f64> = runs
                    .iter()
                    .filter(|r| {
                        let k = &r.spec.key;
                        k.spread_seed.is_some()
                            && RunKey {
                                spread_seed: None,
                                ..k.clone()
                            } == key
                    })
                    .map(|r| r.result.value)
                    .collect();
                if values.is_empty() {
                    continue;
                }
                let paper = paper_efa(l, self.options.lag).unwrap_or(f64::NAN);
                spreads.push(SeedSpread::new(setting, &self.options.seeds, values, paper));
            }
        }
        if !spreads.is_empty() {
            a.lines
                .push("EFA test MSE over seeds (the paper's figure is a single run):".into());
            a.lines.push(format!(
                "{:<16} | {:>4} | {:>10} | {:>10} | {:>10} | {:>8} | runs ≤ paper + 1%",
                "setting", "runs", "min", "median", "max", "paper"
            ));
            for s in &spreads {
                a.lines.push(format!(
                    "{:<16} | {:>4} | {:>10.6} | {:>10.6} | {:>10.6} | {:>8.3} | {}",
                    s.setting,
                    s.values.len(),
                    s.min,
                    s.median,
                    s.max,
                    s.paper,
                    s.within_1pct
                ));
            }
        }
        let fm_points: Vec<(f64, f64)> = runs
            .iter()
            .filter(|r| r.spec.key.model == ModelKind::Fm)
            .filter_map(|r| Some((r.spec.key.k? as f64, r.result.value)))
            .collect();
        a.json.insert("fm_unverified".into(), json!(true));
        a.json.insert("fm_test_mse_by_k".into(), json!(fm_points));
        a.json.insert("efa_seed_spread".into(), json!(spreads));
        if let (Some(first), Some(last)) = (fm_points.first(), fm_points.last()) {
            let (k0, k1) = (first.0, last.0);
            let mut series = vec![
                ("FM k-nearest (ours)".to_string(), fm_points.clone()),
                (
                    "FM (paper)".to_string(),
                    PAPER_FM.iter().map(|&(k, v)| (k as f64, v)).collect(),
                ),
            ];
            if let Some(e) = runs.iter().find(|r| r.spec.key.model == ModelKind::Efa) {
                let v = e.result.value;
                series.push((
                    format!("EFA {} (ours)", e.result.setting),
                    vec![(k0, v), (k1, v)],
                ));
            }
            series.push((
                "EFA L=1 (paper)".to_string(),
                vec![(k0, 17.135), (k1, 17.135)],
            ));
            a.figures.push(Figure::Lines {
                file: "fm_vs_k.svg".into(),
                title: "temperature: test MSE against k".into(),
                x_label: "k (nearest cities)".into(),
                y_label: "test MSE (°F²)".into(),
                series,
            });
        }
        Ok(a)
    }
}
