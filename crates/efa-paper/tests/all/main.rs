//! The integration tests of `efa-paper`, one test binary (one link and one copy of the
//! generic code instead of one per file); each file is a module.

mod distributed;
mod experiments_real;
mod paper_data;
mod position_budget;
mod settings;
mod temperature_clean;
