//! What every command shares: the worker pool and the mapping of library errors to user errors.

use crate::CliError;

/// Most worker threads `--threads` accepts: 4 × the available cores, at least 4 and at most
/// 1024 (more threads than that only add memory, one micro-batch tape each, and scheduling
/// overhead; an unbounded count can exhaust the process's threads).
pub fn max_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.saturating_mul(4).clamp(4, 1024)
}

/// Checks a `--threads` value: at least 1 and at most [`max_threads`]; `context` prefixes
/// the error (e.g. `"efa bench attention: "`).
pub fn check_threads(t: usize, context: &str) -> Result<usize, CliError> {
    if t == 0 {
        return Err(CliError::new(format!(
            "{context}--threads must be at least 1"
        )));
    }
    let max = max_threads();
    if t > max {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        return Err(CliError::new(format!(
            "{context}--threads {t}: at most {max} are allowed (4 × the {cores} available \
             core(s), at least 4, at most 1024)"
        )));
    }
    Ok(t)
}

/// clap value parser of a count that must be at least 1 (`--epochs`): clap names the flag.
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Configures rayon's global pool once (`None`: all cores); `--threads` is checked by
/// [`check_threads`].
pub fn set_threads(threads: Option<usize>) -> Result<(), CliError> {
    if let Some(t) = threads {
        check_threads(t, "")?;
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

/// A user error from an experiment's error: a setting is named by its flag
/// (`--lag 7: …`), a missing data directory by `--data`.
pub fn paper(e: efa_paper::PaperError) -> CliError {
    use efa_paper::PaperError;
    match e {
        PaperError::Setting {
            field,
            value,
            reason,
        } => CliError::new(format!("--{} {value}: {reason}", field.replace('_', "-"))),
        PaperError::NoDataDir { given: Some(p) } => {
            CliError::new(format!("--data {}: not a directory", p.display()))
        }
        PaperError::NoDataDir { given: None } => CliError::new(format!(
            "{}; pass --data DIR",
            PaperError::NoDataDir { given: None }
        )),
        PaperError::Model(e) => cli(e),
        e => CliError::new(e.to_string()),
    }
}

impl From<efa_paper::PaperError> for CliError {
    fn from(e: efa_paper::PaperError) -> Self {
        paper(e)
    }
}

/// Maps any displayable error to a user error (exit status 2).
pub fn user<E: std::fmt::Display>(e: E) -> CliError {
    CliError::new(e.to_string())
}
