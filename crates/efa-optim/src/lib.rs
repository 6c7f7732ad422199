//! efa-optim: Adam / AdamW with bias correction and two ε placements, SGD with momentum,
//! global-norm clipping, learning-rate schedules, and bit-exact state save/load.
//!
//! ```
//! use efa_optim::{Adam, AdamConfig, Param};
//! let mut w = vec![1.0f64, -2.0];
//! let g = vec![0.5f64, 0.5];
//! let mut adam = Adam::<f64>::new(AdamConfig::keras(0.1)).unwrap();
//! adam.step(&mut [Param::new("w", &mut w, Some(&g))]).unwrap();
//! // First Keras step: m = 0.05, v = 0.00025, α = 0.1·√0.001/0.1, w −= α·m/(√v + ε) ≈ 0.1.
//! assert!((w[0] - 0.9).abs() < 1e-5);
//! ```

#![warn(missing_docs)]

pub mod adam;
pub mod clip;
pub mod error;
pub mod param;
pub mod schedule;
pub mod sgd;
pub mod state;

pub use adam::{Adam, AdamConfig, EpsPlacement, Moments, StepInfo, WeightDecay};
pub use clip::{clip_global_norm, clip_scale, global_norm};
pub use efa_num::Real;
pub use error::OptimError;
pub use param::Param;
pub use schedule::Schedule;
pub use sgd::Sgd;

/// The optimizers, their settings and parameter views in one import:
/// `use efa_optim::prelude::*;`.
pub mod prelude {
    pub use crate::adam::{Adam, AdamConfig, EpsPlacement, WeightDecay};
    pub use crate::clip::{clip_global_norm, global_norm};
    pub use crate::error::OptimError;
    pub use crate::param::Param;
    pub use crate::schedule::Schedule;
    pub use crate::sgd::Sgd;
    pub use efa_num::Real;
}
