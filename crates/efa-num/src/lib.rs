//! Numerics core of efa: the sealed [`Real`] trait (f32, f64), stable scalar functions
//! ([`scalar`]) and SIMD row kernels with run-time dispatch ([`simd`]).

pub mod ceiling;
pub mod real;
pub mod scalar;
pub mod simd;

pub use real::Real;
