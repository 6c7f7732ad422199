//! Numerics core of efa: the sealed [`Real`] trait (f32, f64 and the double-double reference
//! type [`Dd`]), stable scalar functions
//! ([`scalar`]), SIMD row kernels with run-time dispatch ([`simd`]), strided matrix views
//! ([`MatRef`], [`MatMut`]) and the GEMM that takes them ([`gemm`]).
//!
//! The scalar functions never form the unstable textbook expressions: softplus is
//! `max(x, 0) + log1p(e^{−|x|})`, logsumexp is `m + log1p(Σ_{i≠argmax} e^{xᵢ − m})`,
//! `ln Γ(1 + x)` is [`scalar::lgamma1p`] without forming `1 + x`.
//!
//! ```
//! use efa_num::prelude::*;
//! // softplus(x) = ln(1 + eˣ): exact for large |x| in both precisions.
//! assert_eq!(softplus(800.0f64), 800.0);
//! assert_eq!(softplus(-800.0f32), 0.0);
//! assert!((softplus(-30.0f64) / (-30f64).exp() - 1.0).abs() < 1e-12);
//! // logsumexp([1000, 1000]) = 1000 + ln 2, where exp overflows.
//! assert!((logsumexp(&[1000.0f64, 1000.0]) - (1000.0 + std::f64::consts::LN_2)).abs() < 1e-12);
//! // ln Γ(1 + x) = −γ·x + (π²/12)·x² − … for tiny x, with full relative accuracy.
//! let x = 1e-9f64;
//! let want = -0.5772156649015329 * x + 0.8224670334241132 * x * x;
//! assert!((lgamma1p(x) / want - 1.0).abs() < 1e-15);
//! ```

#![warn(missing_docs)]

pub mod ceiling;
pub mod concrete;
pub mod dd;
pub mod gemm;
pub mod mat;
pub mod pool;
pub mod real;
pub mod scalar;
pub mod simd;
pub mod sum;

pub use dd::Dd;
pub use mat::{MatMut, MatRef};
pub use real::Real;

/// The scalar trait, the double-double type and the stable scalar functions in one import:
/// `use efa_num::prelude::*;`.
pub mod prelude {
    pub use crate::dd::Dd;
    pub use crate::real::Real;
    pub use crate::scalar::{
        digamma, lgamma, lgamma1p, log1mexp, log_sigmoid, log_softmax_into, logsumexp, sigmoid,
        softmax_into, softplus, trigamma, xlog1py, xlogy,
    };
}
