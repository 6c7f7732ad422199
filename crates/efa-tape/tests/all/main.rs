//! The integration tests of `efa-tape`, one test binary (one link and one copy of the
//! generic code instead of one per file); each file is a module.

mod anomaly;
mod audit_fused;
mod double_double;
mod nan;
mod tape;
