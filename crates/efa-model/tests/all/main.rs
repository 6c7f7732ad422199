//! The integration tests of `efa-model`, one test binary (one link and one copy of the
//! generic code instead of one per file). The model's invariants: every forward plan gives
//! the `general` plan's loss and gradients (`plans`, `query_stream`), the forward passes equal
//! loop-by-loop implementations written from the paper's description (`forward_reference`,
//! the loops in `loop_reference`), every plan's round-off stays within its error budget against
//! the double-double definition (`precision`); the mixed-family likelihood (`mixed_nll`) and
//! model sizes (`size`). The paper's models are built with `efa-paper` and evaluated with
//! `efa-train`, on small seeded batches.

mod common;
mod forward_reference;
mod loop_reference;
mod mixed_nll;
mod plans;
mod precision;
mod query_stream;
mod size;
