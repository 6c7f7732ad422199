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
//!
//! MovieLens ratings (§4, variant v1): one sequence per *sample*, in the paper's sample order
//! (train and validation in the order of its per-sample split, test by user then position):
//! `seq` = `u<user>-p<position>` (the user's index in its frame), the user's movies in time
//! order (`item` = the movie's new id 1..50, `order` = the position) with `value` = rating − 1
//! (the count v1 models, 0..2), and a `target` column marking the sample's target row;
//! unidirectional samples hold the rows up to their target. One sequence per sample is what
//! keeps the order of the samples, and so the minibatches of every epoch, the paper's. The
//! model is [`crate::synthetic::efa_config`] with the 5-row rating table (row `value + 1` =
//! the rating, row 4 the \[MASK\]), the loss the paper's v1 loss on the counts (`loss =
//! "poisson_v1"`, a `poisson` family), and the recipe `TrainConfig::paper`.

use crate::movielens::{exp2_data, Protocol, Variant};
use crate::temperature::{efa_config, efa_train_config, load};
use crate::PaperError;
use efa_data::samples::{CompactRatingTable, Direction, RatingData, Split};
use efa_data::temperature::TempDay;
use efa_model::ModelConfig;
use efa_train::recipe::TrainConfig;
use efa_train::userdata::{Families, FamilySpec, UserConfig, UserLoss};
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
    /// Marks the export as made from data files other than the paper's: a comment at the top
    /// of `model.toml` naming each file and how it differs.
    pub fn mark_other_data(&mut self, other: &[crate::paper_data::Mismatch]) {
        if other.is_empty() {
            return;
        }
        let mut head = String::from(
            "# NOT THE PAPER'S DATA: exported from files other than the paper's, so a run of \
             this export does not reproduce the paper's numbers:\n",
        );
        for m in other {
            let _ = writeln!(head, "#   {m}");
        }
        for (name, text) in &mut self.files {
            if *name == "model.toml" {
                text.insert_str(0, &head);
            }
        }
    }

    /// Writes every file into `out` (created if missing); returns the paths written.
    pub fn write(&self, out: &Path) -> Result<Vec<PathBuf>, PaperError> {
        let io = |p: &Path, e: std::io::Error| PaperError::Data(efa_data::DataError::io(p, e));
        std::fs::create_dir_all(out).map_err(|e| {
            PaperError::Data(efa_data::DataError::in_file(
                out,
                format!("cannot create the output directory: {e}"),
            ))
        })?;
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
        direction: Direction::Bi,
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
        "# The temperature EFA (docs/paper.md §6) with {layers} block(s) and lag {lag}, exported \
         by `efa export temperature`.\n# Train: efa train --config model.toml --data train.csv \
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

/// The CSV of the `split` samples of `data` in the user layout with a `target` column, one
/// sequence per sample (see the module docs); the ratings are written as counts `rating − 1`.
pub fn ratings_csv(data: &RatingData, split: Split, dir: Direction) -> String {
    let (refs, seqs, _) = data.split(split);
    let mut s = String::from("seq,order,item,value,target\n");
    for r in refs {
        let seq = &seqs[r.seq];
        let end = match dir {
            Direction::Bi => seq.len(),
            Direction::Uni => r.pos + 1,
        };
        for (p, &(movie, rating)) in seq.iter().enumerate().take(end) {
            let _ = writeln!(
                s,
                "u{}-p{},{p},{movie},{},{}",
                r.seq,
                r.pos,
                rating - 1.0,
                u8::from(p == r.pos)
            );
        }
    }
    s
}

/// Checks that the v1 user layout reproduces the paper's inputs exactly: every rating an
/// integer 1..=rows − 2 whose table row is the rating itself (so the user's row `value + 1`,
/// value = rating − 1, is the paper's row), and both [MASK] values on the last row.
fn check_rating_rows(data: &RatingData, source: &Path) -> Result<CompactRatingTable, PaperError> {
    let table = crate::synthetic::rating_table(data)?;
    let rows = table.rows();
    let bad = |what: String| {
        PaperError::Samples(format!(
            "{}: MovieLens ratings cannot be written as counts for `efa train`: {what}",
            source.display()
        ))
    };
    for (frame, seqs) in [("train+validation", &data.trainval), ("test", &data.test)] {
        for (k, seq) in seqs.iter().enumerate() {
            for (p, &(_, r)) in seq.iter().enumerate() {
                let ok = r.fract() == 0.0
                    && r >= 1.0
                    && (r as usize) + 2 <= rows
                    && table.row(r).ok() == Some(r as usize);
                if !ok {
                    return Err(bad(format!(
                        "{frame} user {k} position {p}: rating {r} is not an integer 1..={} \
                         on its own table row",
                        rows.saturating_sub(2)
                    )));
                }
            }
        }
    }
    for mask in [data.trainval_mask, data.test_mask] {
        if table.row(mask).ok() != Some(rows - 1) {
            return Err(bad(format!(
                "the [MASK] rating {mask} is not on the table's last row {}",
                rows.saturating_sub(1)
            )));
        }
    }
    Ok(table)
}

/// The error for a variant without a user layout (every one but v1).
pub fn variant_error(variant: Variant) -> PaperError {
    PaperError::Setting {
        field: "variant",
        value: variant.name().into(),
        reason: "only v1 exports: v2's loss reads the rating (1..3) while the user layout \
                 embeds context values on row value + 1, which needs the counts 0..2 to keep \
                 the paper's 5-row rating table"
            .into(),
    }
}

/// The `efa train` export of MovieLens exp-2 (docs/paper.md §4) with the EFA in `direction`,
/// read from `dir/movielens/u.data` under `protocol`, trained for `epochs` (default the
/// paper's 1000 with early stopping) with `seed`. Only variant v1 has a user layout: v2's
/// loss reads the rating itself while its context rows embed the same value column, which
/// the user layout (row `value + 1`) cannot give the paper's 5-row table.
pub fn movielens_ratings(
    data_dir: &Path,
    variant: Variant,
    direction: Direction,
    protocol: Protocol,
    epochs: Option<usize>,
    seed: u64,
) -> Result<Export, PaperError> {
    if variant != Variant::V1 {
        return Err(variant_error(variant));
    }
    let data = exp2_data(data_dir, protocol)?;
    let table = check_rating_rows(&data, &data_dir.join("movielens/u.data"))?;
    let model = crate::synthetic::efa_config(51, table.rows(), data.max_ctx);
    let cfg = UserConfig {
        model: ModelConfig::Efa(model),
        family: Families::All(FamilySpec::Poisson {}),
        direction,
        train: TrainConfig::paper(epochs.unwrap_or(1000), seed),
        init_seed: seed,
        loss: UserLoss::PoissonV1,
    };
    let toml = cfg.to_toml()?;
    let name = match direction {
        Direction::Bi => "bi",
        Direction::Uni => "uni",
    };
    let head = format!(
        "# MovieLens exp-2 v1 (docs/paper.md §4), the {name}directional EFA, exported by `efa \
         export movielens-ratings`.\n# Values are counts (rating − 1); one sequence per sample.\n\
         # Train: efa train --config model.toml --data train.csv --valid valid.csv --test \
         test.csv\n"
    );
    Ok(Export {
        files: vec![
            ("train.csv", ratings_csv(&data, Split::Train, direction)),
            ("valid.csv", ratings_csv(&data, Split::Val, direction)),
            ("test.csv", ratings_csv(&data, Split::Test, direction)),
            ("model.toml", head + &toml),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_directory_that_cannot_be_created_is_named_as_such() {
        // A path that is a file, and one below a file: the error said only "File exists" /
        // "Not a directory" after the path, not that it was the output directory.
        let file = std::env::temp_dir().join(format!("efa-export-out-{}", std::process::id()));
        std::fs::write(&file, "x").unwrap();
        let export = Export {
            files: vec![("a.csv", "x\n".to_string())],
        };
        for out in [file.clone(), file.join("sub")] {
            let e = export.write(&out).unwrap_err().to_string();
            let want = format!("{}: cannot create the output directory: ", out.display());
            assert!(e.starts_with(&want), "{e}");
        }
        std::fs::remove_file(&file).unwrap();
    }

    fn data(ratings: &[f64]) -> RatingData {
        let seq: Vec<(usize, f64)> = ratings
            .iter()
            .enumerate()
            .map(|(k, &r)| (k + 1, r))
            .collect();
        let trainval = vec![seq.clone(), seq.clone(), seq.clone(), seq.clone()];
        RatingData::new(trainval, vec![seq], None, 42).unwrap()
    }

    /// Integer ratings 1..3 map to their own rows (the counts' row `value + 1`); a rating the
    /// counts cannot carry is an error naming the source file, frame, user and position.
    #[test]
    fn rating_rows_are_checked_against_the_user_layout() {
        let src = Path::new("data/movielens/u.data");
        let table = check_rating_rows(&data(&[1.0, 3.0, 2.0]), src).unwrap();
        assert_eq!(table.rows(), 5);
        let e = check_rating_rows(&data(&[1.0, 2.5, 3.0]), src)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("data/movielens/u.data")
                && e.contains("user 0 position 1: rating 2.5 is not an integer"),
            "{e}"
        );
        // A rating below 1 has no count (its key would share the padding row).
        let e = check_rating_rows(&data(&[0.0, 1.0, 2.0]), src)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rating 0 is not an integer"), "{e}");
    }
}
