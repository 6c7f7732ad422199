//! The memory a training or evaluation job needs, estimated before anything is allocated,
//! and the memory available to compare it with.
//!
//! # The memory estimate
//!
//! With `P` parameters (f32, 4 bytes each), `W` worker threads (each runs one micro-batch
//! tape at a time), and per tape `N` positions and `B` targets:
//!
//! ```text
//! total    = 4·P·5 + W · max(train, eval)                      (bytes)
//! train    = 4·3·P + 2·4·(N_train·F + B_train·F_t + R)          (values and their gradients)
//! eval     = 4·P   +   4·(N_eval·F  + B_eval·F_t  + R)          (forward only)
//! ```
//!
//! * `5·P`: parameters, best parameters, Adam's m and v, and the summed minibatch gradient;
//!   `3·P` per training tape: the parameters registered on it, their gradient on the tape and
//!   the micro-batch gradient collected from it; `P` per evaluation tape.
//! * `F`, floats kept per position: `3·d + 4` for the inputs (`d` the model width) plus per
//!   block `4·H·K + H + 4·d` (projections, attention output and log-partition, output
//!   projection, residual, layer norm) and with a feed-forward block `2·h + 4·d`; continuous
//!   inputs add `2·hidden + 3·dim + 2·fuse`. Factor models keep `3` per context position.
//! * `F_t`, floats per target: `2·d + 2·Σ head_hidden + out_dim` (factor models `4·dim +
//!   classes`).
//! * `R`: the first block's projected tables, `(items + values.rows + max_len)·3·H·K` (the
//!   tabled plan projects whole tables).
//!
//! The estimate is deliberately rough (round figures of what the tape keeps); it exists to
//! turn an allocation failure, an overflowing shape or a job that cannot fit into an error
//! naming the field, before anything is built.

use crate::recipe::TrainConfig;
use crate::TrainError;
use efa_model::fm::FmConfig;
use efa_model::ModelConfig;
use efa_nn::params::ParamCount;

/// The memory assumed available where `/proc/meminfo` cannot be read (not Linux): 8 GiB.
pub const FALLBACK_MEMORY: u64 = 8 << 30;

/// Bytes per parameter and activation value (training runs in f32).
const BYTES: u64 = 4;

/// What one job asks of the machine: worker threads and the largest tapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    /// Worker threads (micro-batch tapes alive at once).
    pub threads: usize,
    /// Positions of the largest training micro-batch (samples × their longest length).
    pub train_positions: usize,
    /// Targets of the largest training micro-batch.
    pub train_targets: usize,
    /// Positions of the largest evaluation or prediction chunk.
    pub eval_positions: usize,
    /// Targets of the largest evaluation or prediction chunk.
    pub eval_targets: usize,
}

impl Job {
    /// Training and evaluation with `train` on `samples` samples whose longest is `longest`
    /// positions, with `threads` workers: micro-batches hold at most
    /// `min(MICRO_BATCH, batch_size, samples)` samples and at most
    /// `max(MICRO_POSITIONS, longest)` positions; evaluation chunks at most
    /// `min(eval_batch, samples)` samples and `max(eval_batch·EVAL_POSITIONS_PER_SAMPLE,
    /// longest)` positions (see [`efa_model::batch::micro_batches`]).
    pub fn new(train: &TrainConfig, samples: usize, longest: usize, threads: usize) -> Job {
        use crate::evaluator::{EVAL_POSITIONS_PER_SAMPLE, MICRO_BATCH, MICRO_POSITIONS};
        let train_targets = MICRO_BATCH.min(train.batch_size).min(samples).max(1);
        let eval_targets = train.eval_batch.min(samples).max(1);
        let eval_budget = train.eval_batch.saturating_mul(EVAL_POSITIONS_PER_SAMPLE);
        Job {
            threads: threads.max(1),
            train_positions: train_targets
                .saturating_mul(longest)
                .min(MICRO_POSITIONS.max(longest)),
            train_targets,
            eval_positions: eval_targets
                .saturating_mul(longest)
                .min(eval_budget.max(longest)),
            eval_targets,
        }
    }
}

/// A job's memory estimate, in bytes (formulas in the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryEstimate {
    /// The parameters.
    pub params: ParamCount,
    /// `4·P·5`: parameters, best parameters, Adam moments and the summed gradient.
    pub resident: u64,
    /// One training tape.
    pub train_tape: u64,
    /// One evaluation tape.
    pub eval_tape: u64,
    /// The part of `total` that grows with the positions and targets of the tapes (the
    /// rest grows with the parameters): `threads · max(train, eval)` without the parameter
    /// copies and tables.
    pub positions: u64,
    /// `resident + threads · max(train_tape, eval_tape)`.
    pub total: u64,
}

/// Floats kept per position, per target, and of the projected tables (module docs).
fn per_position(model: &ModelConfig) -> (u64, u64, u64) {
    let u = |x: usize| x as u64;
    match model {
        ModelConfig::Efa(c) => {
            let d = u(c.item_dim).saturating_add(c.values.as_ref().map_or(0, |v| u(v.dim)));
            let hk = u(c.heads).saturating_mul(u(c.key_dim));
            let mut block = hk
                .saturating_mul(4)
                .saturating_add(u(c.heads))
                .saturating_add(d.saturating_mul(4));
            if let Some(h) = c.ffn {
                block = block.saturating_add(u(h).saturating_mul(2) + d.saturating_mul(4));
            }
            let mut f = d
                .saturating_mul(3)
                .saturating_add(4)
                .saturating_add(block.saturating_mul(u(c.layers)));
            let mut rows = c.values.as_ref().map_or(0, |v| u(v.rows));
            rows = rows.saturating_add(c.positions.as_ref().map_or(0, |p| u(p.max_len)));
            match &c.continuous {
                Some(ci) => {
                    f = f.saturating_add(
                        u(ci.hidden)
                            .saturating_mul(2)
                            .saturating_add(u(ci.dim).saturating_mul(3))
                            .saturating_add(u(ci.fuse).saturating_mul(2)),
                    );
                    rows = rows.saturating_add(u(ci.sites.len()));
                }
                None => rows = rows.saturating_add(u(c.items)),
            }
            let hidden: u64 = c
                .head_hidden
                .iter()
                .fold(0u64, |a, &h| a.saturating_add(u(h)));
            let ft = d
                .saturating_mul(2)
                .saturating_add(hidden.saturating_mul(2))
                .saturating_add(u(c.out_dim));
            (f, ft, rows.saturating_mul(hk).saturating_mul(3))
        }
        ModelConfig::Fm(FmConfig::Rating { dim, .. }) => (3, u(*dim).saturating_mul(4), 0),
        ModelConfig::Fm(FmConfig::Item { dim, classes, .. }) => {
            (3, u(*dim).saturating_mul(4).saturating_add(u(*classes)), 0)
        }
    }
}

/// The memory estimate of `job` for `model` with the parameter count `params` that
/// [`ModelConfig::validate`] returned (formulas in the module docs). The estimate saturates
/// instead of overflowing.
pub fn estimate(model: &ModelConfig, params: &ParamCount, job: &Job) -> MemoryEstimate {
    let params = params.clone();
    let p = params.elements.saturating_mul(BYTES);
    let (f, ft, tables) = per_position(model);
    // Bytes of the per-position and per-target values of a tape (without the tables).
    let values = |positions: usize, targets: usize| {
        (positions as u64)
            .saturating_mul(f)
            .saturating_add((targets as u64).saturating_mul(ft))
            .saturating_mul(BYTES)
    };
    let tables = tables.saturating_mul(BYTES);
    let train_values = values(job.train_positions, job.train_targets).saturating_mul(2);
    let eval_values = values(job.eval_positions, job.eval_targets);
    let train_tape = p
        .saturating_mul(3)
        .saturating_add(train_values)
        .saturating_add(tables.saturating_mul(2));
    let eval_tape = p.saturating_add(eval_values).saturating_add(tables);
    let resident = p.saturating_mul(5);
    let threads = job.threads as u64;
    let total = resident.saturating_add(threads.saturating_mul(train_tape.max(eval_tape)));
    MemoryEstimate {
        params,
        resident,
        train_tape,
        eval_tape,
        positions: threads.saturating_mul(train_values.max(eval_values)),
        total,
    }
}

/// Memory the process may use: `MemAvailable` of `/proc/meminfo` (Linux), else
/// [`FALLBACK_MEMORY`]; with where the figure comes from.
pub fn available_memory() -> (u64, &'static str) {
    let from_meminfo = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|kb| kb.saturating_mul(1024))
    });
    match from_meminfo {
        Some(b) => (b, "MemAvailable in /proc/meminfo"),
        None => (
            FALLBACK_MEMORY,
            "the fixed cap of 8 GiB used where /proc/meminfo cannot be read",
        ),
    }
}

/// Bytes as a short human figure (`1.5 GB`, decimal units).
pub fn human_bytes(b: u64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1000.0 && i + 1 < units.len() {
        v /= 1000.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", units[i])
    }
}

/// [`estimate`] compared with [`available_memory`]: an error when the job would not fit,
/// with the estimate and its parts, naming what dominates it: the field with the most
/// parameters, or the positions of the tapes and `origin`, where they come from (e.g. the
/// longest sequence of a file).
pub fn check_memory(
    model: &ModelConfig,
    params: &ParamCount,
    job: &Job,
    origin: &str,
) -> Result<MemoryEstimate, TrainError> {
    check_memory_against(model, params, job, origin, available_memory())
}

/// [`check_memory`] against a given `(bytes, source)` of available memory.
pub fn check_memory_against(
    model: &ModelConfig,
    params: &ParamCount,
    job: &Job,
    origin: &str,
    (available, source): (u64, &str),
) -> Result<MemoryEstimate, TrainError> {
    let est = estimate(model, params, job);
    if est.total <= available {
        return Ok(est);
    }
    let (field, n) = est.params.largest().unwrap_or(("(none)", 0));
    let tapes = est.total - est.resident;
    let dominant = if est.positions <= est.total / 2 {
        format!(
            "the largest part is field {field} ({n} of the {} parameters)",
            est.params.elements
        )
    } else {
        format!(
            "the largest part is the tapes' positions: {} per training micro-batch, {} per \
             evaluation chunk, from {origin}",
            job.train_positions, job.eval_positions
        )
    };
    Err(TrainError::Memory {
        need: est.total,
        available,
        detail: format!(
            "the job needs about {} ({} parameters: {} for parameters, best \
         parameters, Adam moments and gradient; {} for {} worker tape(s) of up to {} training \
         and {} evaluation positions), but {} is available ({source}); {dominant}",
            human_bytes(est.total),
            est.params.elements,
            human_bytes(est.resident),
            human_bytes(tapes),
            job.threads,
            job.train_positions,
            job.eval_positions,
            human_bytes(available),
        ),
    })
}
