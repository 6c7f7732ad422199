//! `efa expfam …` (owned by the expfam work).

use crate::CliError;
use clap::Args;

/// Arguments of `efa expfam`.
#[derive(Args)]
pub struct ExpfamArgs {}

/// Runs `efa expfam`.
pub fn run(_args: ExpfamArgs) -> Result<(), CliError> {
    Err(CliError::new("efa expfam: not built yet"))
}
