//! User data as model samples: one sample per target row, kept as sequences ([`UserSet`]),
//! and the memory check of a job on them.

use super::{Row, UserConfig, UserData, UserSet};
use crate::memory::{check_memory, Job, MemoryEstimate};
use crate::TrainError;
use efa_model::batch::Samples;
use efa_nn::params::ParamCount;
use std::path::PathBuf;

/// Model samples built from a CSV, with the row each sample predicts.
#[derive(Clone, Debug)]
pub struct UserSamples {
    /// The samples, stored as sequences (memory grows with the rows).
    pub samples: UserSet,
    /// For each sample, the target row.
    pub targets: Vec<Row>,
    /// The file the rows came from.
    pub file: PathBuf,
}

/// One sample per target row (see [`crate::userdata`]), in file order of sequences and then
/// by `order`, as one dense [`Samples`] of width the longest sample (memory: samples ×
/// longest; for small data and tests, see [`UserSet::dense`]). EFA: tokens are the sequence's
/// items (the context prefix for `uni`), values the value rows with the target's replaced by
/// `[MASK]`; with continuous inputs the values as `weights` (the target's 0) and the lags as
/// `values`. Rating FM: the context items with their values as weights and the target's item
/// as center.
pub fn build_samples(data: &UserData, cfg: &UserConfig) -> Samples {
    UserSet::new(data, cfg).dense()
}

/// The samples of `data` as a [`UserSet`] (each minibatch built on demand) with their target
/// rows.
pub fn build(data: &UserData, cfg: &UserConfig) -> UserSamples {
    let samples = UserSet::new(data, cfg);
    let targets = samples
        .cases()
        .iter()
        .map(|&(k, t)| data.sequences[k][t].clone())
        .collect();
    UserSamples {
        samples,
        targets,
        file: data.file.clone(),
    }
}

/// Checks that training and evaluating `cfg`'s model on `set` (read from `data`) fits in the
/// available memory with `threads` workers ([`crate::memory::Job::new`] with the set's
/// sample count and longest sample); the error names the file and, when the tapes'
/// positions dominate, the longest sequence with its `seq` id, line and row count.
pub fn check_job_memory(
    data: &UserData,
    set: &UserSet,
    cfg: &UserConfig,
    params: &ParamCount,
    threads: usize,
) -> Result<MemoryEstimate, TrainError> {
    let job = Job::new(&cfg.train, set.len(), set.longest(), threads);
    let origin = data
        .sequences
        .iter()
        .max_by_key(|s| s.len())
        .and_then(|s| s.iter().min_by_key(|r| r.line).map(|r| (r, s.len())))
        .map_or(String::new(), |(r, n)| {
            format!(
                "the longest sequence `{}` (first row at line {}, {n} rows) among {} samples of {}",
                r.seq,
                r.line,
                set.len(),
                data.file.display()
            )
        });
    check_memory(&cfg.model, params, &job, &origin)
}
