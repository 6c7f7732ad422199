//! Either model family as one value: configuration, parameter declaration, registration on
//! a tape (typed handles), and the forward pass with an explicit plan.

use crate::batch::Samples;
use crate::efa::{EfaConfig, EfaVars, ForwardPlan};
use crate::fm::{FmConfig, FmVars};
use crate::ModelError;
use efa_nn::params::{Initialiser, Layout, ParamCount, ParamSink, Params, Registrar};
use efa_num::Real;
use efa_tape::{Tape, Var};
use serde::{Deserialize, Serialize};

/// Either model family, as one serialisable value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelConfig {
    /// Exponential Family Attention.
    Efa(EfaConfig),
    /// Linear factor model.
    Fm(FmConfig),
}

/// Every parameter of a model as a typed handle (see [`ModelConfig::register`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelVars<H = Var> {
    /// An EFA model's handles.
    Efa(EfaVars<H>),
    /// A factor model's handles.
    Fm(FmVars<H>),
}

/// A parameter set registered on a tape: the typed handles the forward pass reads, and every
/// parameter's variable in declaration order (with its name, for reports).
#[derive(Clone, Debug)]
pub struct Registered {
    /// Typed handles.
    pub vars: ModelVars,
    /// `(name, variable)` of every parameter, in declaration order.
    pub list: Vec<(String, Var)>,
}

impl ModelConfig {
    /// Checks for impossible shapes, then that the parameters can be built, and counts them
    /// ([`crate::size::count_params`]: no size beyond the limit, no overflow, nothing
    /// allocated). The one size check of a model.
    pub fn validate(&self) -> Result<ParamCount, ModelError> {
        match self {
            ModelConfig::Efa(c) => c.validate()?,
            ModelConfig::Fm(c) => c.validate()?,
        }
        crate::size::count_params(self)
    }

    /// Declares every parameter to `s` in order (see [`efa_nn::params`]).
    pub fn declare<S: ParamSink>(&self, s: &mut S) -> Result<ModelVars<S::Handle>, ModelError> {
        Ok(match self {
            ModelConfig::Efa(c) => ModelVars::Efa(c.declare(s)?),
            ModelConfig::Fm(c) => ModelVars::Fm(c.declare(s)?),
        })
    }

    /// Creates seeded parameters (Keras default initialisers, docs/paper.md §1).
    ///
    /// # Panics
    /// Never for a configuration that passed [`ModelConfig::validate`]: declaring to an
    /// initialiser cannot fail.
    pub fn init<T: Real>(&self, seed: u64) -> Params<T> {
        let mut init = Initialiser::new(seed);
        self.declare(&mut init)
            .expect("declaring parameters to an initialiser cannot fail");
        init.params
    }

    /// Names and shapes of every parameter, without values.
    pub fn layout(&self) -> Layout {
        let mut layout = Layout::default();
        self.declare(&mut layout)
            .expect("declaring parameters to a layout cannot fail");
        layout
    }

    /// Registers `params` on `tape` and returns the typed handles, checking that the set has
    /// exactly the declared parameters in the declared order, names and shapes (an error
    /// names the first difference).
    pub fn register<T: Real>(
        &self,
        tape: &mut Tape<T>,
        params: &Params<T>,
    ) -> Result<Registered, ModelError> {
        let mut reg = Registrar::new(tape, params);
        let vars = self.declare(&mut reg)?;
        let list = params
            .iter()
            .map(|(n, _)| n.to_string())
            .zip(reg.finish()?)
            .collect();
        Ok(Registered { vars, list })
    }

    /// The forward plan for `batch`: `requested`, checked to apply, or
    /// [`EfaConfig::choose_plan`]'s choice. Factor models have a single forward, reported as
    /// [`ForwardPlan::General`]; forcing another plan on one is an error.
    pub fn plan_for(
        &self,
        batch: &Samples,
        requested: Option<ForwardPlan>,
    ) -> Result<ForwardPlan, ModelError> {
        match (self, requested) {
            (ModelConfig::Efa(c), Some(p)) => c.check_plan(p, batch).map(|_| p),
            (ModelConfig::Efa(c), None) => Ok(c.choose_plan(batch)),
            (ModelConfig::Fm(_), None | Some(ForwardPlan::General)) => Ok(ForwardPlan::General),
            (ModelConfig::Fm(_), Some(p)) => Err(ModelError::Plan {
                plan: p.name(),
                reason: "a factor model has a single forward (plan `general`)".into(),
            }),
        }
    }

    /// η for a minibatch by the `requested` plan or the automatic choice
    /// ([`ModelConfig::plan_for`]), with the plan that ran: the plan is checked once.
    pub fn forward_with<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &ModelVars,
        batch: &Samples,
        requested: Option<ForwardPlan>,
    ) -> Result<(Var, ForwardPlan), ModelError> {
        let plan = self.plan_for(batch, requested)?;
        let eta = match (self, vars) {
            (ModelConfig::Efa(c), ModelVars::Efa(v)) => c.run_plan(tape, v, batch, plan)?,
            (ModelConfig::Fm(c), ModelVars::Fm(v)) => c.forward(tape, v, batch)?,
            _ => {
                return Err(ModelError::MissingParam(
                    "the parameters belong to the other model family".into(),
                ))
            }
        };
        Ok((eta, plan))
    }

    /// η for a minibatch, computed by `plan` (checked to apply; see
    /// [`ModelConfig::plan_for`]).
    pub fn forward<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &ModelVars,
        batch: &Samples,
        plan: ForwardPlan,
    ) -> Result<Var, ModelError> {
        match (self, vars) {
            (ModelConfig::Efa(c), ModelVars::Efa(v)) => c.forward(tape, v, batch, plan),
            (ModelConfig::Fm(c), ModelVars::Fm(v)) => {
                if plan != ForwardPlan::General {
                    self.plan_for(batch, Some(plan))?;
                }
                c.forward(tape, v, batch)
            }
            _ => Err(ModelError::MissingParam(
                "the parameters belong to the other model family".into(),
            )),
        }
    }

    /// `"efa"` or `"fm"`.
    pub fn kind(&self) -> &'static str {
        match self {
            ModelConfig::Efa(_) => "efa",
            ModelConfig::Fm(_) => "fm",
        }
    }
}
