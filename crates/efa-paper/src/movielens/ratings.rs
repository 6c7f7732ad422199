//! MovieLens exp-2 (docs/paper.md §4): a user's held-out rating as a Poisson count, with the
//! synthetic experiment's models, and the mean predicted rating by true rating (Table 2).

use super::{load, user_split, Protocol};
use crate::paper_data::{DataSet, PaperData};
use crate::{
    Analysis, DataOptions, Directions, Experiment, ModelKind, Models, PaperError, RunKey,
    RunSettings, RunSpec, TrainedRun,
};
use efa_data::fingerprint::Mismatch;
use efa_data::movielens::MlExperiment;
use efa_data::rng::train_test_split;
use efa_data::samples::{Direction, RatingData, SampleRef, Split};
use efa_model::batch::{Samples, Targets};
use efa_model::fm::FmConfig;
use efa_model::objective::Objective;
use efa_model::ModelConfig;
use efa_nn::params::Params;
use efa_train::recipe::TrainConfig;
use efa_train::Evaluator;
use serde_json::json;
use std::path::Path;

/// The exp-2 loss variant (§4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[derive(clap::ValueEnum)]
pub enum Variant {
    /// y − 1 ~ Poisson(e^η) ([`Objective::PoissonShifted`]).
    V1,
    /// y ~ Poisson(1 + e^η) ([`Objective::PoissonOnePlus`]).
    V2,
}

impl Variant {
    /// The training / test loss.
    pub fn objective(self) -> Objective {
        match self {
            Variant::V1 => Objective::PoissonShifted,
            Variant::V2 => Objective::PoissonOnePlus,
        }
    }

    /// `"v1"` or `"v2"`.
    pub fn name(self) -> &'static str {
        match self {
            Variant::V1 => "v1",
            Variant::V2 => "v2",
        }
    }
}

/// The paper's exp-2 test loss per (variant, direction, model) (§4.4).
pub fn exp2_paper_value(v: Variant, dir: Direction, model: ModelKind) -> f64 {
    let (uni, efa) = (dir == Direction::Uni, model == ModelKind::Efa);
    match (v, uni, efa) {
        (Variant::V1, false, false) => 0.971,
        (Variant::V1, false, true) => 0.945,
        (Variant::V1, true, false) => 0.972,
        (Variant::V1, true, true) => 0.953,
        (Variant::V2, false, false) => 0.507,
        (Variant::V2, false, true) => 0.494,
        (Variant::V2, true, false) => 0.508,
        (Variant::V2, true, true) => 0.499,
    }
}

/// The notebooks' mean predicted rating for true ratings 1 / 2 / 3 (§4.4, Table 2).
pub fn exp2_paper_means(v: Variant, dir: Direction, model: ModelKind) -> [f64; 3] {
    let (uni, efa) = (dir == Direction::Uni, model == ModelKind::Efa);
    match (v, uni, efa) {
        (Variant::V1, false, false) => [2.0597, 2.1014, 2.2145],
        (Variant::V1, false, true) => [1.9282, 2.0613, 2.2993],
        (Variant::V1, true, false) => [2.0584, 2.0926, 2.1976],
        (Variant::V1, true, true) => [1.9785, 2.0907, 2.2926],
        (Variant::V2, false, false) => [2.0592, 2.0996, 2.2093],
        (Variant::V2, false, true) => [1.9442, 2.0777, 2.3128],
        (Variant::V2, true, false) => [2.0612, 2.0958, 2.2032],
        (Variant::V2, true, true) => [1.9821, 2.0895, 2.2865],
    }
}

/// Exp-2 rating data (§4.2): paper protocol = buggy user split, per-sample validation split
/// (6,530 / 2,177 / 3,038 samples); clean = all users, validation split by user.
pub fn exp2_data(dir: &Path, protocol: Protocol) -> Result<RatingData, PaperError> {
    let prep = load(dir, MlExperiment::Exp2)?;
    let split = user_split(&prep, protocol);
    let seqs = |us: &[u32]| {
        us.iter()
            .map(|&u| prep.user(u).cloned().unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let max_ctx = prep.sequences.iter().map(Vec::len).max();
    let mut data = RatingData::new(seqs(&split.trainval), seqs(&split.test), max_ctx, 42)?;
    if protocol == Protocol::Clean {
        let (tr, va) = train_test_split(data.trainval.len(), 42)?;
        let refs = |users: &[usize]| -> Vec<SampleRef> {
            users
                .iter()
                .flat_map(|&s| {
                    (0..data.trainval[s].len()).map(move |pos| SampleRef { seq: s, pos })
                })
                .collect()
        };
        let (train, val) = (refs(&tr), refs(&va));
        data.train = train;
        data.val = val;
    }
    Ok(data)
}

/// The run of one (direction, model) of exp-2: the synthetic experiment's models (§2.3–§2.4)
/// with 50 movies, a 5-row rating table and positions 44; η = the last Dense(1) (EFA) or
/// ⟨ρ, c⟩ (FM), and the objective applies the exponential.
pub fn exp2_spec(
    data: &RatingData,
    v: Variant,
    dir: Direction,
    kind: ModelKind,
    train_config: TrainConfig,
    init_seed: u64,
) -> Result<RunSpec, PaperError> {
    use crate::synthetic::{efa_config, efa_samples, fm_samples, rating_table};
    let (model, train, val, test) = if kind == ModelKind::Efa {
        let table = rating_table(data)?;
        let model = ModelConfig::Efa(efa_config(51, table.rows(), data.max_ctx));
        let build = |s| efa_samples(&data.efa_samples(s, dir)?, &table);
        (
            model,
            build(Split::Train)?,
            build(Split::Val)?,
            build(Split::Test)?,
        )
    } else {
        let model = ModelConfig::Fm(FmConfig::Rating { items: 51, dim: 32 });
        let build =
            |s| -> Result<Samples, PaperError> { Ok(fm_samples(&data.fm_samples(s, dir)?)) };
        (
            model,
            build(Split::Train)?,
            build(Split::Val)?,
            build(Split::Test)?,
        )
    };
    Ok(RunSpec {
        key: RunKey {
            variant: Some(v.name()),
            ..RunKey::directed(kind, dir)
        },
        model,
        objective: v.objective(),
        paper: exp2_paper_value(v, dir, kind),
        train,
        val,
        test,
        train_config,
        init_seed,
        plan: None,
    })
}

/// Mean predicted rating `1 + e^η` (v1: λ + 1; v2: μ) over the samples whose true rating is
/// 1, 2 and 3, with the number of such samples.
pub fn mean_prediction_by_rating(
    eval: &Evaluator<'_>,
    params: &Params<f32>,
    samples: &Samples,
) -> Result<([f64; 3], [usize; 3]), PaperError> {
    let Targets::Real(y) = &samples.targets else {
        return Err(PaperError::Samples(
            "mean prediction by rating needs real targets".into(),
        ));
    };
    let eta = eval.predict(params, samples, 1024)?;
    let (mut sum, mut count) = ([0.0; 3], [0usize; 3]);
    for (i, &t) in y.iter().enumerate() {
        let k = t.round() as i64 - 1;
        if !(0..3).contains(&k) || (t - t.round()).abs() > 1e-9 {
            return Err(PaperError::Samples(format!(
                "test sample {i}: rating {t} is not one of 1, 2, 3"
            )));
        }
        sum[k as usize] += 1.0 + eta[[i, 0]].exp();
        count[k as usize] += 1;
    }
    let mean = std::array::from_fn(|k| {
        if count[k] > 0 {
            sum[k] / count[k] as f64
        } else {
            f64::NAN
        }
    });
    Ok((mean, count))
}

/// Options of MovieLens exp-2.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, clap::Args)]
pub struct RatingsOptions {
    /// Loss variant: v1, y − 1 ~ Poisson(e^η); v2, y ~ Poisson(1 + e^η).
    #[arg(long, value_enum, default_value_t = Variant::V1)]
    pub variant: Variant,
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

impl Default for RatingsOptions {
    fn default() -> Self {
        Self {
            variant: Variant::V1,
            direction: Directions::Both,
            model: Models::Both,
            data: DataOptions::default(),
        }
    }
}

/// MovieLens exp-2 with its rating data.
pub struct Ratings {
    options: RatingsOptions,
    data: RatingData,
    source: PaperData,
}

impl Ratings {
    /// Loads `u.data` and makes the exp-2 samples under the protocol.
    pub fn new(options: &RatingsOptions) -> Result<Self, PaperError> {
        let source = options.data.verified(DataSet::Movielens)?;
        Ok(Self {
            options: options.clone(),
            data: exp2_data(&source.dir, options.data.protocol)?,
            source,
        })
    }
}

impl Experiment for Ratings {
    fn name(&self) -> String {
        format!("movielens-ratings-{}", self.options.variant.name())
    }

    fn describe(&self) -> Vec<String> {
        let d = &self.data;
        vec![
            self.options.data.protocol.describe(true).to_string(),
            format!(
                "MovieLens exp-2 ({:?}): {} / {} / {} samples, max_ctx {}",
                self.options.variant,
                d.train.len(),
                d.val.len(),
                d.test_samples.len(),
                d.max_ctx
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
                let cfg = TrainConfig::paper(epochs, s.seed);
                let v = self.options.variant;
                out.push(exp2_spec(&self.data, v, dir, kind, cfg, s.seed)?);
            }
        }
        Ok(out)
    }

    /// The mean predicted rating `1 + e^η` by true rating 1 / 2 / 3, beside the notebooks'.
    fn analyse(&self, runs: &[TrainedRun<'_>]) -> Result<Analysis, PaperError> {
        let mut a = Analysis::default();
        a.lines
            .push("mean predicted rating (1 + e^η) by true rating 1 / 2 / 3:".into());
        let mut means = Vec::new();
        let v = self.options.variant;
        for r in runs {
            let (m, n) = mean_prediction_by_rating(&r.spec.evaluator(), r.params, &r.spec.test)?;
            let key = &r.spec.key;
            let dir = key.direction.unwrap_or(Direction::Bi);
            let paper = exp2_paper_means(v, dir, key.model);
            let f = |x: &[f64; 3]| {
                x.iter()
                    .map(|v| format!("{v:.4}"))
                    .collect::<Vec<_>>()
                    .join(" / ")
            };
            a.lines.push(format!(
                "  {:<28} {:<4} ours {}   paper {}",
                r.result.setting,
                r.result.model,
                f(&m),
                f(&paper)
            ));
            means.push(json!({"setting": r.result.setting, "model": r.result.model,
                "true_rating": [1, 2, 3], "mean_predicted": m, "paper": paper, "count": n}));
        }
        a.json.insert("mean_predicted_rating".into(), json!(means));
        Ok(a)
    }
}
