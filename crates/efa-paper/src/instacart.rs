//! Instacart market baskets (docs/paper.md §5): the held-out / next item of a basket as a category
//! over 63 items, with the models of MovieLens exp-1 ([`crate::movielens`]); plus the
//! qualitative analyses of §5.4: "bought together" items from S = AW + (AW)ᵀ and the attention
//! maps of 10-item test baskets.

use crate::movielens::{item_spec, ItemData};
use crate::paper_data::{DataSet, PaperData};
use crate::{
    Analysis, DataOptions, Directions, Experiment, Figure, ModelKind, Models, PaperError,
    RunSettings, RunSpec, TrainedRun,
};
use efa_data::fingerprint::Mismatch;
use efa_data::instacart::{load_instacart, Item};
use efa_data::samples::Direction;
use efa_model::{ModelConfig, ModelError};
use efa_nn::params::Params;
use efa_train::recipe::TrainConfig;
use ndarray::{s, Array2, ArrayView2};
use serde_json::json;
use std::path::Path;

pub use crate::attention_maps::basket_attention;

/// Items with at least 50,000 occurrences (§5.1).
pub const N_ITEMS: usize = 63;

/// The example items of the similarity table (ids of `items.csv`; the paper does not name
/// which four items it showed, so these are chosen to cover four kinds of grocery):
/// 13 Limes, 15 Organic Raspberries, 22 Organic Half & Half, 7 Organic Yellow Onion.
pub const EXAMPLE_ITEMS: [usize; 4] = [13, 15, 22, 7];

/// Test baskets whose attention the paper's viz notebook plotted: test samples 15–24 and 50–59
/// are all positions of test baskets 1 and 4 (orders 4680 and 6861, 10 items each).
pub const ATTENTION_BASKETS: [usize; 2] = [1, 4];

/// The data with product names and order ids.
#[derive(Clone, Debug)]
pub struct InstacartExperiment {
    /// Baskets (18,585 / 6,196 / 1,433), max_len 24.
    pub data: ItemData,
    /// Items 1..=63 with names.
    pub items: Vec<Item>,
    /// Order ids of the validation baskets, in split order (first: 1536267, 585862, …).
    pub val_order_ids: Vec<u64>,
    /// Order ids of the test baskets (ascending).
    pub test_order_ids: Vec<u64>,
}

/// Loads `DIR/instacart/{items,baskets_train,baskets_test}.csv` and splits the training
/// baskets with `train_test_split(0.25, 42)` (whole baskets, as the notebooks).
pub fn load(dir: &Path) -> Result<InstacartExperiment, PaperError> {
    let d = dir.join("instacart");
    for f in ["items.csv", "baskets_train.csv", "baskets_test.csv"] {
        if !d.join(f).is_file() {
            return Err(PaperError::MissingData {
                path: d.join(f),
                how: DataSet::Instacart.how().into(),
            });
        }
    }
    let raw = load_instacart(&d)?;
    if raw.items.len() != N_ITEMS {
        return Err(PaperError::Samples(format!(
            "{}: {} items, expected {N_ITEMS}",
            d.join("items.csv").display(),
            raw.items.len()
        )));
    }
    Ok(InstacartExperiment {
        data: ItemData {
            train: raw.train.baskets,
            val: raw.val.baskets,
            test: raw.test.baskets,
            n_items: N_ITEMS,
            max_len: raw.max_len,
        },
        items: raw.items,
        val_order_ids: raw.val.order_ids,
        test_order_ids: raw.test.order_ids,
    })
}

/// The paper's test cross-entropy per (direction, model) (§5.3).
pub fn paper_value(dir: Direction, model: ModelKind) -> f64 {
    match (dir, model) {
        (Direction::Bi, ModelKind::Fm) => 3.476,
        (Direction::Bi, ModelKind::Efa) => 3.420,
        (Direction::Uni, ModelKind::Fm) => 3.715,
        (Direction::Uni, ModelKind::Efa) => 3.706,
    }
}

/// The recipe of §5.3: Adam 1e-4, batch 256, `epochs` (1000) with patience = epochs (no
/// early stop), best-validation weights restored at the end.
pub fn train_config(epochs: usize, seed: u64) -> TrainConfig {
    TrainConfig {
        lr: 1e-4,
        batch_size: 256,
        max_epochs: epochs,
        patience: epochs,
        seed,
        eval_batch: 1024,
        batching: Default::default(),
    }
}

/// The run of one (direction, model).
pub fn spec(
    exp: &InstacartExperiment,
    dir: Direction,
    kind: ModelKind,
    train_config: TrainConfig,
    init_seed: u64,
) -> Result<RunSpec, PaperError> {
    item_spec(
        &exp.data,
        dir,
        kind,
        paper_value(dir, kind),
        train_config,
        init_seed,
    )
}

fn param2<'a>(p: &'a Params<f32>, name: &str) -> Result<ArrayView2<'a, f32>, PaperError> {
    p.get(name)
        .ok_or_else(|| ModelError::MissingParam(name.into()))?
        .view()
        .into_dimensionality()
        .map_err(|e| PaperError::Samples(format!("parameter `{name}`: {e}")))
}

/// S = A·W + (A·W)ᵀ over the `n_items` items (§5.4), with A the item rows 1..=n_items of the
/// input table (`item_emb` for EFA, `alpha` for FM) and W the output kernel; the diagonal is
/// set to −1000 (as in the EFA notebooks).
pub fn similarity(
    model: &ModelConfig,
    params: &Params<f32>,
    n_items: usize,
) -> Result<Array2<f64>, PaperError> {
    let table = if matches!(model, ModelConfig::Efa(_)) {
        "item_emb"
    } else {
        "alpha"
    };
    let a = param2(params, table)?;
    let w = param2(params, "out.w")?;
    if a.nrows() < n_items + 1 || w.ncols() != n_items || a.ncols() != w.nrows() {
        return Err(PaperError::Samples(format!(
            "similarity: table {:?} and output kernel {:?} do not fit {n_items} items",
            a.shape(),
            w.shape()
        )));
    }
    let a = a.slice(s![1..=n_items, ..]).mapv(f64::from);
    let aw = a.dot(&w.mapv(f64::from));
    let mut sim = &aw + &aw.t();
    sim.diag_mut().fill(-1000.0);
    Ok(sim)
}

/// The `k` items (1-based ids) with the largest S against `item` (1-based), best first; ties
/// go to the smaller id.
pub fn top_k(sim: &Array2<f64>, item: usize, k: usize) -> Vec<(usize, f64)> {
    let row = sim.row(item - 1);
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    idx.into_iter().take(k).map(|j| (j + 1, row[j])).collect()
}

/// Options of the Instacart experiment.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, clap::Args)]
pub struct Options {
    /// Directions to run.
    #[arg(long, value_enum, default_value_t = Directions::Both)]
    pub direction: Directions,
    /// Models to run.
    #[arg(long, value_enum, default_value_t = Models::Both)]
    pub model: Models,
    /// Data directory and protocol.
    #[command(flatten)]
    #[serde(flatten)]
    pub data: DataOptions,
}

/// The Instacart experiment with its baskets and item names.
pub struct Instacart {
    options: Options,
    exp: InstacartExperiment,
    source: PaperData,
}

impl Instacart {
    /// Loads the Instacart files.
    pub fn new(options: &Options) -> Result<Self, PaperError> {
        let source = options.data.verified(DataSet::Instacart)?;
        Ok(Self {
            options: options.clone(),
            exp: load(&source.dir)?,
            source,
        })
    }

    fn item_name(&self, id: usize) -> String {
        id.checked_sub(1)
            .and_then(|i| self.exp.items.get(i))
            .map_or_else(|| format!("item {id}"), |i| i.name.clone())
    }
}

fn short(name: &str) -> String {
    let n: String = name.chars().take(22).collect();
    if name.chars().count() > 22 {
        format!("{n}…")
    } else {
        n
    }
}

impl Experiment for Instacart {
    fn name(&self) -> String {
        "instacart".into()
    }

    fn describe(&self) -> Vec<String> {
        let d = &self.exp.data;
        vec![
            self.options.data.protocol.describe(false).to_string(),
            format!(
                "Instacart: {} / {} / {} baskets, {} / {} / {} samples, max_len {}",
                d.train.len(),
                d.val.len(),
                d.test.len(),
                ItemData::samples(&d.train),
                ItemData::samples(&d.val),
                ItemData::samples(&d.test),
                d.max_len
            ),
        ]
    }

    fn other_data(&self) -> &[Mismatch] {
        &self.source.other
    }

    fn grid(&self, s: &RunSettings) -> Result<Vec<RunSpec>, PaperError> {
        let epochs = s.epochs.unwrap_or(1000);
        let mut out = Vec::new();
        for &dir in self.options.direction.directions() {
            for &kind in self.options.model.kinds() {
                out.push(spec(
                    &self.exp,
                    dir,
                    kind,
                    train_config(epochs, s.seed),
                    s.seed,
                )?);
            }
        }
        Ok(out)
    }

    /// §5.4: the top-3 "bought together" items of the example items, and the attention maps
    /// of the EFAs on two 10-item test baskets.
    fn analyse(&self, runs: &[TrainedRun<'_>]) -> Result<Analysis, PaperError> {
        let mut a = Analysis::default();
        let (mut similar, mut maps) = (Vec::new(), Vec::new());
        let d = &self.exp.data;
        for r in runs {
            let (setting, model) = (&r.result.setting, &r.result.model);
            let sim = similarity(&r.spec.model, r.params, d.n_items)?;
            a.lines.push(format!(
                "{model} {setting}: bought together (top 3 by S = AW + (AW)ᵀ):"
            ));
            for &item in &EXAMPLE_ITEMS {
                let top = top_k(&sim, item, 3);
                let names: Vec<String> = top
                    .iter()
                    .map(|&(j, s)| format!("{} ({s:.2})", self.item_name(j)))
                    .collect();
                a.lines.push(format!(
                    "  {:<28} → {}",
                    self.item_name(item),
                    names.join(", ")
                ));
                similar.push(json!({"setting": setting, "model": model, "item": item,
                    "name": self.item_name(item),
                    "top3": top.iter().map(|&(j, s)| json!({"item": j, "name": self.item_name(j),
                        "score": s})).collect::<Vec<_>>()}));
            }
            let ModelConfig::Efa(cfg) = &r.spec.model else {
                continue;
            };
            let dir = if r.spec.key.is_uni() { "uni" } else { "bi" };
            for &bi in &ATTENTION_BASKETS {
                let Some(basket) = d.test.get(bi) else {
                    continue;
                };
                let layers = basket_attention(cfg, r.params, basket, d.n_items, d.max_len)?;
                let labels: Vec<String> =
                    basket.iter().map(|&t| short(&self.item_name(t))).collect();
                for (l, m) in layers.iter().enumerate() {
                    let file = format!("attention_{dir}_basket{bi}_layer{}.svg", l + 1);
                    let values: Vec<Vec<f64>> = m.rows().into_iter().map(|r| r.to_vec()).collect();
                    let order_id = self.exp.test_order_ids.get(bi).copied().unwrap_or(0);
                    let title = format!(
                        "{setting} EFA, test order {order_id}, layer {} (mean over heads; colour \
                         clipped at 0.25)",
                        l + 1
                    );
                    maps.push(
                        json!({"setting": setting, "basket": bi, "order_id": order_id,
                        "layer": l + 1, "file": file, "attention": values}),
                    );
                    a.figures.push(Figure::HeatMap {
                        file,
                        title,
                        labels: labels.clone(),
                        values,
                        clip: 0.25,
                    });
                }
            }
        }
        a.json.insert("example_items".into(), json!(EXAMPLE_ITEMS));
        a.json.insert("bought_together".into(), json!(similar));
        a.json.insert("attention".into(), json!(maps));
        Ok(a)
    }
}
