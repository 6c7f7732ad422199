//! Precision audits: how many correct digits every forward plan's loss and gradients have in
//! f32 and f64, measured against the `general` plan (the definition) computed in the
//! double-double type [`Dd`] (about 106 bits), on the same batch at the same weights.
//!
//! The weights are first rounded to f32, so that every precision evaluates the same function
//! at the same point: the f32 runs then round only the data and their own arithmetic. Errors
//! are per tensor, relative to the tensor's largest reference entry
//! ([`efa_check::precision`]); the budgets of the project (docs/design.md §3c) are
//! [`PrecisionAudit::f64_misses`] (every plan's f64 gradients within
//! [`Budget::F64`] of the reference) and [`PrecisionAudit::f32_misses`] (every plan's f32 error
//! per tensor at most twice the `general` plan's f32 error, above a floor of
//! [`F32_FLOOR`] units of f32 round-off).

use crate::evaluator::Evaluator;
use crate::threads::Threads;
use crate::TrainError;
use efa_check::precision::{tensor_error, Budget, TensorError};
use efa_model::batch::Samples;
use efa_model::efa::ForwardPlan;
use efa_model::{ModelConfig, Objective};
use efa_nn::params::Params;
use efa_num::{Dd, Real};
use ndarray::ArrayD;

/// Relative errors below this many f32 epsilons (of the tensor's largest entry) are round-off
/// of any order of summation and pass the f32 comparison whatever the `general` plan's error.
pub const F32_FLOOR: f64 = 16.0;

/// The factor of the f32 comparison: a plan's f32 error per tensor at most this times the
/// `general` plan's.
pub const F32_FACTOR: f64 = 2.0;

/// The factor over the f64 floor a tensor's f64 error may reach when the floor itself is
/// above [`Budget::F64`] (see [`PrecisionAudit::f64_misses`]).
pub const F64_FLOOR_FACTOR: f64 = 16.0;

/// The `dtype` of the row holding the f64 floor (see [`precision_audit_with_floor`]).
pub const FLOOR: &str = "f64-floor";

/// The `dtype` of the row holding the f32 floor (see [`PrecisionAudit::f32_floor`]).
pub const F32_STORAGE: &str = "f32-floor";

/// The factor over the f32 floor a tensor's f32 error may reach (see
/// [`PrecisionAudit::f32_misses`]).
pub const F32_STORAGE_FACTOR: f64 = 2.0;

/// The `dtype` of the row holding the f32 ReLU-kink spread (see [`PrecisionAudit::kinks`]).
pub const KINKS: &str = "f32-kinks";

/// The band around a ReLU's kink, relative to the largest input of its node, inside which an
/// f32 evaluation may land on either side (16 f32 epsilons: the relative error of the
/// activations feeding a deep model's ReLUs in f32 measures 1e-7–1e-6).
pub const F32_KINK_BAND: f64 = 16.0 * f32::EPSILON as f64;

/// One plan in one precision against the reference.
#[derive(Clone, Debug)]
pub struct PrecisionRow {
    /// The forward plan (`None` for a factor model, which has one forward).
    pub plan: Option<ForwardPlan>,
    /// `"f32"`, `"f64"`, [`FLOOR`] (the definition with f64 storage, computed exactly) or
    /// [`KINKS`] (the definition with the other side of every ReLU kink within f32 round-off).
    pub dtype: &'static str,
    /// The loss's error (a one-element tensor named `loss`).
    pub loss: TensorError,
    /// Every parameter's gradient error, in declaration order.
    pub params: Vec<TensorError>,
}

impl PrecisionRow {
    /// The parameter with the largest relative error (`None` for a model without parameters).
    pub fn worst(&self) -> Option<&TensorError> {
        self.params.iter().max_by(|a, b| {
            a.rel
                .partial_cmp(&b.rel)
                .unwrap_or(std::cmp::Ordering::Greater)
        })
    }

    /// The plan's name (`model` for a factor model).
    pub fn plan_name(&self) -> String {
        self.plan.map_or_else(|| "model".into(), |p| p.to_string())
    }
}

/// A tensor over its budget.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetMiss {
    /// The plan's name.
    pub plan: String,
    /// `"f32"` or `"f64"`.
    pub dtype: &'static str,
    /// The tensor.
    pub name: String,
    /// Its error, relative to its largest reference entry.
    pub rel: f64,
    /// The largest relative error the budget allows it (relative to its largest reference
    /// entry, as `rel`).
    pub allowed: f64,
}

impl std::fmt::Display for BudgetMiss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {}: error {:.3e} of its largest entry, budget {:.3e}",
            self.plan, self.dtype, self.name, self.rel, self.allowed
        )
    }
}

/// Every plan's errors on one batch (see the module docs).
#[derive(Clone, Debug)]
pub struct PrecisionAudit {
    /// The reference loss (double-double, rounded to f64).
    pub reference_loss: f64,
    /// The largest reference gradient entry of any parameter.
    pub model_scale: f64,
    /// One row per plan that applies and precision, plans in the order asked, f32 first.
    pub rows: Vec<PrecisionRow>,
    /// Plans that do not apply to the model or batch, with the reason.
    pub skipped: Vec<(ForwardPlan, String)>,
}

impl PrecisionAudit {
    /// The row of `plan` (`None`: a factor model's) in `dtype`.
    pub fn row(&self, plan: Option<ForwardPlan>, dtype: &str) -> Option<&PrecisionRow> {
        self.rows
            .iter()
            .find(|r| r.plan == plan && r.dtype == dtype)
    }

    /// The f64 floor's row, when the audit measured it ([`precision_audit_with_floor`]).
    pub fn floor(&self) -> Option<&PrecisionRow> {
        self.rows.iter().find(|r| r.dtype == FLOOR)
    }

    /// The f32 floor's row, when the audit measured it: the `general` plan in double-double
    /// with every value its tape records rounded to f32
    /// ([`Tape::set_round_values_to_f32`](efa_tape::Tape::set_round_values_to_f32)), against
    /// the exact reference. That is the definition evaluated exactly from f32-stored values;
    /// its error per tensor is what half an ulp of f32 in every stored value costs the
    /// gradient. Where attention is sharp that cost is large (the first block's query and key
    /// gradients of the temperature models move by percents), and an f32 evaluation can land
    /// anywhere within a few floors of the exact gradient, closer than the floor only by its
    /// rounding errors happening to offset the stored values': a `general` plan below the
    /// floor is lucky, not exact, and a budget of twice its error would hold other plans to
    /// its luck. [`PrecisionAudit::f32_misses`] allows each tensor [`F32_STORAGE_FACTOR`]
    /// times its floor. Measured only where an f32 tensor misses its budget without it.
    pub fn f32_floor(&self) -> Option<&PrecisionRow> {
        self.rows.iter().find(|r| r.dtype == F32_STORAGE)
    }

    /// The f32 ReLU-kink row, when the audit measured it: the `general` plan in double-double
    /// with the ReLU derivative inverted for every input within [`F32_KINK_BAND`] of the kink
    /// ([`Tape::set_relu_kink_flip`](efa_tape::Tape::set_relu_kink_flip)), against the exact
    /// reference. Which side of a kink such an input lands on in f32 is decided by rounding,
    /// and one input on the other side moves its row's whole contribution to the next layer's
    /// gradient: an f32 plan's error can hold that jump on top of its round-off whatever its
    /// order of operations. The audit measures the row only where an f32 tensor misses its
    /// budget without it ([`PrecisionAudit::f32_misses`] then allows each tensor its spread on
    /// top); empty where no ReLU input lies that near its kink.
    pub fn kinks(&self) -> Option<&PrecisionRow> {
        self.rows.iter().find(|r| r.dtype == KINKS)
    }

    /// The f64 tensors (loss and gradients) over [`Budget::F64`], or, where the audit measured
    /// the f64 floor, over [`F64_FLOOR_FACTOR`] times the tensor's floor when that is larger
    /// (a tensor whose floor is near or above the budget cannot meet it in any f64 evaluation
    /// that stores its values in f64; it is held to a small multiple of what f64 storage
    /// alone costs it).
    pub fn f64_misses(&self) -> Vec<BudgetMiss> {
        let mut out = Vec::new();
        let floor = self.floor();
        for r in self.rows.iter().filter(|r| r.dtype == "f64") {
            for (k, e) in r.params.iter().enumerate() {
                let allowed = Budget::F64
                    .allowed(e, self.model_scale)
                    .max(floor.map_or(0.0, |f| F64_FLOOR_FACTOR * f.params[k].max_abs));
                if !within(e.max_abs, allowed) {
                    out.push(miss(
                        r,
                        e,
                        if e.scale > 0.0 {
                            allowed / e.scale
                        } else {
                            allowed
                        },
                    ));
                }
            }
            // The loss has no model-wide floor: 1e-11 of itself.
            if r.loss.rel > Budget::F64.rel {
                out.push(miss(r, &r.loss, Budget::F64.rel));
            }
        }
        out
    }

    /// The f64 tensors of every plan but `general` over both [`Budget::F64`] and
    /// [`F32_FACTOR`] times the `general` plan's own f64 error of the tensor: a plan no less
    /// accurate than the definition where the definition itself misses the budget (the
    /// first block's query and key kernels at sharp weights, see docs/design.md §3c).
    pub fn f64_misses_beyond_general(&self) -> Vec<BudgetMiss> {
        let Some(general) = self
            .rows
            .iter()
            .find(|r| r.dtype == "f64" && matches!(r.plan, Some(ForwardPlan::General)))
        else {
            return self.f64_misses();
        };
        let mut out = Vec::new();
        for r in self
            .rows
            .iter()
            .filter(|r| r.dtype == "f64" && r.plan != general.plan)
        {
            for (e, g) in r.params.iter().zip(&general.params) {
                let allowed =
                    (Budget::F64.allowed(e, self.model_scale)).max(F32_FACTOR * g.max_abs);
                if !within(e.max_abs, allowed) {
                    out.push(miss(
                        r,
                        e,
                        if e.scale > 0.0 {
                            allowed / e.scale
                        } else {
                            allowed
                        },
                    ));
                }
            }
        }
        out
    }

    /// The f32 tensors whose error exceeds [`F32_FACTOR`] times the `general` plan's f32 error
    /// of the same tensor, and [`F32_FLOOR`] epsilons of the tensor's largest entry, and
    /// [`F32_FLOOR`] epsilons of the model's largest gradient (the floor for tensors whose
    /// exact gradient cancels below the model's round-off, such as a key bias's, exactly 0),
    /// and, where the audit measured it, [`F32_STORAGE_FACTOR`] times the tensor's f32 floor
    /// ([`PrecisionAudit::f32_floor`]), each with the tensor's ReLU-kink spread added where
    /// the audit measured it ([`PrecisionAudit::kinks`]). Empty when `general` was not
    /// audited.
    pub fn f32_misses(&self) -> Vec<BudgetMiss> {
        let Some(general) = self
            .rows
            .iter()
            .find(|r| r.dtype == "f32" && matches!(r.plan, Some(ForwardPlan::General)))
        else {
            return Vec::new();
        };
        let eps = F32_FLOOR * f32::EPSILON as f64;
        let kinks = self.kinks();
        let storage = self.f32_floor();
        let mut out = Vec::new();
        for r in self.rows.iter().filter(|r| r.dtype == "f32") {
            for (k, (e, g)) in r.params.iter().zip(&general.params).enumerate() {
                let allowed = (F32_FACTOR * g.max_abs)
                    .max(eps * e.scale)
                    .max(eps * self.model_scale)
                    .max(storage.map_or(0.0, |f| F32_STORAGE_FACTOR * f.params[k].max_abs))
                    + kinks.map_or(0.0, |row| row.params[k].max_abs);
                if !within(e.max_abs, allowed) {
                    let rel = if e.scale > 0.0 {
                        allowed / e.scale
                    } else {
                        allowed
                    };
                    out.push(miss(r, e, rel));
                }
            }
        }
        out
    }
}

/// `err ≤ allowed`, false for a NaN error (a NaN is over every budget).
fn within(err: f64, allowed: f64) -> bool {
    matches!(
        err.partial_cmp(&allowed),
        Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
    )
}

fn miss(r: &PrecisionRow, e: &TensorError, allowed: f64) -> BudgetMiss {
    BudgetMiss {
        plan: r.plan_name(),
        dtype: r.dtype,
        name: e.name.clone(),
        rel: e.rel,
        allowed,
    }
}

fn widen<T: Real>(g: &ArrayD<T>) -> Vec<f64> {
    g.iter().map(|x| x.to_f64()).collect()
}

/// Audits `plans` (for an EFA; ignored for a factor model) of `model` on `batch` at `params`
/// (rounded to f32 first) in f32 and f64 against the `general` plan in double-double.
///
/// # Errors
/// A model or batch error of the reference or of a plan that applies.
pub fn precision_audit(
    model: &ModelConfig,
    objective: &Objective,
    params: &Params<f64>,
    batch: &Samples,
    plans: &[ForwardPlan],
    threads: &Threads,
) -> Result<PrecisionAudit, TrainError> {
    audit(model, objective, params, batch, plans, threads, false)
}

/// [`precision_audit`], and first a row [`FLOOR`]: the `general` plan in double-double with
/// every value its tape records rounded to f64 (parameters, data, every op's result), against
/// the exact reference. That is the definition evaluated with f64 storage and exact
/// arithmetic: its error per tensor, the *f64 floor*, is what half an ulp in every stored value
/// costs the gradient (its sensitivity to f64 storage), a bound below which no f64 evaluation
/// that stores its values in f64 gets. [`PrecisionAudit::f64_misses`] then judges a tensor
/// whose floor is near or above the budget against the floor. Costs one more double-double
/// evaluation.
///
/// # Errors
/// As [`precision_audit`].
pub fn precision_audit_with_floor(
    model: &ModelConfig,
    objective: &Objective,
    params: &Params<f64>,
    batch: &Samples,
    plans: &[ForwardPlan],
    threads: &Threads,
) -> Result<PrecisionAudit, TrainError> {
    audit(model, objective, params, batch, plans, threads, true)
}

fn audit(
    model: &ModelConfig,
    objective: &Objective,
    params: &Params<f64>,
    batch: &Samples,
    plans: &[ForwardPlan],
    threads: &Threads,
    with_floor: bool,
) -> Result<PrecisionAudit, TrainError> {
    let params = params.cast::<f32>();
    let efa = matches!(model, ModelConfig::Efa(_));
    let eval = |plan: Option<ForwardPlan>| {
        Evaluator::new(model, objective)
            .with_plan(plan)
            .with_threads(threads)
    };
    let reference_plan = efa.then_some(ForwardPlan::General);
    let (ref_loss, ref_grads) =
        eval(reference_plan).loss_and_grads::<Dd>(&params.cast::<Dd>(), batch)?;
    let reference: Vec<Vec<f64>> = ref_grads.iter().map(widen).collect();
    let model_scale =
        reference.iter().flatten().fold(
            0.0f64,
            |m, g| if g.is_finite() { m.max(g.abs()) } else { m },
        );
    let names: Vec<(String, Vec<usize>)> = params
        .iter()
        .map(|(n, v)| (n.to_string(), v.shape().to_vec()))
        .collect();
    let mut audit = PrecisionAudit {
        reference_loss: ref_loss,
        model_scale,
        rows: Vec::new(),
        skipped: Vec::new(),
    };
    let row = |plan, dtype, loss: f64, grads: &[Vec<f64>], eps: f64| PrecisionRow {
        plan,
        dtype,
        loss: tensor_error("loss", &[], &[loss], &[ref_loss], eps),
        params: names
            .iter()
            .zip(grads.iter().zip(&reference))
            .map(|((n, shape), (g, r))| tensor_error(n, shape, g, r, eps))
            .collect(),
    };
    if with_floor {
        let (loss, grads) = eval(reference_plan)
            .with_round_values_to_f64(true)
            .loss_and_grads::<Dd>(&params.cast::<Dd>(), batch)?;
        let grads: Vec<Vec<f64>> = grads.iter().map(widen).collect();
        audit
            .rows
            .push(row(reference_plan, FLOOR, loss, &grads, f64::EPSILON));
    }
    let list: Vec<Option<ForwardPlan>> = if efa {
        plans.iter().map(|&p| Some(p)).collect()
    } else {
        vec![None]
    };
    for plan in list {
        if let Some(p) = plan {
            if let Err(e) = model.plan_for(batch, Some(p)) {
                audit.skipped.push((p, e.to_string()));
                continue;
            }
        }
        let ev = eval(plan);
        let (l32, g32) = ev.loss_and_grads::<f32>(&params, batch)?;
        let (l64, g64) = ev.loss_and_grads::<f64>(&params.cast::<f64>(), batch)?;
        let rows = [
            (
                "f32",
                l32,
                g32.iter().map(widen).collect::<Vec<_>>(),
                f32::EPSILON as f64,
            ),
            ("f64", l64, g64.iter().map(widen).collect(), f64::EPSILON),
        ];
        for (dtype, loss, grads, eps) in rows {
            audit.rows.push(row(plan, dtype, loss, &grads, eps));
        }
    }
    // Where an f32 tensor misses its budget, what f32 storage and what rounding at the ReLU
    // kinks cost (both measured against the same misses, so neither hides the other).
    let f32_missed = !audit.f32_misses().is_empty();
    if f32_missed {
        let (loss, grads) = eval(reference_plan)
            .with_round_values_to_f32(true)
            .loss_and_grads::<Dd>(&params.cast::<Dd>(), batch)?;
        let grads: Vec<Vec<f64>> = grads.iter().map(widen).collect();
        audit.rows.push(row(
            reference_plan,
            F32_STORAGE,
            loss,
            &grads,
            f32::EPSILON as f64,
        ));
    }
    if f32_missed {
        let (loss, grads) = eval(reference_plan)
            .with_relu_kink_flip(Some(F32_KINK_BAND))
            .loss_and_grads::<Dd>(&params.cast::<Dd>(), batch)?;
        let grads: Vec<Vec<f64>> = grads.iter().map(widen).collect();
        audit.rows.push(row(
            reference_plan,
            KINKS,
            loss,
            &grads,
            f32::EPSILON as f64,
        ));
    }
    Ok(audit)
}

/// The weights a precision audit runs at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weights {
    /// The model's initialisation.
    Init,
    /// Every weight of the initialisation ×[`SHARP_ALL`] (3): larger activations, sharper
    /// attention and sums that cancel more, as training produces ([`sharpen`]).
    Sharp,
    /// The attention query and key kernels of the initialisation ×[`SHARP_QK`] (40), the rest
    /// as initialised: near one-hot attention ([`sharpen_attention`]).
    SharpAttention,
    /// The initialisation trained for a few epochs with the run's recipe.
    Trained,
}

impl Weights {
    /// Every setting, in the order above.
    pub const ALL: [Weights; 4] = [
        Weights::Init,
        Weights::Sharp,
        Weights::SharpAttention,
        Weights::Trained,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Weights::Init => "init",
            Weights::Sharp => "sharp",
            Weights::SharpAttention => "sharp-attention",
            Weights::Trained => "trained",
        }
    }
}

/// Every weight's factor in [`sharpen`].
pub const SHARP_ALL: f64 = 3.0;
/// The attention query and key kernels' factor in [`sharpen_attention`]: the attention scores
/// grow by 40² = 1600 over the initialisation's.
pub const SHARP_QK: f64 = 40.0;

/// Whether `name` is an attention block's query or key kernel (`block{l}.attn.q.w`,
/// `block{l}.attn.k.w`).
pub fn is_query_or_key_kernel(name: &str) -> bool {
    name.ends_with(".attn.q.w") || name.ends_with(".attn.k.w")
}

/// The "sharp" weights of a precision audit: every parameter ×[`SHARP_ALL`] (3).
pub fn sharpen(params: &Params<f64>) -> Params<f64> {
    scaled(params, |_| SHARP_ALL)
}

/// The "sharp-attention" weights: the attention query and key kernels ×[`SHARP_QK`] (40), the
/// other parameters unchanged.
pub fn sharpen_attention(params: &Params<f64>) -> Params<f64> {
    scaled(params, |name| {
        if is_query_or_key_kernel(name) {
            SHARP_QK
        } else {
            1.0
        }
    })
}

fn scaled(params: &Params<f64>, factor: impl Fn(&str) -> f64) -> Params<f64> {
    let mut p = params.clone();
    for (name, v) in p.iter_mut() {
        let c = factor(name);
        v.mapv_inplace(|x| x * c);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(plan: ForwardPlan, dtype: &'static str, got: f64) -> PrecisionRow {
        let e = |n: &str, g: &[f64], w: &[f64]| tensor_error(n, &[2], g, w, f32::EPSILON as f64);
        PrecisionRow {
            plan: Some(plan),
            dtype,
            loss: tensor_error("loss", &[], &[1.0], &[1.0], f32::EPSILON as f64),
            params: vec![e("w", &[got, 0.5], &[1.0, 0.5])],
        }
    }

    fn audit(fused: f64, kinks: Option<f64>) -> PrecisionAudit {
        audit_with(fused, None, kinks)
    }

    fn audit_with(fused: f64, storage: Option<f64>, kinks: Option<f64>) -> PrecisionAudit {
        let mut rows = vec![
            row(ForwardPlan::General, "f32", 1.0 + 1e-6),
            row(ForwardPlan::FusedBlocks, "f32", fused),
        ];
        rows.extend(storage.map(|k| row(ForwardPlan::General, F32_STORAGE, k)));
        rows.extend(kinks.map(|k| row(ForwardPlan::General, KINKS, k)));
        PrecisionAudit {
            reference_loss: 1.0,
            model_scale: 1.0,
            rows,
            skipped: Vec::new(),
        }
    }

    /// A plan 50× `general`'s f32 error misses; with a measured ReLU-kink spread larger than
    /// the difference it does not, and an error beyond 2× `general` plus the spread still does.
    #[test]
    fn the_kink_spread_widens_the_f32_budget_by_itself_only() {
        let names = |a: &PrecisionAudit| -> Vec<String> {
            a.f32_misses().iter().map(|m| m.plan.clone()).collect()
        };
        assert_eq!(names(&audit(1.0 + 5e-5, None)), vec!["fused-blocks"]);
        assert!(audit(1.0 + 5e-5, Some(1.0 - 6e-5)).f32_misses().is_empty());
        let over = audit(1.0 + 2e-4, Some(1.0 - 6e-5));
        assert_eq!(names(&over), vec!["fused-blocks"]);
        let allowed = over.f32_misses()[0].allowed;
        assert!((allowed - (2e-6 + 6e-5)).abs() < 1e-12, "{allowed}");
        assert!(audit(1.0 + 5e-5, None).kinks().is_none());
    }

    /// A `general` plan below the f32 floor does not set the budget: a plan is allowed twice
    /// the floor when that is more than twice `general`'s error, and no more.
    #[test]
    fn the_f32_floor_widens_the_budget_to_twice_itself() {
        // general 1e-6, fused 5e-5 (50×): a miss without the floor…
        assert_eq!(audit_with(1.0 + 5e-5, None, None).f32_misses().len(), 1);
        // …none with a floor of 3e-5 (allowed 6e-5)…
        let a = audit_with(1.0 + 5e-5, Some(1.0 + 3e-5), None);
        assert!(a.f32_misses().is_empty());
        assert!(a.f32_floor().is_some());
        // …and a miss with a floor of 2e-5 (allowed 4e-5), the floor's allowance stated.
        let over = audit_with(1.0 + 5e-5, Some(1.0 - 2e-5), None);
        let m = over.f32_misses();
        assert_eq!(m.len(), 1);
        assert!((m[0].allowed - 4e-5).abs() < 1e-12, "{}", m[0].allowed);
        // The kink spread adds on top of the floor's allowance.
        let both = audit_with(1.0 + 5e-5, Some(1.0 - 2e-5), Some(1.0 + 1.5e-5));
        assert!(both.f32_misses().is_empty());
    }
}
