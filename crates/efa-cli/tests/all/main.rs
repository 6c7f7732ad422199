//! The integration tests of `efa-cli`, one test binary (one link and one copy of the
//! generic code instead of one per file); each file is a module.

mod audit;
mod audit_inputs;
mod bad_values;
mod codegen;
mod common;
mod domain_families;
mod expfam_check;
mod model_files;
mod paper_data;
mod reliability;
mod reliability_kill;
mod reliability_resume;
mod reproduce_all;
mod reproduce_seeds;
mod sites;
mod sizes;
mod stdout;
mod user_general;
