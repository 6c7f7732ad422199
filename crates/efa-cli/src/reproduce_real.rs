//! `efa reproduce movielens-items | movielens-ratings | instacart | temperature`: the paper's
//! real-data experiments (PAPER.md §3–§6).

use crate::plot::{heat_map, line_chart, Series};
use crate::report::{print_table, train_with_bar, write_file, write_outputs};
use crate::reproduce_cmd::{set_threads, Directions, Models};
use crate::CliError;
use clap::{Args, ValueEnum};
use efa_model::experiments::movielens::{self as ml, Protocol, Variant};
use efa_model::experiments::{instacart, temperature, RunResult, RunSpec};
use efa_model::train::{Batching, TrainConfig};
use efa_model::{Direction, ModelConfig};
use serde::Serialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// `--protocol`.
#[derive(Clone, Copy, Debug, ValueEnum, Serialize, PartialEq, Eq)]
pub enum ProtocolArg {
    /// Exactly the notebooks' filters, tie-breaks and splits, quirks included.
    Paper,
    /// All users used, validation split by user.
    Clean,
}

/// Options shared by the real-data experiments.
#[derive(Args, Serialize)]
pub struct RealCommon {
    /// Most epochs per model (default: the paper's for the experiment).
    #[arg(long)]
    epochs: Option<usize>,
    /// Seed of parameter initialisation and minibatch shuffling (the data's own seeds are the
    /// paper's and fixed).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Output directory for results.json and the SVG plots.
    #[arg(long)]
    out: Option<PathBuf>,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
    /// Data directory holding movielens/, instacart/ and temperature/ (default ../shared/data).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Split protocol.
    #[arg(long, value_enum, default_value_t = ProtocolArg::Paper)]
    protocol: ProtocolArg,
}

/// `--batching` of the item experiments.
#[derive(Clone, Copy, Debug, ValueEnum, Serialize, PartialEq, Eq)]
pub enum BatchingArg {
    /// The paper: shuffled samples, minibatches of 256.
    Samples,
    /// Unidirectional EFA only: shuffled baskets, minibatches of whole baskets (at most 256
    /// samples), so the causal model computes all targets of a basket in one pass (the
    /// query-stream shortcut; same per-sample losses, different minibatch composition).
    Sequences,
}

impl BatchingArg {
    /// The training batching of one run: sequences only for a causal EFA whose training
    /// samples carry sequence ids (where the query stream applies); every other model keeps
    /// the paper's sample batches.
    pub(crate) fn for_spec(self, spec: &RunSpec) -> Batching {
        let causal_efa =
            matches!(&spec.model, ModelConfig::Efa(c) if c.direction == Direction::Causal);
        if causal_efa && spec.train.group.is_some() {
            self.requested()
        } else {
            Batching::Samples
        }
    }

    /// The batching asked for.
    pub(crate) fn requested(self) -> Batching {
        match self {
            BatchingArg::Samples => Batching::Samples,
            BatchingArg::Sequences => Batching::Sequences,
        }
    }
}

/// `"samples"` or `"sequences"`, as reported in outputs.
pub(crate) fn batching_name(b: Batching) -> &'static str {
    match b {
        Batching::Samples => "samples",
        Batching::Sequences => "sequences",
    }
}

/// `efa reproduce movielens-items`.
#[derive(Args, Serialize)]
pub struct MlItemsArgs {
    /// Directions to run.
    #[arg(long, value_enum, default_value_t = Directions::Both)]
    direction: Directions,
    /// Models to run.
    #[arg(long, value_enum, default_value_t = Models::Both)]
    model: Models,
    /// Minibatch composition.
    #[arg(long, value_enum, default_value_t = BatchingArg::Samples)]
    batching: BatchingArg,
    #[command(flatten)]
    #[serde(flatten)]
    common: RealCommon,
}

/// `--variant` of exp-2.
#[derive(Clone, Copy, Debug, ValueEnum, Serialize, PartialEq, Eq)]
pub enum VariantArg {
    /// y − 1 ~ Poisson(e^η).
    V1,
    /// y ~ Poisson(1 + e^η).
    V2,
}

/// `efa reproduce movielens-ratings`.
#[derive(Args, Serialize)]
pub struct MlRatingsArgs {
    /// Loss variant.
    #[arg(long, value_enum, default_value_t = VariantArg::V1)]
    variant: VariantArg,
    /// Directions to run.
    #[arg(long, value_enum, default_value_t = Directions::Both)]
    direction: Directions,
    /// Models to run.
    #[arg(long, value_enum, default_value_t = Models::Both)]
    model: Models,
    #[command(flatten)]
    #[serde(flatten)]
    common: RealCommon,
}

/// `efa reproduce instacart`.
#[derive(Args, Serialize)]
pub struct InstacartArgs {
    /// Directions to run.
    #[arg(long, value_enum, default_value_t = Directions::Both)]
    direction: Directions,
    /// Models to run.
    #[arg(long, value_enum, default_value_t = Models::Both)]
    model: Models,
    /// Minibatch composition.
    #[arg(long, value_enum, default_value_t = BatchingArg::Samples)]
    batching: BatchingArg,
    #[command(flatten)]
    #[serde(flatten)]
    common: RealCommon,
}

/// `efa reproduce temperature`.
#[derive(Args, Serialize)]
pub struct TemperatureArgs {
    /// EFA blocks (default: 1, 2 and 4 without lags, 4 with lags).
    #[arg(long)]
    layers: Option<usize>,
    /// Previous days in the context (0, 1 or 2).
    #[arg(long, default_value_t = 0)]
    lag: usize,
    /// Models to run.
    #[arg(long, value_enum, default_value_t = Models::Both)]
    model: Models,
    /// Neighbour counts of the FM (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 2, 3, 4, 5, 10, 15, 20, 25, 30, 35, 40])]
    k: Vec<usize>,
    /// Epochs of each FM run (its recipe is unknown; Adam 1e-3, batch 256, no early stop).
    #[arg(long, default_value_t = 200)]
    fm_epochs: usize,
    /// Train each EFA once per seed (comma-separated, replacing --seed for the EFA) and print
    /// the spread of test MSE beside the paper's figure, which is a single run.
    #[arg(long, value_delimiter = ',')]
    seeds: Vec<u64>,
    #[command(flatten)]
    #[serde(flatten)]
    common: RealCommon,
}

/// A user-facing error; configuration errors (missing data files, bad values) are shown
/// without the model-configuration prefix.
pub(crate) fn cli(e: impl std::fmt::Display + 'static) -> CliError {
    match (&e as &dyn std::any::Any).downcast_ref::<efa_model::ModelError>() {
        Some(efa_model::ModelError::Config(s)) => CliError::new(s.clone()),
        _ => CliError::new(e.to_string()),
    }
}

fn data_dir(c: &RealCommon) -> Result<PathBuf, CliError> {
    resolve_data_dir(c.data.as_ref())
}

/// `--data DIR` if it is a directory, else `../shared/data` when it exists, else an error
/// saying where each data set comes from.
pub(crate) fn resolve_data_dir(data: Option<&PathBuf>) -> Result<PathBuf, CliError> {
    match data {
        Some(p) if p.is_dir() => Ok(p.clone()),
        Some(p) => Err(CliError::new(format!("--data {}: not a directory", p.display()))),
        None => efa_data::default_data_dir().ok_or_else(|| {
            CliError::new(
                "no data directory: ../shared/data does not exist here; pass --data DIR with DIR/movielens/u.data \
                 (GroupLens MovieLens 100K), DIR/instacart/{items,baskets_train,baskets_test}.csv (Kaggle Instacart \
                 Market Basket Analysis, prepared as in PAPER.md §5.1) and DIR/temperature/{us_cities_fall,cities}.csv \
                 (University of Dayton / Kaggle daily city temperatures)",
            )
        }),
    }
}

fn protocol(c: &RealCommon, differs: bool) -> Protocol {
    let p = match c.protocol {
        ProtocolArg::Paper => Protocol::Paper,
        ProtocolArg::Clean => Protocol::Clean,
    };
    match (p, differs) {
        (Protocol::Paper, _) => eprintln!("protocol: paper (the notebooks' exact filters, tie-breaks and splits, quirks included)"),
        (Protocol::Clean, true) => eprintln!("protocol: clean (all users used, validation split by user; numbers are not comparable to the paper's)"),
        (Protocol::Clean, false) => eprintln!("protocol: clean (this experiment has no split quirk: identical to the paper protocol)"),
    }
    p
}

/// Writes results.json and the loss curves, then adds `analysis` to results.json.
fn finish<C: Serialize>(
    out: &Path,
    name: &str,
    rows: &[RunResult],
    config: &C,
    analysis: Option<Value>,
) -> Result<(), CliError> {
    print_table(rows);
    write_outputs(out, name, rows, config)?;
    if let Some(a) = analysis {
        let path = out.join("results.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| CliError::new(format!("cannot read {}: {e}", path.display())))?;
        let mut v: Value = serde_json::from_str(&text).map_err(cli)?;
        v["analysis"] = a;
        write_file(&path, &serde_json::to_string_pretty(&v).map_err(cli)?)?;
    }
    eprintln!("wrote {}/results.json and loss_curves.svg", out.display());
    Ok(())
}

/// Runs `efa reproduce movielens-items` (PAPER.md §3).
pub fn movielens_items(a: MlItemsArgs) -> Result<(), CliError> {
    set_threads(a.common.threads)?;
    let dir = data_dir(&a.common)?;
    let p = protocol(&a.common, true);
    let data = ml::exp1_data(&dir, p).map_err(cli)?;
    eprintln!(
        "MovieLens exp-1: {} / {} / {} baskets, {} / {} / {} samples, max_len {}",
        data.train.len(),
        data.val.len(),
        data.test.len(),
        ml::ItemData::samples(&data.train),
        ml::ItemData::samples(&data.val),
        ml::ItemData::samples(&data.test),
        data.max_len
    );
    let epochs = a.common.epochs.unwrap_or(2000);
    let mut rows = Vec::new();
    for &uni in a.direction.unidirectional() {
        for &efa in a.model.is_efa() {
            let cfg = TrainConfig::paper(epochs, a.common.seed);
            let mut spec = ml::item_spec(
                &data,
                uni,
                efa,
                ml::exp1_paper_value(uni, efa),
                cfg,
                a.common.seed,
            )
            .map_err(cli)?;
            spec.train_config.batching = a.batching.for_spec(&spec);
            rows.push(train_with_bar(&spec, epochs, a.common.quiet)?.0);
        }
    }
    let out = a
        .common
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("out/movielens-items"));
    finish(&out, "movielens-items", &rows, &a, None)
}

/// Runs `efa reproduce movielens-ratings` (PAPER.md §4) with the mean predicted rating per
/// true rating (Table 2).
pub fn movielens_ratings(a: MlRatingsArgs) -> Result<(), CliError> {
    set_threads(a.common.threads)?;
    let dir = data_dir(&a.common)?;
    let p = protocol(&a.common, true);
    let v = match a.variant {
        VariantArg::V1 => Variant::V1,
        VariantArg::V2 => Variant::V2,
    };
    let data = ml::exp2_data(&dir, p).map_err(cli)?;
    eprintln!(
        "MovieLens exp-2 ({v:?}): {} / {} / {} samples, max_ctx {}",
        data.train.len(),
        data.val.len(),
        data.test_samples.len(),
        data.max_ctx
    );
    let epochs = a.common.epochs.unwrap_or(1000);
    let (mut rows, mut means) = (Vec::new(), Vec::new());
    for &uni in a.direction.unidirectional() {
        for &efa in a.model.is_efa() {
            let cfg = TrainConfig::paper(epochs, a.common.seed);
            let spec = ml::exp2_spec(&data, v, uni, efa, cfg, a.common.seed).map_err(cli)?;
            let (r, params) = train_with_bar(&spec, epochs, a.common.quiet)?;
            let (m, n) =
                ml::mean_prediction_by_rating(&spec.model, &params, &spec.test).map_err(cli)?;
            let paper = ml::exp2_paper_means(v, uni, efa);
            means.push(
                json!({"setting": r.setting, "model": r.model, "true_rating": [1, 2, 3],
                "mean_predicted": m, "paper": paper, "count": n}),
            );
            rows.push(r);
        }
    }
    println!("mean predicted rating (1 + e^η) by true rating 1 / 2 / 3:");
    for m in &means {
        let f = |k: &str| {
            m[k].as_array().map(|a| {
                a.iter()
                    .map(|x| format!("{:.4}", x.as_f64().unwrap_or(f64::NAN)))
                    .collect::<Vec<_>>()
                    .join(" / ")
            })
        };
        println!(
            "  {:<28} {:<4} ours {}   paper {}",
            m["setting"].as_str().unwrap_or(""),
            m["model"].as_str().unwrap_or(""),
            f("mean_predicted").unwrap_or_default(),
            f("paper").unwrap_or_default()
        );
    }
    let name = format!(
        "movielens-ratings-{}",
        if v == Variant::V1 { "v1" } else { "v2" }
    );
    let out = a
        .common
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("out/{name}")));
    finish(
        &out,
        &name,
        &rows,
        &a,
        Some(json!({ "mean_predicted_rating": means })),
    )
}

fn short(name: &str) -> String {
    let n: String = name.chars().take(22).collect();
    if name.chars().count() > 22 {
        format!("{n}…")
    } else {
        n
    }
}

/// Runs `efa reproduce instacart` (PAPER.md §5) with the §5.4 analyses.
pub fn instacart_cmd(a: InstacartArgs) -> Result<(), CliError> {
    set_threads(a.common.threads)?;
    let dir = data_dir(&a.common)?;
    protocol(&a.common, false);
    let exp = instacart::load(&dir).map_err(cli)?;
    let d = &exp.data;
    eprintln!(
        "Instacart: {} / {} / {} baskets, {} / {} / {} samples, max_len {}",
        d.train.len(),
        d.val.len(),
        d.test.len(),
        ml::ItemData::samples(&d.train),
        ml::ItemData::samples(&d.val),
        ml::ItemData::samples(&d.test),
        d.max_len
    );
    let out = a
        .common
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("out/instacart"));
    std::fs::create_dir_all(&out)
        .map_err(|e| CliError::new(format!("cannot create {}: {e}", out.display())))?;
    let name = |id: usize| {
        exp.items
            .get(id - 1)
            .map_or_else(|| format!("item {id}"), |i| i.name.clone())
    };
    let epochs = a.common.epochs.unwrap_or(1000);
    let (mut rows, mut similar, mut maps) = (Vec::new(), Vec::new(), Vec::new());
    for &uni in a.direction.unidirectional() {
        for &efa in a.model.is_efa() {
            let mut spec = instacart::spec(
                &exp,
                uni,
                efa,
                instacart::train_config(epochs, a.common.seed),
                a.common.seed,
            )
            .map_err(cli)?;
            spec.train_config.batching = a.batching.for_spec(&spec);
            let (r, params) = train_with_bar(&spec, epochs, a.common.quiet)?;
            let sim = instacart::similarity(&spec.model, &params, d.n_items).map_err(cli)?;
            println!(
                "{} {}: bought together (top 3 by S = AW + (AW)ᵀ):",
                r.model, r.setting
            );
            for &item in &instacart::EXAMPLE_ITEMS {
                let top = instacart::top_k(&sim, item, 3);
                let names: Vec<String> = top
                    .iter()
                    .map(|&(j, s)| format!("{} ({s:.2})", name(j)))
                    .collect();
                println!("  {:<28} → {}", name(item), names.join(", "));
                similar.push(json!({"setting": r.setting, "model": r.model, "item": item, "name": name(item),
                    "top3": top.iter().map(|&(j, s)| json!({"item": j, "name": name(j), "score": s})).collect::<Vec<_>>()}));
            }
            if let ModelConfig::Efa(cfg) = &spec.model {
                for &bi in &instacart::ATTENTION_BASKETS {
                    let Some(basket) = d.test.get(bi) else {
                        continue;
                    };
                    let layers =
                        instacart::basket_attention(cfg, &params, basket, d.n_items, d.max_len)
                            .map_err(cli)?;
                    let labels: Vec<String> = basket.iter().map(|&t| short(&name(t))).collect();
                    for (l, m) in layers.iter().enumerate() {
                        let file = format!(
                            "attention_{}_basket{bi}_layer{}.svg",
                            if uni { "uni" } else { "bi" },
                            l + 1
                        );
                        let rows_v: Vec<Vec<f64>> =
                            m.rows().into_iter().map(|r| r.to_vec()).collect();
                        let title = format!("{} EFA, test order {}, layer {} (mean over heads; colour clipped at 0.25)", r.setting, exp.test_order_ids[bi], l + 1);
                        write_file(
                            &out.join(&file),
                            &heat_map(&title, &labels, &labels, &rows_v, 0.25),
                        )?;
                        maps.push(json!({"setting": r.setting, "basket": bi, "order_id": exp.test_order_ids[bi], "layer": l + 1, "file": file, "attention": rows_v}));
                    }
                }
            }
            rows.push(r);
        }
    }
    if !maps.is_empty() {
        eprintln!("wrote {} attention heat maps", maps.len());
    }
    finish(
        &out,
        "instacart",
        &rows,
        &a,
        Some(
            json!({"example_items": instacart::EXAMPLE_ITEMS, "bought_together": similar, "attention": maps}),
        ),
    )
}

/// Runs `efa reproduce temperature` (PAPER.md §6) with the FM-vs-k plot (Figure 6).
pub fn temperature_cmd(a: TemperatureArgs) -> Result<(), CliError> {
    if !a.seeds.is_empty() && a.model == Models::Fm {
        return Err(CliError::new(
            "--seeds sets the EFA's seeds, but --model fm runs no EFA (use --seed for the FM)",
        ));
    }
    set_threads(a.common.threads)?;
    let dir = data_dir(&a.common)?;
    protocol(&a.common, false);
    let layer_list = match (a.layers, a.lag) {
        (Some(0), _) => return Err(CliError::new("--layers must be at least 1")),
        (Some(l), _) => vec![l],
        (None, 0) => vec![1, 2, 4],
        (None, _) => vec![4],
    };
    let data = temperature::load(&dir, a.lag).map_err(cli)?;
    eprintln!(
        "temperature: {} cities, {} / {} / {} samples, lag {}",
        data.table.cities.len(),
        data.n_samples(&data.train),
        data.n_samples(&data.val),
        data.n_samples(&data.test),
        a.lag
    );
    let mut rows = Vec::new();
    let mut spreads = Vec::new();
    let one = [a.common.seed];
    let seeds: &[u64] = if a.seeds.is_empty() { &one } else { &a.seeds };
    if a.model != Models::Fm {
        for &l in &layer_list {
            let first = rows.len();
            let mut setting = String::new();
            for &seed in seeds {
                let cfg = temperature::efa_train_config(a.lag, a.common.epochs, seed);
                let epochs = cfg.max_epochs;
                let mut spec = temperature::efa_spec(&data, l, a.lag, cfg, seed).map_err(cli)?;
                if seeds.len() > 1 {
                    setting = std::mem::take(&mut spec.setting);
                    spec.setting = format!("{setting} seed {seed}");
                }
                rows.push(train_with_bar(&spec, epochs, a.common.quiet)?.0);
            }
            if seeds.len() > 1 {
                spreads.push(SeedSpread::new(setting, seeds, &rows[first..]));
            }
        }
    }
    let mut fm_points = Vec::new();
    if a.model != Models::Efa {
        eprintln!("FM baseline: the paper's code is not published; k nearest cities by Haversine distance is a best guess (PAPER.md §6.4, unverified)");
        let fm_data = if a.lag == 0 {
            None
        } else {
            Some(temperature::load(&dir, 0).map_err(cli)?)
        };
        let fm_data = fm_data.as_ref().unwrap_or(&data);
        for &k in &a.k {
            let spec = temperature::fm_spec(
                fm_data,
                k,
                temperature::fm_train_config(a.fm_epochs, a.common.seed),
                a.common.seed,
            )
            .map_err(cli)?;
            let r = train_with_bar(&spec, a.fm_epochs, a.common.quiet)?.0;
            fm_points.push((k as f64, r.value));
            rows.push(r);
        }
    }
    let out = a
        .common
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("out/temperature-lag{}", a.lag)));
    finish(
        &out,
        "temperature",
        &rows,
        &a,
        Some(
            json!({"fm_unverified": true, "fm_test_mse_by_k": fm_points, "efa_seed_spread": spreads}),
        ),
    )?;
    print_spreads(&spreads);
    if !fm_points.is_empty() {
        let (k0, k1) = (
            fm_points.first().map_or(1.0, |p| p.0),
            fm_points.last().map_or(40.0, |p| p.0),
        );
        let mut series = vec![
            Series {
                label: "FM k-nearest (ours)".into(),
                points: fm_points.clone(),
            },
            Series {
                label: "FM (paper)".into(),
                points: temperature::PAPER_FM
                    .iter()
                    .map(|&(k, v)| (k as f64, v))
                    .collect(),
            },
        ];
        if let Some(e) = rows.iter().find(|r| r.model == "efa") {
            series.push(Series {
                label: format!("EFA {} (ours)", e.setting),
                points: vec![(k0, e.value), (k1, e.value)],
            });
        }
        series.push(Series {
            label: "EFA L=1 (paper)".into(),
            points: vec![(k0, 17.135), (k1, 17.135)],
        });
        write_file(
            &out.join("fm_vs_k.svg"),
            &line_chart(
                "temperature: test MSE against k",
                "k (nearest cities)",
                "test MSE (°F²)",
                &series,
            ),
        )?;
        eprintln!("wrote {}/fm_vs_k.svg", out.display());
    }
    Ok(())
}

/// Test MSE of one EFA setting over several seeds, against the paper's single run.
#[derive(Serialize)]
struct SeedSpread {
    setting: String,
    seeds: Vec<u64>,
    values: Vec<f64>,
    min: f64,
    median: f64,
    max: f64,
    paper: f64,
    /// Runs at most 1% above the paper's value.
    within_1pct: usize,
}

impl SeedSpread {
    /// The spread of `runs`, one per seed of `seeds` (not empty).
    fn new(setting: String, seeds: &[u64], runs: &[RunResult]) -> Self {
        let values: Vec<f64> = runs.iter().map(|r| r.value).collect();
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            0.5 * (sorted[n / 2 - 1] + sorted[n / 2])
        };
        let paper = runs[0].paper;
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

fn print_spreads(spreads: &[SeedSpread]) {
    if spreads.is_empty() {
        return;
    }
    println!("\nEFA test MSE over seeds (the paper's figure is a single run):");
    println!(
        "{:<16} | {:>4} | {:>10} | {:>10} | {:>10} | {:>8} | {}",
        "setting", "runs", "min", "median", "max", "paper", "runs ≤ paper + 1%"
    );
    for s in spreads {
        println!(
            "{:<16} | {:>4} | {:>10.6} | {:>10.6} | {:>10.6} | {:>8.3} | {}",
            s.setting,
            s.values.len(),
            s.min,
            s.median,
            s.max,
            s.paper,
            s.within_1pct
        );
    }
}
