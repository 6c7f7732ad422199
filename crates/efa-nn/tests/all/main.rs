//! The integration tests of `efa-nn`, one test binary (one link and one copy of the
//! generic code instead of one per file); each file is a module.

mod audit_fused;
mod link;
mod nan;
mod nll_ops;
mod rows;
