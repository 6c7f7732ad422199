//! The integration tests of `efa-data`, one test binary (one link and one copy of the
//! generic code instead of one per file); each file is a module.

mod common;
mod csv_lines;
mod instacart;
mod malformed_instacart;
mod malformed_movielens;
mod malformed_temperature;
mod movielens;
mod rating_samples;
mod rng_synthetic;
mod temperature;
mod user_csv;
mod written;
