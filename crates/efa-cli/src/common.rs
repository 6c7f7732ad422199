//! What every command shares: the worker pool and the mapping of library errors to user errors.

use crate::CliError;
use efa_train::{Threads, TrainError};

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

/// The worker threads of a command: `--threads` (checked by [`check_threads`]) or all
/// cores. The one route from the flag to the work: every command passes these threads to
/// the library, which runs its parallel work on them (no global pool is configured).
pub fn threads(threads: Option<usize>) -> Result<Threads, CliError> {
    let n = match threads {
        Some(t) => check_threads(t, "")?,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    Ok(Threads::new(n)?)
}

impl From<efa_model::ModelError> for CliError {
    fn from(e: efa_model::ModelError) -> Self {
        CliError::new(e.to_string())
    }
}

impl From<TrainError> for CliError {
    fn from(e: TrainError) -> Self {
        CliError::new(e.to_string())
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
        } => {
            // A field is the option's name (`seeds`, `k`); one written as the flag already
            // (`--variant`) is named once, not as `----variant`.
            let flag = field.trim_start_matches('-').replace('_', "-");
            CliError::new(format!("--{flag} {value}: {reason}"))
        }
        PaperError::NoDataDir { given: Some(p) } => {
            CliError::new(format!("--data {}: not a directory", p.display()))
        }
        PaperError::OtherData(m) => CliError::new(format!(
            "{m}. {}; pass --allow-other-data to run on it anyway, with the results marked as \
             not the paper's",
            efa_paper::NOT_THE_PAPERS
        )),
        PaperError::NoDataDir { given: None } => CliError::new(format!(
            "{}; pass --data DIR",
            PaperError::NoDataDir { given: None }
        )),
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

/// clap value parser of `--plan`: the plans' names, each with its one-line summary in the help.
pub fn plan_parser() -> impl clap::builder::TypedValueParser<Value = efa_model::ForwardPlan> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    use efa_model::ForwardPlan;
    PossibleValuesParser::new(
        ForwardPlan::ALL.map(|p| PossibleValue::new(p.name()).help(p.summary())),
    )
    .map(|s| {
        s.parse::<ForwardPlan>()
            .expect("clap passes only the names of ForwardPlan::ALL")
    })
}

/// clap value parser of `--batching`: `samples` or `sequences`, with their summaries.
pub fn batching_parser() -> impl clap::builder::TypedValueParser<Value = efa_train::Batching> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    use efa_train::Batching;
    PossibleValuesParser::new(Batching::ALL.map(|b| PossibleValue::new(b.name()).help(b.summary())))
        .map(|s| {
            s.parse::<Batching>()
                .expect("clap passes only the names of Batching::ALL")
        })
}

#[cfg(test)]
mod tests {
    use super::paper;
    use efa_paper::PaperError;

    #[test]
    fn a_setting_error_names_the_flag_once() {
        for field in ["max_len", "--max-len", "-max_len"] {
            let e = paper(PaperError::setting(field, 0, "must be at least 1"));
            assert_eq!(e.to_string(), "--max-len 0: must be at least 1", "{field}");
        }
    }
}
