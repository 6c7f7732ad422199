//! MovieLens exp-1 (docs/paper.md §3): the held-out / next movie of a user's basket as a category,
//! and the categorical item models shared with Instacart.

use super::{load, user_split, ItemData, Protocol};
use crate::paper_data::{DataSet, PaperData};
use crate::{
    DataOptions, Directions, Experiment, ModelKind, Models, PaperError, RunKey, RunSettings,
    RunSpec,
};
use efa_data::fingerprint::Mismatch;
use efa_data::item_samples::{
    item_efa_samples, item_fm_bi_samples, item_fm_uni_samples, ItemEfaSample, ItemFmSample,
};
use efa_data::movielens::{exp1_baskets, MlExperiment};
use efa_data::samples::Direction;
use efa_model::batch::{Samples, Targets};
use efa_model::efa::{EfaConfig, Norm, Positions, Visibility};
use efa_model::fm::FmConfig;
use efa_model::objective::Objective;
use efa_model::ModelConfig;
use efa_train::recipe::TrainConfig;
use ndarray::Array2;
use std::path::Path;

/// Exp-1 baskets (§3.2): with the paper protocol 480 / 161 / 219 users, 7,252 / 2,484 / 3,408
/// samples, max_len 44.
pub fn exp1_data(dir: &Path, protocol: Protocol) -> Result<ItemData, PaperError> {
    let prep = load(dir, MlExperiment::Exp1)?;
    let split = user_split(&prep, protocol);
    let b = exp1_baskets(&prep, &split)?;
    let strip = |v: Vec<(u32, Vec<usize>)>| v.into_iter().map(|(_, b)| b).collect::<Vec<_>>();
    Ok(ItemData {
        train: strip(b.train),
        val: strip(b.val),
        test: strip(b.test),
        n_items: 50,
        max_len: b.max_len,
    })
}

/// The paper's exp-1 test cross-entropy per (direction, model) (§3.5).
pub fn exp1_paper_value(dir: Direction, model: ModelKind) -> f64 {
    match (dir, model) {
        (Direction::Uni, ModelKind::Fm) => 3.534,
        (Direction::Uni, ModelKind::Efa) => 3.444,
        (Direction::Bi, ModelKind::Fm) => 3.566,
        (Direction::Bi, ModelKind::Efa) => 3.483,
    }
}

/// The item EFA of §3.4: α `(n_items + 2) × 32` (0 pad, items, MASK) zeroed on padding,
/// positions `max_len × 32` added only at non-pad positions, 2 × MHA(2 × 16) with residuals,
/// no LN / FFN, gather, Dense(n_items, no bias). Bidirectional = key-padding mask, unidirectional
/// = causal mask only.
pub fn item_efa_config(n_items: usize, max_len: usize, uni: bool) -> EfaConfig {
    EfaConfig {
        items: n_items + 2,
        item_dim: 32,
        zero_padding: true,
        values: None,
        positions: Some(Positions {
            max_len,
            only_valid: true,
        }),
        layers: 2,
        heads: 2,
        key_dim: 16,
        ffn: None,
        norm: Norm::None,
        ln_eps: 1e-3,
        head_hidden: Vec::new(),
        out_dim: n_items,
        out_bias: false,
        direction: if uni {
            Visibility::Causal
        } else {
            Visibility::Padding
        },
        continuous: None,
    }
}

/// The item FMs of §3.4: bidirectional sums the other items' α (`n_items + 1` rows, no MASK);
/// unidirectional sums the previous items' α plus a learned MASK row (`n_items + 2` rows).
pub fn item_fm_config(n_items: usize, uni: bool) -> FmConfig {
    FmConfig::Item {
        tokens: n_items + if uni { 2 } else { 1 },
        dim: 32,
        classes: n_items,
    }
}

/// EFA samples as model input (`lengths` = basket length, the key-padding mask).
pub fn item_efa_input(samples: &[ItemEfaSample]) -> Samples {
    let n = samples.len();
    let w = samples.first().map_or(0, |s| s.tokens.len());
    Samples {
        tokens: Array2::from_shape_fn((n, w), |(i, j)| samples[i].tokens[j]),
        values: None,
        weights: None,
        center: None,
        lengths: samples.iter().map(|s| s.length).collect(),
        pred_idx: samples.iter().map(|s| s.masked_idx).collect(),
        targets: Targets::Class(samples.iter().map(|s| s.target).collect()),
        group: None,
    }
}

/// FM samples as model input (`lengths` = number of non-pad context tokens, at least 1).
pub fn item_fm_input(samples: &[ItemFmSample]) -> Samples {
    let n = samples.len();
    let w = samples.first().map_or(0, |s| s.context.len());
    Samples {
        tokens: Array2::from_shape_fn((n, w), |(i, j)| samples[i].context[j]),
        values: None,
        weights: None,
        center: None,
        lengths: samples
            .iter()
            .map(|s| s.context.iter().filter(|&&t| t != 0).count().max(1).min(w))
            .collect(),
        pred_idx: vec![0; n],
        targets: Targets::Class(samples.iter().map(|s| s.target).collect()),
        group: None,
    }
}

/// Model input of one split of an item experiment.
pub fn item_input(
    baskets: &[Vec<usize>],
    n_items: usize,
    max_len: usize,
    uni: bool,
    efa: bool,
) -> Result<Samples, PaperError> {
    Ok(match (efa, uni) {
        (true, _) => {
            let mut s = item_efa_input(&item_efa_samples(baskets, n_items, max_len)?);
            // Samples come basket by basket, one per position: the basket is the sequence id.
            s.group = Some(
                baskets
                    .iter()
                    .enumerate()
                    .flat_map(|(i, b)| std::iter::repeat_n(i, b.len()))
                    .collect(),
            );
            s
        }
        (false, false) => item_fm_input(&item_fm_bi_samples(baskets, n_items, max_len)?),
        (false, true) => item_fm_input(&item_fm_uni_samples(baskets, n_items, max_len)?),
    })
}

/// The run of one (direction, model) of a categorical item experiment (cross-entropy).
pub fn item_spec(
    data: &ItemData,
    dir: Direction,
    kind: ModelKind,
    paper: f64,
    train_config: TrainConfig,
    init_seed: u64,
) -> Result<RunSpec, PaperError> {
    let (n, m) = (data.n_items, data.max_len);
    let (uni, efa) = (dir == Direction::Uni, kind == ModelKind::Efa);
    let model = if efa {
        ModelConfig::Efa(item_efa_config(n, m, uni))
    } else {
        ModelConfig::Fm(item_fm_config(n, uni))
    };
    Ok(RunSpec {
        key: RunKey::directed(kind, dir),
        model,
        objective: Objective::CrossEntropy,
        paper,
        train: item_input(&data.train, n, m, uni, efa)?,
        val: item_input(&data.val, n, m, uni, efa)?,
        test: item_input(&data.test, n, m, uni, efa)?,
        train_config,
        init_seed,
        plan: None,
    })
}

/// Options of MovieLens exp-1.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, clap::Args)]
pub struct ItemsOptions {
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

/// MovieLens exp-1 with its baskets.
pub struct Items {
    options: ItemsOptions,
    data: ItemData,
    source: PaperData,
}

impl Items {
    /// Loads `u.data` and makes the exp-1 baskets under the protocol.
    pub fn new(options: &ItemsOptions) -> Result<Self, PaperError> {
        let source = options.data.verified(DataSet::Movielens)?;
        Ok(Self {
            options: options.clone(),
            data: exp1_data(&source.dir, options.data.protocol)?,
            source,
        })
    }
}

impl Experiment for Items {
    fn name(&self) -> String {
        "movielens-items".into()
    }

    fn describe(&self) -> Vec<String> {
        let d = &self.data;
        vec![
            self.options.data.protocol.describe(true).to_string(),
            format!(
                "MovieLens exp-1: {} / {} / {} baskets, {} / {} / {} samples, max_len {}",
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
        let epochs = s.epochs.unwrap_or(2000);
        let mut out = Vec::new();
        for &dir in self.options.direction.directions() {
            for &kind in self.options.model.kinds() {
                let cfg = TrainConfig::paper(epochs, s.seed);
                let paper = exp1_paper_value(dir, kind);
                out.push(item_spec(&self.data, dir, kind, paper, cfg, s.seed)?);
            }
        }
        Ok(out)
    }
}
