//! `efa bench …` (owned by the attention work).

use crate::CliError;
use clap::Args;

/// Arguments of `efa bench`.
#[derive(Args)]
pub struct BenchArgs {}

/// Runs `efa bench`.
pub fn run(_args: BenchArgs) -> Result<(), CliError> {
    Err(CliError::new("efa bench: not built yet"))
}
