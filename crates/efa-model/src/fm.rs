//! Linear factor-model baselines (exponential-family embeddings; the paper's Propositions 1–3
//! as its reference code ran them, docs/paper.md §2.4, §3.4).

use crate::batch::Samples;
use crate::ModelError;
use efa_nn::layers::DenseVars;
use efa_nn::params::{InitKind, ParamSink};
use efa_nn::TapeNn;
use efa_num::Real;
use efa_tape::{Tape, Var};
use ndarray::ArrayD;
use serde::{Deserialize, Serialize};

/// Every parameter of a factor model as a typed handle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FmVars<H = Var> {
    /// Rated items: `alpha`, `rho` `[items, dim]`.
    Rating {
        /// Context embeddings α.
        alpha: H,
        /// Target embeddings ρ.
        rho: H,
    },
    /// Item contexts: `alpha` `[tokens, dim]` and `out.w` `[dim, classes]`.
    Item {
        /// Context embeddings α.
        alpha: H,
        /// Output kernel (no bias).
        out: DenseVars<H>,
    },
}

/// Configuration of a factor model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FmConfig {
    /// Rated items: η = ⟨ρ\[center\], (Σⱼ rⱼ·α\[mⱼ\]) / length⟩ with context items mⱼ and their
    /// ratings rⱼ (`Samples::weights`); no bias. Tables have `items` rows (row 0 = padding).
    Rating {
        /// Rows of α and ρ.
        items: usize,
        /// Embedding width.
        dim: usize,
    },
    /// Item contexts: η = (Σⱼ α\[cⱼ\])·W, one logit per class, no bias; padding rows (token 0)
    /// contribute nothing. A \[MASK\] token in the context acts as a learned bias vector.
    Item {
        /// Rows of α (padding, items, optional \[MASK\]).
        tokens: usize,
        /// Embedding width.
        dim: usize,
        /// Number of classes (width of η).
        classes: usize,
    },
}

impl FmConfig {
    /// Checks for impossible shapes: every size at least 1 (sizes are [`crate::size`]'s).
    pub fn validate(&self) -> Result<(), ModelError> {
        let ok = match self {
            FmConfig::Rating { items, dim } => *items > 0 && *dim > 0,
            FmConfig::Item {
                tokens,
                dim,
                classes,
            } => *tokens > 0 && *dim > 0 && *classes > 0,
        };
        if !ok {
            return Err(ModelError::config(
                "fm",
                format!("{self:?}: every size must be at least 1"),
            ));
        }
        Ok(())
    }

    /// Creates the parameters (Keras defaults), in declaration order.
    pub fn init<T: Real>(&self, seed: u64) -> crate::Params<T> {
        let mut init = efa_nn::params::Initialiser::new(seed);
        self.declare(&mut init)
            .expect("declaring parameters to an initialiser cannot fail");
        init.params
    }

    /// Declares the parameters (Keras defaults: Uniform(−0.05, 0.05) tables, Glorot kernel):
    /// `alpha`, `rho` for rated items; `alpha`, `out.w` for item contexts.
    pub fn declare<S: ParamSink>(&self, s: &mut S) -> Result<FmVars<S::Handle>, ModelError> {
        Ok(match *self {
            FmConfig::Rating { items, dim } => FmVars::Rating {
                alpha: s.param("alpha", &[items, dim], InitKind::Embedding)?,
                rho: s.param("rho", &[items, dim], InitKind::Embedding)?,
            },
            FmConfig::Item {
                tokens,
                dim,
                classes,
            } => FmVars::Item {
                alpha: s.param("alpha", &[tokens, dim], InitKind::Embedding)?,
                out: DenseVars::declare(s, "out", dim, classes, false)?,
            },
        })
    }

    /// Builds η `[B, width]` for a minibatch.
    pub fn forward<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &FmVars,
        batch: &Samples,
    ) -> Result<Var, ModelError> {
        let (b, c) = batch.tokens.dim();
        // Padding (item 0) contributes nothing: a zero weight for rating contexts, a skipped
        // entry for item contexts.
        let ids = batch
            .tokens
            .mapv(|t| if t == 0 { efa_nn::ops::gather::NONE } else { t });
        match (self, vars) {
            (FmConfig::Rating { dim, .. }, FmVars::Rating { alpha, rho }) => {
                let r = batch
                    .weights
                    .as_ref()
                    .ok_or_else(|| ModelError::Batch("rating FM needs context `weights`".into()))?;
                let center = batch
                    .center
                    .as_ref()
                    .ok_or_else(|| ModelError::Batch("rating FM needs `center` items".into()))?;
                if r.dim() != (b, c) {
                    return Err(ModelError::Batch(format!(
                        "field `weights`: shape {:?}, expected [{b}, {c}]",
                        r.shape()
                    )));
                }
                // wⱼ = rⱼ / length, so that Σⱼ wⱼ α[mⱼ] is the rating-weighted mean.
                let w = ndarray::Array2::from_shape_fn((b, c), |(i, j)| {
                    T::from_f64(r[[i, j]] / batch.lengths[i].max(1) as f64)
                });
                let ctx = tape.bag_sum(*alpha, ids, Some(w))?;
                let ids = ArrayD::from_shape_vec(vec![b], center.clone())
                    .expect("center length checked by validate");
                let rho = tape.embedding(*rho, &ids)?;
                let prod = tape.mul(rho, ctx)?;
                debug_assert_eq!(tape.shape(prod), &[b, *dim]);
                Ok(tape.sum(prod, &[1], true)?)
            }
            (FmConfig::Item { .. }, FmVars::Item { alpha, out }) => {
                let ctx = tape.bag_sum(*alpha, ids, None)?;
                Ok(out.apply(tape, ctx)?)
            }
            _ => Err(ModelError::MissingParam(
                "the parameters are of the other factor-model kind".into(),
            )),
        }
    }
}
