//! Forward plans: the named ways of computing one EFA forward pass, the one function that
//! chooses among them, and the one place every forward pass goes through.
//!
//! Every plan computes the same function η(θ; batch) up to round-off; they differ in how much
//! work they share. [`ForwardPlan::General`] is the definition; the others are exact
//! shortcuts, each tested against it on the same batch (losses and all gradients, f64).
//!
//! Which plan runs when ([`EfaConfig::choose_plan`], unless one is forced):
//!
//! | plan | file | runs for |
//! |---|---|---|
//! | `query-stream` | `stream.rs` | causal models without continuous inputs, on batches whose sequences hold at least two targets on average |
//! | `two-block-fold` | `fold.rs` | two blocks, no layer norm, no feed-forward block, no continuous inputs (the paper's sequence models) |
//! | `fused-blocks` | `fused.rs` (and `shared.rs`) | post-norm blocks with a feed-forward layer and padding-only attention, two blocks or more (the temperature models); its first block's attention runs once per sequence (`shared.rs`) on batches whose sequence ids hold at least two samples on average, all of one length |
//! | `tabled` | `tabled.rs` | every other model |
//! | `general` | `general.rs` | never chosen: the definition, forced for tests, audits and attention maps |
//!
//! A plan is checked once per batch: by [`crate::ModelConfig::plan_for`] (a forced plan must
//! apply) inside [`crate::ModelConfig::forward_with`], which then runs it through
//! `EfaConfig::run_plan`, the dispatch below.

mod fold;
mod fused;
mod general;
mod shared;
mod stream;
mod tabled;

pub use general::LayerTrace;

use super::{EfaConfig, EfaVars, Norm, Visibility};
use crate::batch::Samples;
use crate::ModelError;
use efa_num::Real;
use efa_tape::{Tape, Var};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fmt;

/// How an EFA forward pass is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardPlan {
    /// The definition, with nothing shared: every position of the batch is embedded (for
    /// continuous inputs, every position runs the branch and fusion MLPs), every block runs
    /// on every position with dense projections, and the target rows are gathered at the end.
    General,
    /// Work proportional to what the targets see: the batch is trimmed to the positions any
    /// target can reach; the first block's query/key/value projections are gathered from
    /// projected tables (`item_emb·W`, `value_emb·W`, `pos_emb·W`; the projection of a sum of
    /// rows is the sum of projected rows), unless pre-norm sits in between; continuous inputs
    /// run once per distinct (value or target, site, lag) input; and the last block runs its
    /// queries at the target rows only (everything after it is per position).
    Tabled,
    /// The paper's two-block models (no layer norm, no feed-forward, no continuous inputs):
    /// [`ForwardPlan::Tabled`] with the first block's output projection folded into the second
    /// block's keys and values, so that the first block's output is needed at the target rows
    /// only (see `fold.rs`).
    TwoBlockFold,
    /// Causal models over batches with sequence ids (`Samples::group`): each sequence runs
    /// once as an unmasked causal "content" stream and each target as a one-row "query"
    /// stream over the content keys before it plus its own key (see `stream.rs`).
    QueryStream,
    /// Post-norm models with a feed-forward block and padding-only attention (the
    /// temperature EFAs): [`ForwardPlan::Tabled`] with every block one fused tape op
    /// (attention, output projection, residual, layer norm, feed-forward, residual, layer
    /// norm), computed in parallel chunks of whole samples (see `fused.rs`). With sequence
    /// ids and at least two samples per id on average, the first block's attention runs once
    /// per sequence with leave-one-out sums per target (see `shared.rs`).
    FusedBlocks,
}

impl ForwardPlan {
    /// Every plan, in the order above.
    pub const ALL: [ForwardPlan; 5] = [
        ForwardPlan::General,
        ForwardPlan::Tabled,
        ForwardPlan::TwoBlockFold,
        ForwardPlan::QueryStream,
        ForwardPlan::FusedBlocks,
    ];

    /// One line on what the plan shares (for help texts).
    pub fn summary(self) -> &'static str {
        match self {
            ForwardPlan::General => {
                "the definition: every position through every block, nothing shared"
            }
            ForwardPlan::Tabled => {
                "positions trimmed to what targets reach, first-block projections from \
                 projected tables, continuous inputs once per distinct input, last block at \
                 the targets"
            }
            ForwardPlan::TwoBlockFold => {
                "two-block models without norm or FFN: tabled, with the first block's output \
                 projection folded into the second block's keys and values"
            }
            ForwardPlan::QueryStream => {
                "causal models with sequence ids: one content stream per sequence and a \
                 one-row query stream per target"
            }
            ForwardPlan::FusedBlocks => {
                "post-norm blocks with an FFN and padding-only attention: tabled, with each \
                 block one fused node over parallel sample chunks (the first block's attention \
                 once per sequence with sequence ids)"
            }
        }
    }

    /// The plan's name on the command line and in reports (`general`, `tabled`,
    /// `two-block-fold`, `query-stream`, `fused-blocks`).
    pub fn name(self) -> &'static str {
        match self {
            ForwardPlan::General => "general",
            ForwardPlan::Tabled => "tabled",
            ForwardPlan::TwoBlockFold => "two-block-fold",
            ForwardPlan::QueryStream => "query-stream",
            ForwardPlan::FusedBlocks => "fused-blocks",
        }
    }
}

impl std::str::FromStr for ForwardPlan {
    type Err = String;

    /// A plan by its [`ForwardPlan::name`].
    fn from_str(s: &str) -> Result<Self, String> {
        ForwardPlan::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = ForwardPlan::ALL.iter().map(|p| p.name()).collect();
                format!("unknown forward plan `{s}` (one of {})", names.join(", "))
            })
    }
}

impl fmt::Display for ForwardPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl EfaConfig {
    /// The plan [`EfaConfig::forward`] should use for `batch` when none is forced; the only
    /// place a plan is chosen:
    /// 1. [`ForwardPlan::QueryStream`] for a causal model without continuous inputs when the
    ///    batch has sequence ids and its sequences hold at least two of its targets on
    ///    average (for mostly single-target sequences the per-sample pass is cheaper);
    /// 2. else [`ForwardPlan::TwoBlockFold`] when it applies (two blocks, no layer norm, no
    ///    feed-forward block, no continuous inputs);
    /// 3. else [`ForwardPlan::FusedBlocks`] when it applies (post-norm with a feed-forward
    ///    block, padding-only attention) and the model has at least two blocks (with one
    ///    block only the target rows are queried, and the tabled plan's attention kernel is
    ///    faster for single-row queries than the fused op's);
    /// 4. else [`ForwardPlan::Tabled`].
    ///
    /// [`ForwardPlan::General`] is never chosen: it is the reference the others are checked
    /// against.
    pub fn choose_plan(&self, batch: &Samples) -> ForwardPlan {
        if self.check_plan(ForwardPlan::QueryStream, batch).is_ok() {
            if let Some(group) = &batch.group {
                let sequences: HashSet<usize> = group.iter().copied().collect();
                if 2 * sequences.len() <= batch.len() {
                    return ForwardPlan::QueryStream;
                }
            }
        }
        if self.check_plan(ForwardPlan::TwoBlockFold, batch).is_ok() {
            return ForwardPlan::TwoBlockFold;
        }
        if self.layers >= 2 && self.check_plan(ForwardPlan::FusedBlocks, batch).is_ok() {
            return ForwardPlan::FusedBlocks;
        }
        ForwardPlan::Tabled
    }

    /// Whether `plan` can compute this model on `batch`; the error says why not.
    pub fn check_plan(&self, plan: ForwardPlan, batch: &Samples) -> Result<(), ModelError> {
        let no = |reason: String| {
            Err(ModelError::Plan {
                plan: plan.name(),
                reason,
            })
        };
        match plan {
            ForwardPlan::General | ForwardPlan::Tabled => Ok(()),
            ForwardPlan::TwoBlockFold => {
                if self.layers != 2 {
                    return no(format!(
                        "it needs layers = 2, the model has {}",
                        self.layers
                    ));
                }
                if self.norm != Norm::None {
                    return no("it needs norm = none".into());
                }
                if self.ffn.is_some() {
                    return no("it needs a model without a feed-forward block (ffn)".into());
                }
                if self.continuous.is_some() {
                    return no("it needs a model without continuous inputs".into());
                }
                Ok(())
            }
            ForwardPlan::QueryStream => {
                if self.direction != Visibility::Causal {
                    return no(format!(
                        "it needs direction = causal, the model has {:?}",
                        self.direction
                    ));
                }
                if self.continuous.is_some() {
                    return no("it needs a model without continuous inputs".into());
                }
                if batch.group.is_none() {
                    return no("it needs sequence ids (Samples::group) on the batch".into());
                }
                Ok(())
            }
            ForwardPlan::FusedBlocks => {
                if self.norm != Norm::Post || self.ffn.is_none() {
                    return no("it needs norm = post and a feed-forward block (ffn)".into());
                }
                if self.direction != Visibility::Padding {
                    return no(format!(
                        "it needs direction = padding, the model has {:?}",
                        self.direction
                    ));
                }
                Ok(())
            }
        }
    }

    /// η `[B, out_dim]` for a minibatch on `tape` with the parameters `vars`, computed by
    /// `plan` (see [`EfaConfig::choose_plan`]; an error if the plan does not apply).
    pub fn forward<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &EfaVars,
        batch: &Samples,
        plan: ForwardPlan,
    ) -> Result<Var, ModelError> {
        self.check_plan(plan, batch)?;
        self.run_plan(tape, vars, batch, plan)
    }

    /// The plan's forward, the plan already checked: the one place every forward pass goes
    /// through.
    pub(crate) fn run_plan<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &EfaVars,
        batch: &Samples,
        plan: ForwardPlan,
    ) -> Result<Var, ModelError> {
        match plan {
            ForwardPlan::General => general::forward(self, tape, vars, batch, None),
            ForwardPlan::Tabled => tabled::forward(self, tape, vars, batch),
            ForwardPlan::TwoBlockFold => fold::forward(self, tape, vars, batch),
            ForwardPlan::QueryStream => stream::forward(self, tape, vars, batch),
            ForwardPlan::FusedBlocks => fused::forward(self, tape, vars, batch),
        }
    }

    /// η by the general plan together with every block's [`LayerTrace`] (for attention maps:
    /// the probabilities are `softmax(scale·q·kᵀ)` over the visible keys, per head).
    pub fn forward_traced<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &EfaVars,
        batch: &Samples,
    ) -> Result<(Var, Vec<LayerTrace>), ModelError> {
        let mut trace = Vec::with_capacity(self.layers);
        let eta = general::forward(self, tape, vars, batch, Some(&mut trace))?;
        Ok((eta, trace))
    }
}
