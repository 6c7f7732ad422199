//! The integration tests of `efa-attn`, one test binary (one link and one copy of the
//! generic code instead of one per file); each file is a module.

mod backward;
mod common;
mod forward;
mod nan;
mod precision;
mod unsupported_isa;
