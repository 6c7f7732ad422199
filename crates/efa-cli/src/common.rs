//! What every command shares: the worker pool and the mapping of library errors to user errors.

use crate::CliError;

/// Configures rayon's global pool once (`None`: all cores).
pub fn set_threads(threads: Option<usize>) -> Result<(), CliError> {
    if let Some(t) = threads {
        if t == 0 {
            return Err(CliError::new("--threads must be at least 1"));
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .map_err(|e| CliError::new(format!("cannot start {t} threads: {e}")))?;
    }
    Ok(())
}

/// A user-facing error (exit status 2); configuration errors (missing data files, bad
/// values) are shown without the model-configuration prefix.
pub fn cli(e: efa_model::ModelError) -> CliError {
    match e {
        efa_model::ModelError::Config(s) => CliError::new(s),
        e => CliError::new(e.to_string()),
    }
}

/// Maps any displayable error to a user error (exit status 2).
pub fn user<E: std::fmt::Display>(e: E) -> CliError {
    CliError::new(e.to_string())
}
