//! Instacart market baskets (PAPER.md §5): the held-out / next item of a basket as a category
//! over 63 items, with the models of MovieLens exp-1 ([`super::movielens`]); plus the
//! qualitative analyses of §5.4: "bought together" items from S = AW + (AW)ᵀ and the attention
//! maps of 10-item test baskets.

use super::movielens::{item_spec, ItemData};
use super::RunSpec;
use crate::efa::{Direction, EfaConfig};
use crate::params::Params;
use crate::train::TrainConfig;
use crate::{ModelConfig, ModelError};
use efa_data::instacart::{load_instacart, Item};
use ndarray::{s, Array2, ArrayView2};
use std::path::Path;

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
pub fn load(dir: &Path) -> Result<InstacartExperiment, ModelError> {
    let d = dir.join("instacart");
    for f in ["items.csv", "baskets_train.csv", "baskets_test.csv"] {
        if !d.join(f).is_file() {
            return Err(ModelError::Config(format!(
                "Instacart data not found: {} does not exist. Download the Kaggle \"Instacart Market \
                 Basket Analysis\" files and prepare items.csv and baskets_{{train,test}}.csv as \
                 described in PAPER.md §5.1 (items with ≥ 50,000 rows, orders with ≥ 10 of them).",
                d.join(f).display()
            )));
        }
    }
    let raw = load_instacart(&d).map_err(|e| ModelError::Batch(e.to_string()))?;
    if raw.items.len() != N_ITEMS {
        return Err(ModelError::Batch(format!(
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
pub fn paper_value(uni: bool, efa: bool) -> f64 {
    match (uni, efa) {
        (false, false) => 3.476,
        (false, true) => 3.420,
        (true, false) => 3.715,
        (true, true) => 3.706,
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
    uni: bool,
    efa: bool,
    train_config: TrainConfig,
    init_seed: u64,
) -> Result<RunSpec, ModelError> {
    item_spec(
        &exp.data,
        uni,
        efa,
        paper_value(uni, efa),
        train_config,
        init_seed,
    )
}

fn param2<'a>(p: &'a Params<f32>, name: &str) -> Result<ArrayView2<'a, f32>, ModelError> {
    p.get(name)
        .ok_or_else(|| ModelError::MissingParam(name.into()))?
        .view()
        .into_dimensionality()
        .map_err(|e| ModelError::Batch(format!("parameter `{name}`: {e}")))
}

/// S = A·W + (A·W)ᵀ over the `n_items` items (§5.4), with A the item rows 1..=n_items of the
/// input table (`item_emb` for EFA, `alpha` for FM) and W the output kernel; the diagonal is
/// set to −1000 (as in the EFA notebooks).
pub fn similarity(
    model: &ModelConfig,
    params: &Params<f32>,
    n_items: usize,
) -> Result<Array2<f64>, ModelError> {
    let table = if matches!(model, ModelConfig::Efa(_)) {
        "item_emb"
    } else {
        "alpha"
    };
    let a = param2(params, table)?;
    let w = param2(params, "out.w")?;
    if a.nrows() < n_items + 1 || w.ncols() != n_items || a.ncols() != w.nrows() {
        return Err(ModelError::Batch(format!(
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

fn softmax_row(scores: &mut [f64]) {
    let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        scores.iter_mut().for_each(|s| *s = 0.0);
        return;
    }
    let mut sum = 0.0;
    for s in scores.iter_mut() {
        *s = (*s - m).exp();
        sum += *s;
    }
    scores.iter_mut().for_each(|s| *s /= sum);
}

/// Per-layer attention probabilities `[layer][query][key]`, averaged over heads, of one item
/// EFA sample (`tokens` post-padded, `length` non-pad tokens), from a plain f64 forward pass
/// over the trained parameters (the same computation as the tape model, outside the tape).
pub fn attention_probs(
    cfg: &EfaConfig,
    params: &Params<f32>,
    tokens: &[usize],
    length: usize,
) -> Result<Vec<Array2<f64>>, ModelError> {
    if cfg.values.is_some()
        || cfg.continuous.is_some()
        || cfg.ffn.is_some()
        || cfg.norm != crate::efa::Norm::None
    {
        return Err(ModelError::Config(
            "attention maps are implemented for the item EFA only".into(),
        ));
    }
    let n = tokens.len();
    let d = cfg.d_model();
    let emb = param2(params, "item_emb")?;
    if let Some(&t) = tokens.iter().find(|&&t| t >= emb.nrows()) {
        return Err(ModelError::Batch(format!(
            "attention maps: token {t} outside the {}-row item table",
            emb.nrows()
        )));
    }
    let mut x = Array2::from_shape_fn((n, d), |(j, c)| {
        if tokens[j] == 0 && cfg.zero_padding {
            0.0
        } else {
            f64::from(emb[[tokens[j], c]])
        }
    });
    if let Some(pos) = &cfg.positions {
        let pe = param2(params, "pos_emb")?;
        if n > pe.nrows() {
            return Err(ModelError::Batch(format!(
                "attention maps: {n} tokens but {} positions",
                pe.nrows()
            )));
        }
        for j in 0..n {
            if !(pos.only_valid && tokens[j] == 0) {
                for c in 0..d {
                    x[[j, c]] += f64::from(pe[[j, c]]);
                }
            }
        }
    }
    let (h, k) = (cfg.heads, cfg.key_dim);
    let scale = 1.0 / (k as f64).sqrt();
    let visible = |i: usize, j: usize| match cfg.direction {
        Direction::Padding => j < length,
        Direction::Causal => j <= i,
        Direction::CausalPadding => j <= i && j < length,
    };
    let mut maps = Vec::with_capacity(cfg.layers);
    for l in 0..cfg.layers {
        let pre = format!("block{l}.attn");
        let proj = |name: &str, x: &Array2<f64>| -> Result<Array2<f64>, ModelError> {
            let w = param2(params, &format!("{pre}.{name}.w"))?.mapv(f64::from);
            let b = params
                .get(&format!("{pre}.{name}.b"))
                .ok_or_else(|| ModelError::MissingParam(format!("{pre}.{name}.b")))?;
            let mut y = x.dot(&w);
            for mut row in y.rows_mut() {
                row.iter_mut()
                    .zip(b.iter())
                    .for_each(|(v, &bb)| *v += f64::from(bb));
            }
            Ok(y)
        };
        let (q, kk, v) = (proj("q", &x)?, proj("k", &x)?, proj("v", &x)?);
        let mut avg = Array2::<f64>::zeros((n, n));
        let mut o = Array2::<f64>::zeros((n, h * k));
        for head in 0..h {
            let cols = head * k..(head + 1) * k;
            for i in 0..n {
                let mut sc: Vec<f64> = (0..n)
                    .map(|j| {
                        if visible(i, j) {
                            scale
                                * (0..k)
                                    .map(|c| q[[i, cols.start + c]] * kk[[j, cols.start + c]])
                                    .sum::<f64>()
                        } else {
                            f64::NEG_INFINITY
                        }
                    })
                    .collect();
                softmax_row(&mut sc);
                for j in 0..n {
                    avg[[i, j]] += sc[j] / h as f64;
                    for c in cols.clone() {
                        o[[i, c]] += sc[j] * v[[j, c]];
                    }
                }
            }
        }
        let out = proj("o", &o)?;
        x = x + out;
        maps.push(avg);
    }
    Ok(maps)
}

/// The paper's attention figure for one basket: for each position `i`, the sample with `i`
/// masked, and row `i` = the head-averaged attention of the masked query over the basket's
/// positions. Returns one `len × len` matrix per layer.
pub fn basket_attention(
    cfg: &EfaConfig,
    params: &Params<f32>,
    basket: &[usize],
    n_items: usize,
    max_len: usize,
) -> Result<Vec<Array2<f64>>, ModelError> {
    let len = basket.len();
    if len == 0 || len > max_len {
        return Err(ModelError::Batch(format!(
            "attention maps: basket length {len} outside 1..={max_len}"
        )));
    }
    let mut maps = vec![Array2::<f64>::zeros((len, len)); cfg.layers];
    for i in 0..len {
        let mut tokens = vec![0; max_len];
        tokens[..len].copy_from_slice(basket);
        tokens[i] = n_items + 1;
        let probs = attention_probs(cfg, params, &tokens, len)?;
        for (m, p) in maps.iter_mut().zip(&probs) {
            m.row_mut(i).assign(&p.slice(s![i, ..len]));
        }
    }
    Ok(maps)
}
