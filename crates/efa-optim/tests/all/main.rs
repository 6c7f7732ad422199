//! The integration tests of `efa-optim`, one test binary (one link and one copy of the
//! generic code instead of one per file); each file is a module.

mod adam;
mod save_load;
