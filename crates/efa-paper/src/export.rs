//! The paper's data sets as `efa train` inputs (`efa export`): the split CSVs in the user
//! layout (`seq,order,item,value[,lag]`), the item-feature table and a `model.toml` whose run,
//! trained with `efa train`, is the run of `efa reproduce` with the same settings and seed.
//!
//! Temperature (§6): one sequence per day (`seq` = the date), the day's cities in city order
//! (`item` = city index 0..n, `order` = `lag·n + city`) followed by each lag day's cities
//! (`lag` = 1, 2, …, context only); `items.csv` holds each city's latitude and longitude. The
//! model is [`crate::temperature::efa_config`] with `items` = the number of cities (continuous
//! inputs have no padding row), the loss the paper's MSE (`loss = "mse"` with a
//! `gaussian_known_var` family of `s2 = 1`), and the recipe [`crate::temperature::efa_train_config`].
//! Each day's lag-0 rows are the targets, in city order: the samples, their order and their
//! inputs are those of [`crate::temperature::efa_samples`], bit for bit.

use crate::temperature::{efa_config, efa_train_config, load};
use crate::PaperError;
use efa_data::temperature::TempDay;
use efa_model::ModelConfig;
use efa_train::userdata::{Families, FamilySpec, SeqDirection, UserConfig, UserLoss};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The files of an export, as text.
#[derive(Clone, Debug, PartialEq)]
pub struct Export {
    /// `(file name, contents)`: `train.csv`, `valid.csv`, `test.csv`, `items.csv`,
    /// `model.toml`.
    pub files: Vec<(&'static str, String)>,
}

impl Export {
    /// Writes every file into `out` (created if missing); returns the paths written.
    pub fn write(&self, out: &Path) -> Result<Vec<PathBuf>, PaperError> {
        let io = |p: &Path, e: std::io::Error| PaperError::Data(efa_data::DataError::io(p, e));
        std::fs::create_dir_all(out).map_err(|e| io(out, e))?;
        let mut written = Vec::new();
        for (name, text) in &self.files {
            let p = out.join(name);
            std::fs::write(&p, text).map_err(|e| io(&p, e))?;
            written.push(p);
        }
        Ok(written)
    }
}

/// The CSV of `days` (`n` cities each) in the user layout, with a `lag` column when the days
/// carry lags. Values are written in Rust's shortest round-trip form, so they read back to
/// the same f64.
pub fn temperature_csv(days: &[TempDay], n: usize) -> String {
    let lags = days.first().is_some_and(|d| !d.lags.is_empty());
    let mut s = String::from(if lags {
        "seq,order,item,value,lag\n"
    } else {
        "seq,order,item,value\n"
    });
    for day in days {
        let (y, m, d) = day.date;
        let seq = format!("{y}-{m:02}-{d:02}");
        for (lag, temps) in std::iter::once(&day.temps).chain(&day.lags).enumerate() {
            for (city, t) in temps.iter().enumerate().take(n) {
                let _ = write!(s, "{seq},{},{city},{t}", lag * n + city);
                if lags {
                    let _ = write!(s, ",{lag}");
                }
                s.push('\n');
            }
        }
    }
    s
}

/// The `efa train` export of the temperature EFA with `layers` blocks and `lag` previous
/// days, read from `dir` (`dir/temperature/…`), trained for `epochs` (default the paper's)
/// with `seed` (shuffles and initialisation, as `efa reproduce --seed`).
pub fn temperature(
    dir: &Path,
    layers: usize,
    lag: usize,
    epochs: Option<usize>,
    seed: u64,
) -> Result<Export, PaperError> {
    crate::temperature::check_layers(layers)?;
    let data = load(dir, lag)?;
    let cities = &data.table.cities;
    let n = cities.len();
    let mut model = efa_config(cities, layers, lag);
    model.items = n;
    if let Some(c) = model.continuous.as_mut() {
        // The site table comes from items.csv (`efa train --items`).
        c.sites = Vec::new();
    }
    let cfg = UserConfig {
        model: ModelConfig::Efa(model),
        family: Families::All(FamilySpec::GaussianKnownVar { s2: 1.0 }),
        direction: SeqDirection::Bi,
        train: efa_train_config(lag, epochs, seed),
        init_seed: seed,
        loss: UserLoss::Mse,
    };
    let mut items = String::from("item,latitude,longitude\n");
    for (k, c) in cities.iter().enumerate() {
        let _ = writeln!(items, "{k},{},{}", c.latitude, c.longitude);
    }
    let toml = cfg.to_toml()?;
    let head = format!(
        "# The temperature EFA (PAPER.md §6) with {layers} block(s) and lag {lag}, exported by \
         `efa export temperature`.\n# Train: efa train --config model.toml --data train.csv \
         --valid valid.csv --test test.csv --items items.csv\n"
    );
    Ok(Export {
        files: vec![
            ("train.csv", temperature_csv(&data.train, n)),
            ("valid.csv", temperature_csv(&data.val, n)),
            ("test.csv", temperature_csv(&data.test, n)),
            ("items.csv", items),
            ("model.toml", head + &toml),
        ],
    })
}
