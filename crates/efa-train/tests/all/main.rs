//! The integration tests of `efa-train`, one test binary (one link and one copy of the
//! generic code instead of one per file); each file is a module.

mod checkpoint;
mod checkpoint_integrity;
mod limits;
mod long_sequences;
mod model_sizes;
mod poisson_fixture;
mod resume_checks;
mod run_dir;
mod sharded;
mod userdata;
mod userdata_mixed;
