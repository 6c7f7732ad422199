//! The memory a training or evaluation job needs, estimated before anything is allocated,
//! and the memory available to compare it with.
//!
//! # The memory estimate
//!
//! With `P` parameters (f32, 4 bytes each), `W` worker threads (each runs one micro-batch
//! tape at a time), and per tape `N` positions and `B` targets:
//!
//! ```text
//! total    = 4·P·5 + S + W · max(train, eval)                  (bytes)
//! train    = 4·3·P + 2·4·(N_train·F + B_train·F_t + R + Q(N_train))  (values, gradients)
//! eval     = 4·P   +   4·(N_eval·F  + B_eval·F_t  + R + Q(N_eval))   (forward only)
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
//!   tabled plan projects whole tables); with continuous inputs `items` is left out there.
//! * `Q(N)`, continuous inputs: a tape runs the site MLP over the sites its batch reads, at
//!   most `min(sites, N)`, and projects their rows in the first block:
//!   `min(sites, N)·(features + 2·hidden + dim + 3·H·K)`.
//! * `S`, the site table of continuous inputs outside the tapes: `sites·(96 + 88·features)`
//!   bytes, the table's f64 rows with the copy the size check walks (the configuration as
//!   JSON values) and its text in the model file ([`site_table_bytes`]).
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

/// Bytes per row of a site table outside the tapes: a row's vector header and allocation,
/// and as JSON values an array and its allocation (round figures).
const SITE_ROW_BYTES: u64 = 96;

/// Bytes per value of a site table outside the tapes: the f64, its JSON value, and its text
/// in the serialised configuration and in the model file (up to 24 characters each).
const SITE_VALUE_BYTES: u64 = 88;

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
    /// The site table of continuous inputs outside the tapes (`S`, 0 without).
    pub site_table: u64,
    /// The part of `total` that grows with the sites of continuous inputs: `site_table` and
    /// the tapes' site MLPs and projected site rows (`Q`).
    pub sites: u64,
    /// One training tape.
    pub train_tape: u64,
    /// One evaluation tape.
    pub eval_tape: u64,
    /// The part of `total` that grows with the positions and targets of the tapes (the
    /// rest grows with the parameters): `threads · max(train, eval)` without the parameter
    /// copies and tables.
    pub positions: u64,
    /// `resident + site_table + threads · max(train_tape, eval_tape)`.
    pub total: u64,
}

/// Floats kept per position, per target, of the projected tables, and per site row of
/// continuous inputs in the projected tables (module docs).
fn per_position(model: &ModelConfig) -> (u64, u64, u64, u64) {
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
            // With continuous inputs the site rows a tape reads (at most its positions) take
            // the items' place in the projected tables: counted with the positions.
            let per_site = match &c.continuous {
                Some(ci) => {
                    f = f.saturating_add(
                        u(ci.hidden)
                            .saturating_mul(2)
                            .saturating_add(u(ci.dim).saturating_mul(3))
                            .saturating_add(u(ci.fuse).saturating_mul(2)),
                    );
                    hk.saturating_mul(3)
                }
                None => {
                    rows = rows.saturating_add(u(c.items));
                    0
                }
            };
            let hidden: u64 = c
                .head_hidden
                .iter()
                .fold(0u64, |a, &h| a.saturating_add(u(h)));
            let ft = d
                .saturating_mul(2)
                .saturating_add(hidden.saturating_mul(2))
                .saturating_add(u(c.out_dim));
            (f, ft, rows.saturating_mul(hk).saturating_mul(3), per_site)
        }
        ModelConfig::Fm(FmConfig::Rating { dim, .. }) => (3, u(*dim).saturating_mul(4), 0, 0),
        ModelConfig::Fm(FmConfig::Item { dim, classes, .. }) => (
            3,
            u(*dim).saturating_mul(4).saturating_add(u(*classes)),
            0,
            0,
        ),
    }
}

/// The sites of `model`'s continuous inputs, their feature columns, and the site MLP's widths
/// `(hidden, dim)`; zeros without continuous inputs.
fn sites_of(model: &ModelConfig) -> (u64, u64, (u64, u64)) {
    match model {
        ModelConfig::Efa(c) => c.continuous.as_ref().map_or((0, 0, (0, 0)), |ci| {
            (
                ci.sites.len() as u64,
                ci.sites.first().map_or(0, Vec::len) as u64,
                (ci.hidden as u64, ci.dim as u64),
            )
        }),
        _ => (0, 0, (0, 0)),
    }
}

/// Floats a tape keeps for the site branch of continuous inputs run over `sites` rows of
/// `features` columns (the sites its batch reads, at most its positions): the input rows, the
/// hidden layer before and after its activation (`hidden` wide) and the output (`dim` wide).
/// Saturates.
pub fn site_floats(sites: u64, features: u64, hidden: u64, dim: u64) -> u64 {
    sites.saturating_mul(
        features
            .saturating_add(hidden.saturating_mul(2))
            .saturating_add(dim),
    )
}

/// Bytes a site table of `sites` rows × `features` columns takes outside the tapes (`S` of
/// the module docs): its f64 rows, the JSON values the size check walks, and its text in the
/// serialised configuration and the model file. Saturates.
pub fn site_table_bytes(sites: u64, features: u64) -> u64 {
    sites.saturating_mul(SITE_ROW_BYTES.saturating_add(features.saturating_mul(SITE_VALUE_BYTES)))
}

/// The memory estimate of `job` for `model` with the parameter count `params` that
/// [`ModelConfig::validate`] returned (formulas in the module docs). The estimate saturates
/// instead of overflowing.
pub fn estimate(model: &ModelConfig, params: &ParamCount, job: &Job) -> MemoryEstimate {
    let params = params.clone();
    let p = params.elements.saturating_mul(BYTES);
    let (f, ft, tables, per_site) = per_position(model);
    let (sites, features, (hidden, dim)) = sites_of(model);
    // A tape's site MLP and projected site rows: over the sites its batch reads, at most its
    // positions.
    let site_rows = |positions: usize| {
        let read = sites.min(positions as u64);
        site_floats(read, features, hidden, dim)
            .saturating_add(read.saturating_mul(per_site))
            .saturating_mul(BYTES)
    };
    let site_table = site_table_bytes(sites, features);
    // Bytes of the per-position and per-target values of a tape (without the tables).
    let values = |positions: usize, targets: usize| {
        (positions as u64)
            .saturating_mul(f)
            .saturating_add((targets as u64).saturating_mul(ft))
            .saturating_mul(BYTES)
    };
    let tables = tables.saturating_mul(BYTES);
    let train_sites = site_rows(job.train_positions).saturating_mul(2);
    let eval_sites = site_rows(job.eval_positions);
    let train_values = values(job.train_positions, job.train_targets).saturating_mul(2);
    let eval_values = values(job.eval_positions, job.eval_targets);
    let train_tape = p
        .saturating_mul(3)
        .saturating_add(train_values)
        .saturating_add(tables.saturating_mul(2))
        .saturating_add(train_sites);
    let eval_tape = p
        .saturating_add(eval_values)
        .saturating_add(tables)
        .saturating_add(eval_sites);
    let resident = p.saturating_mul(5);
    let threads = job.threads as u64;
    let total = resident
        .saturating_add(site_table)
        .saturating_add(threads.saturating_mul(train_tape.max(eval_tape)));
    MemoryEstimate {
        params,
        resident,
        site_table,
        sites: site_table.saturating_add(threads.saturating_mul(train_sites.max(eval_sites))),
        train_tape,
        eval_tape,
        positions: threads.saturating_mul(train_values.max(eval_values)),
        total,
    }
}

/// Memory the process may use: `MemAvailable` of `/proc/meminfo` (Linux), else
/// [`FALLBACK_MEMORY`], or the process's address-space limit (`ulimit -v`) when that is
/// lower; with where the figure comes from.
pub fn available_memory() -> (u64, &'static str) {
    let from_meminfo = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|kb| kb.saturating_mul(1024))
    });
    let system = match from_meminfo {
        Some(b) => (b, "MemAvailable in /proc/meminfo"),
        None => (
            FALLBACK_MEMORY,
            "the fixed cap of 8 GiB used where /proc/meminfo cannot be read",
        ),
    };
    match address_space_limit() {
        Some(limit) if limit < system.0 => (
            limit,
            "the process's address-space limit, RLIMIT_AS (ulimit -v)",
        ),
        _ => system,
    }
}

/// The process's address-space limit (`RLIMIT_AS`, set by `ulimit -v`), if it has one.
#[cfg(unix)]
fn address_space_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes the `rlimit` it is given and reads nothing else.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// No address-space limit is read off Unix.
#[cfg(not(unix))]
fn address_space_limit() -> Option<u64> {
    None
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
    let tapes = est.total - est.resident - est.site_table;
    let (sites, features, _) = sites_of(model);
    let table = match est.site_table {
        0 => String::new(),
        b => format!(
            "; {} for the site table ({sites} rows × {features} features) and its copies",
            human_bytes(b)
        ),
    };
    let dominant = if est.sites > est.total / 2 {
        let hidden = match model {
            ModelConfig::Efa(c) => c.continuous.as_ref().map_or(0, |ci| ci.hidden),
            _ => 0,
        };
        format!(
            "the largest part is the site table of field model.efa.items ({sites} rows × \
             {features} features), with the site MLP each tape runs over the sites its batch \
             reads (model.efa.continuous.hidden = {hidden})"
        )
    } else if est.positions <= est.total / 2 {
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
         parameters, Adam moments and gradient{table}; {} for {} worker tape(s) of up to {} \
         training and {} evaluation positions), but {} is available ({source}); {dominant}",
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

/// Checks, before a site table of `items` rows × `features` columns (from `file`) is built
/// for continuous inputs, that it and its copies (`S` of the module docs) fit in
/// [`available_memory`]; the error names field `model.efa.items` and the estimate. The rest of
/// the job (the tapes' site MLPs among it) is checked by [`check_memory`] once the
/// configuration is complete.
pub fn check_site_table(
    items: usize,
    features: usize,
    file: &std::path::Path,
) -> Result<(), TrainError> {
    check_site_table_against(items, features, file, available_memory())
}

/// [`check_site_table`] against a given `(bytes, source)` of available memory.
pub fn check_site_table_against(
    items: usize,
    features: usize,
    file: &std::path::Path,
    memory: (u64, &str),
) -> Result<(), TrainError> {
    let what = format!(
        "{items} item rows × {features} feature columns of {}",
        file.display()
    );
    site_table_fits("model.efa.items", &what, items, features, memory)
}

/// Checks, before the configuration is copied by the size check, that a site table given in
/// it (`sites = [...]` of `model.efa.continuous`, or the table stored in a model file) of
/// `rows` rows × `features` columns and its copies (`S` of the module docs) fit in `memory`,
/// `(bytes, source)`: the check [`check_site_table`] makes of a table read from a file,
/// naming field `model.efa.continuous.sites`.
pub fn check_config_sites_against(
    rows: usize,
    features: usize,
    memory: (u64, &str),
) -> Result<(), TrainError> {
    let what = format!("{rows} rows × {features} feature columns given in the configuration");
    site_table_fits("model.efa.continuous.sites", &what, rows, features, memory)
}

/// The site table `what` of `rows` rows × `features` columns and its copies against
/// `(available, source)`; the error names `field` and the estimate.
fn site_table_fits(
    field: &str,
    what: &str,
    rows: usize,
    features: usize,
    (available, source): (u64, &str),
) -> Result<(), TrainError> {
    let need = site_table_bytes(rows as u64, features as u64);
    if need <= available {
        return Ok(());
    }
    Err(TrainError::config(
        field,
        format!(
            "{what}: the site table needs about {} (the table and its copies in the size check \
             and the model file), but {} is available ({source})",
            human_bytes(need),
            human_bytes(available)
        ),
    ))
}
