//! efa: Exponential Family Attention on the CPU.
//!
//! This root crate re-exports the member crates so that `efa::tape`, `efa::attn`, … are one
//! import away.

pub use efa_attn as attn;
pub use efa_check as check;
pub use efa_data as data;
pub use efa_expfam as expfam;
pub use efa_model as model;
pub use efa_num as num;
pub use efa_optim as optim;
pub use efa_tape as tape;
