//! Linear factor-model baselines (exponential-family embeddings; the paper's Propositions 1–3
//! as its reference code ran them, PAPER.md §2.4, §3.4).

use crate::batch::Samples;
use crate::layers::{dense, param, Dense};
use crate::params::{Init, Params};
use crate::ModelError;
use efa_num::Real;
use efa_tape::{Tape, Var};
use ndarray::ArrayD;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

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
    /// Checks for impossible shapes.
    pub fn validate(&self) -> Result<(), ModelError> {
        let ok = match self {
            FmConfig::Rating { items, dim } => *items > 0 && *dim > 0,
            FmConfig::Item {
                tokens,
                dim,
                classes,
            } => *tokens > 0 && *dim > 0 && *classes > 0,
        };
        if ok {
            Ok(())
        } else {
            Err(ModelError::Config(format!(
                "FM config {self:?}: every size must be at least 1"
            )))
        }
    }

    /// Creates the parameters (Keras defaults: Uniform(−0.05, 0.05) tables, Glorot kernel).
    pub fn init<T: Real>(&self, seed: u64) -> Params<T> {
        let mut init = Init::new(seed);
        let mut p = Params::new();
        match *self {
            FmConfig::Rating { items, dim } => {
                p.insert("alpha", init.embedding(items, dim));
                p.insert("rho", init.embedding(items, dim));
            }
            FmConfig::Item {
                tokens,
                dim,
                classes,
            } => {
                p.insert("alpha", init.embedding(tokens, dim));
                Dense {
                    fan_in: dim,
                    fan_out: classes,
                    bias: false,
                }
                .init(&mut p, &mut init, "out");
            }
        }
        p
    }

    /// Builds η `[B, width]` for a minibatch.
    pub fn forward<T: Real>(
        &self,
        tape: &mut Tape<T>,
        vars: &HashMap<String, Var>,
        batch: &Samples,
    ) -> Result<Var, ModelError> {
        let (b, c) = batch.tokens.dim();
        // Padding (item 0) contributes nothing: a zero weight for rating contexts, a skipped
        // entry for item contexts.
        let ids = batch
            .tokens
            .mapv(|t| if t == 0 { efa_tape::ops::gather::NONE } else { t });
        match self {
            FmConfig::Rating { dim, .. } => {
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
                let ctx = tape.bag_sum(param(vars, "alpha")?, ids, Some(w))?;
                let ids = ArrayD::from_shape_vec(vec![b], center.clone())
                    .expect("center length checked by validate");
                let rho = tape.embedding(param(vars, "rho")?, &ids)?;
                let prod = tape.mul(rho, ctx)?;
                debug_assert_eq!(tape.shape(prod), &[b, *dim]);
                Ok(tape.sum(prod, &[1], true)?)
            }
            FmConfig::Item { .. } => {
                let ctx = tape.bag_sum(param(vars, "alpha")?, ids, None)?;
                dense(tape, vars, "out", ctx)
            }
        }
    }
}
