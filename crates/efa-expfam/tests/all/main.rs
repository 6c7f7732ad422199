//! The integration tests of `efa-expfam`, one test binary (one link and one copy of the
//! generic code instead of one per file); each file is a module.

mod batch;
mod common;
mod gradients;
mod moments;
mod near_one;
mod refcheck;
mod reference;
mod sampling;
mod support;
