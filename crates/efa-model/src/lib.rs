//! EFA models and factor-model baselines assembled from the efa crates: the tape
//! (`efa-tape`) and its building blocks (`efa-nn`: linear, gather-sum, attention on the
//! `efa-attn` kernel, exponential-family nll and links from `efa-expfam`, fused blocks,
//! parameter declaration and layers). How models are trained, stored and scheduled is
//! `efa-train`'s and `efa-paper`'s.
//!
//! * [`ModelConfig`] (an [`EfaConfig`] or an [`FmConfig`]) declares its parameters once
//!   ([`efa_nn::params`]); [`ModelConfig::register`] puts a parameter set on a tape as typed handles
//!   ([`EfaVars`], [`fm::FmVars`]), and [`ModelConfig::forward`] computes η with an explicit
//!   [`ForwardPlan`] (the general definition or one of its exact shortcuts).
//! * [`Objective`]: the paper's losses and the fully normalised nll of any family.
//!
//! ```
//! use efa_model::{Visibility, EfaConfig, ForwardPlan, ModelConfig, Norm, Objective, Positions};
//! use efa_model::{Samples, Targets};
//! use efa_tape::Tape;
//! // The paper's item EFA (docs/paper.md §3.4) for 4 items and baskets of up to 3, bidirectional:
//! // item table with padding (0) and [MASK] (5) rows, positions at valid positions, two
//! // blocks of 2 heads × 16, logits over the 4 items.
//! let model = ModelConfig::Efa(EfaConfig {
//!     items: 6, item_dim: 32, zero_padding: true, values: None,
//!     positions: Some(Positions { max_len: 3, only_valid: true }),
//!     layers: 2, heads: 2, key_dim: 16, ffn: None, norm: Norm::None, ln_eps: 1e-3,
//!     head_hidden: vec![], out_dim: 4, out_bias: false,
//!     direction: Visibility::Padding, continuous: None,
//! });
//! let params = model.init::<f64>(0);
//! let batch = Samples {
//!     tokens: ndarray::array![[1, 5, 3], [2, 4, 5]],   // 5 = [MASK] (items + 1)
//!     values: None, weights: None, center: None,
//!     lengths: vec![3, 3], pred_idx: vec![1, 2],
//!     targets: Targets::Class(vec![1, 0]), group: None,
//! };
//! let mut tape = Tape::new();
//! let reg = model.register(&mut tape, &params).unwrap();
//! // η by the general plan (the definition) and by the automatic choice agree.
//! let a = model.forward(&mut tape, &reg.vars, &batch, ForwardPlan::General).unwrap();
//! let plan = model.plan_for(&batch, None).unwrap();
//! assert_eq!(plan, ForwardPlan::TwoBlockFold);
//! let b = model.forward(&mut tape, &reg.vars, &batch, plan).unwrap();
//! let d = (tape.value(a) - tape.value(b)).mapv(f64::abs);
//! assert!(d.iter().all(|&x| x < 1e-12));
//! // Mean cross-entropy: −log softmax(η)[y].
//! let loss = Objective::CrossEntropy.loss(&mut tape, a, &batch.targets).unwrap();
//! let grads = tape.backward(loss).unwrap();
//! assert!(grads.wrt(reg.list[0].1).is_some()); // item_emb reaches the loss
//! ```

#![warn(missing_docs)]

pub mod batch;
pub mod efa;
mod error;
pub mod fm;
pub mod mixed;
pub mod model;
pub mod objective;
pub mod size;

pub use batch::{SampleSet, Samples, Targets};
pub use efa::{EfaConfig, EfaVars, ForwardPlan, Norm, Positions, ValueTable, Visibility};
pub use efa_nn::params::Params;
pub use efa_num::Real;
pub use error::ModelError;
pub use fm::FmConfig;
pub use model::{ModelConfig, ModelVars, Registered};
pub use objective::Objective;

/// Models, plans and objectives in one import: `use efa_model::prelude::*;`.
pub mod prelude {
    pub use crate::batch::{SampleSet, Samples, Targets};
    pub use crate::efa::{
        EfaConfig, EfaVars, ForwardPlan, Norm, Positions, ValueTable, Visibility,
    };
    pub use crate::fm::{FmConfig, FmVars};
    pub use crate::model::{ModelConfig, ModelVars, Registered};
    pub use crate::objective::Objective;
    pub use crate::ModelError;
    pub use efa_nn::params::Params;
    pub use efa_num::Real;
}
