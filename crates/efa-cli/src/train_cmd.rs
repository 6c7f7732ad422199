//! `efa train`: train an EFA or rating-FM model on the user's own CSV data (layout in
//! `efa_train::userdata`), with atomic checkpoints, `--resume`, and anomaly mode.
//!
//! Output directory: `config.toml` (a copy of the configuration), `checkpoint.safetensors`
//! (every `--checkpoint-every` epochs and at the end), `model.safetensors` (the restored best
//! parameters, one f32 tensor per parameter, configuration in metadata `efa.config`),
//! `result.json` (losses per epoch, best epoch, validation and test nll: the same bytes for
//! the same run anywhere), `timings.json` (wall-clock times), and `train.lock` while a
//! process runs there (a second one is refused; see `efa_train::fsio::runlock`).
//!
//! A resume (`--resume`) is checked completely (checkpoint checksums and state, configuration,
//! training settings, sample counts, size and CRC-32 of the `--data` and `--valid` files, the
//! optimizer's step count) before anything in the output directory is written.

use crate::cluster::Job;
use crate::common::{threads, user};
use crate::report::{epoch_bar, on_epoch, write_timings, Losses, RunTimes};
use crate::CliError;
use clap::Args;
use efa_model::Params;
use efa_nn::params::ParamCount;
use efa_train::checkpoint::{
    load_model_layout, read_meta, save_model, Checkpoint, CheckpointPolicy, InputDigest,
};
use efa_train::fsio::runlock::RunLock;
use efa_train::fsio::write_atomic;
use efa_train::resume::check_resume;
use efa_train::userdata::diagnose::explain_nonfinite;
use efa_train::userdata::{
    build, check_items_match, check_job_memory, read_csv_with, read_item_csv, ItemTable,
    UserConfig, UserSamples,
};
use efa_train::{fit, EpochLog, Evaluator, FitOptions, Threads};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Metadata key of the JSON configuration in model and checkpoint files.
pub const CONFIG_KEY: &str = "efa.config";
/// File names inside the output directory.
pub const MODEL_FILE: &str = "model.safetensors";
/// The checkpoint file name.
pub const CHECKPOINT_FILE: &str = "checkpoint.safetensors";

/// Arguments of `efa train`.
#[derive(Args)]
pub struct TrainArgs {
    /// TOML configuration: [model.efa] or [model.fm], [family], [train], direction, init_seed.
    #[arg(long)]
    config: PathBuf,
    /// Training CSV with header `seq,order,item,value` (optionally `lag`, `target`).
    #[arg(long)]
    data: PathBuf,
    /// Item-feature CSV `item,<feature>,…` (e.g. coordinates) for the site MLP of
    /// `model.efa.continuous`.
    #[arg(long)]
    items: Option<PathBuf>,
    /// Validation CSV for early stopping (default: the training data).
    #[arg(long)]
    valid: Option<PathBuf>,
    /// Test CSV, evaluated once with the final model.
    #[arg(long)]
    test: Option<PathBuf>,
    /// Output directory (default: the --resume directory, else `efa-train-out`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run whose checkpoint is in this directory (same config and data).
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Write a checkpoint every N epochs (and after the last one).
    #[arg(long, default_value_t = 1)]
    checkpoint_every: usize,
    /// Stop at the first NaN/inf in any op, forward or backward, naming op, node, parameters, batch.
    #[arg(long)]
    detect_anomaly: bool,
    /// Worker threads (default: all cores). Results are bit-identical for a given seed and
    /// thread count (and, with the current kernels, across thread counts).
    #[arg(long)]
    threads: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Testing aid: abort the process (SIGABRT, no cleanup) right after epoch K's checkpoint.
    #[arg(long, hide = true)]
    crash_after_epoch: Option<usize>,
}

/// Reads an optional `--items` table.
pub(crate) fn read_items(path: Option<&Path>) -> Result<Option<ItemTable>, CliError> {
    path.map(|p| read_item_csv(p).map_err(user)).transpose()
}

/// Reads and validates the TOML configuration, with the item-feature table (`--items`) as
/// the site table of its continuous inputs; with its model's parameter count.
pub(crate) fn read_config(
    path: &Path,
    items: Option<&ItemTable>,
) -> Result<(UserConfig, ParamCount), CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::new(format!("{}: cannot read: {e}", path.display())))?;
    Ok(UserConfig::from_toml_with_items(&text, path, items)?)
}

/// Reads a CSV split into samples (stored as sequences), checked against the model (and the
/// item-feature table), and checks that training and evaluating on it with `threads` fits in
/// the available memory.
pub(crate) fn load_split(
    path: &Path,
    cfg: &UserConfig,
    params: &ParamCount,
    threads: &Threads,
    items: Option<&ItemTable>,
) -> Result<UserSamples, CliError> {
    let data = read_csv_with(path, cfg, items).map_err(user)?;
    let s = build(&data, cfg);
    check_job_memory(&data, &s.samples, cfg, params, threads.count())?;
    Ok(s)
}

/// A saved model: its configuration and parameters. `path` is a model file or a directory
/// holding `model.safetensors`. An item-feature table given with it must be the one the
/// model was trained with.
pub(crate) fn load_saved(
    path: &Path,
    items: Option<&ItemTable>,
) -> Result<(UserConfig, ParamCount, Params<f32>), CliError> {
    let file = if path.is_dir() {
        path.join(MODEL_FILE)
    } else {
        path.to_path_buf()
    };
    let meta = read_meta(&file).map_err(user)?;
    let json = meta.get(CONFIG_KEY).ok_or_else(|| {
        CliError::new(format!(
            "{}: metadata `{CONFIG_KEY}` is missing (not written by efa train?)",
            file.display()
        ))
    })?;
    let cfg: UserConfig = serde_json::from_str(json)
        .map_err(|e| CliError::new(format!("{}: metadata `{CONFIG_KEY}`: {e}", file.display())))?;
    let count = cfg.validate().map_err(|e| match e.in_file(&file) {
        efa_train::TrainError::Config { field, reason, .. } => CliError::new(format!(
            "{}: metadata `{CONFIG_KEY}`: field `{field}`: {reason}",
            file.display()
        )),
        e => CliError::new(format!("{}: metadata `{CONFIG_KEY}`: {e}", file.display())),
    })?;
    // The configuration's sizes were checked (`validate`); the tensors are checked against
    // its layout before any parameter is built.
    if let Some(t) = items {
        check_items_match(&cfg, t)?;
    }
    let (params, _) = load_model_layout(&file, &cfg.model.layout())?;
    Ok((cfg, count, params))
}

#[derive(Serialize)]
struct TrainReport<'a> {
    config: &'a UserConfig,
    train_samples: usize,
    valid_samples: usize,
    epochs: usize,
    best_epoch: usize,
    stopped_early: bool,
    best_valid_nll: f64,
    test_nll: Option<f64>,
    /// The loss history (wall-clock times are in `timings.json`, so that this file is the
    /// same bytes for the same run on any machine, thread count or number of ranks).
    history: Vec<Losses>,
}

/// Runs `efa train` as a member of `job` (rank 0 alone locks and writes the output directory
/// and prints; every rank trains its share).
pub fn run(args: TrainArgs, job: &Job) -> Result<(), CliError> {
    if args.checkpoint_every == 0 {
        return Err(CliError::new("--checkpoint-every must be at least 1"));
    }
    let threads = threads(args.threads)?;
    let items = read_items(args.items.as_deref())?;
    let (cfg, count) = read_config(&args.config, items.as_ref())?;
    let load = |p: &Path| load_split(p, &cfg, &count, &threads, items.as_ref());
    let train = load(&args.data)?;
    let valid = args.valid.as_deref().map(load).transpose()?;
    let test = args.test.as_deref().map(load).transpose()?;
    // The identity of the inputs, stored in checkpoints: a resume must see the same bytes.
    // (The item-feature table is part of the configuration kept in the checkpoint.)
    let inputs = vec![
        InputDigest::of_file("--data", &args.data).map_err(user)?,
        InputDigest::of_file("--valid", args.valid.as_ref().unwrap_or(&args.data)).map_err(user)?,
    ];
    let out = args
        .out
        .clone()
        .or_else(|| args.resume.clone())
        .unwrap_or_else(|| PathBuf::from("efa-train-out"));
    let lead = job.leads();
    if lead {
        std::fs::create_dir_all(&out).map_err(|e| {
            CliError::new(format!(
                "{}: cannot create the output directory: {e}",
                out.display()
            ))
        })?;
    }
    // One process per output directory (rank 0 of a multi-process job); released (and its
    // file removed) when `run` returns, and by the operating system if the process dies.
    let _lock = match lead {
        true => Some(RunLock::acquire(&out).map_err(user)?),
        false => None,
    };
    let config_json = serde_json::to_string(&cfg).map_err(user)?;
    let val_samples = valid.as_ref().unwrap_or(&train);

    let objective = cfg.objective();
    let eval = Evaluator::new(&cfg.model, &objective)
        .with_threads(&threads)
        .with_group(job.group())
        .with_detect_anomaly(args.detect_anomaly);
    let mut params = cfg.model.init::<f32>(cfg.init_seed);
    // Every check of a resume comes before the first write into the output directory.
    let resume = match &args.resume {
        Some(dir) => {
            let path = dir.join(CHECKPOINT_FILE);
            let ck = Checkpoint::load(&path, &params).map_err(user)?;
            if ck.meta.get(CONFIG_KEY) != Some(&config_json) {
                return Err(CliError::new(format!(
                    "{}: the checkpoint was written with a different configuration than {}",
                    path.display(),
                    args.config.display()
                )));
            }
            check_resume(
                &ck,
                &cfg.train,
                &train.samples,
                &val_samples.samples,
                &inputs,
            )
            .map_err(|e| CliError::new(format!("{}: {e}", path.display())))?;
            Some(ck)
        }
        None => None,
    };
    let text = std::fs::read(&args.config)
        .map_err(|e| CliError::new(format!("{}: cannot read: {e}", args.config.display())))?;
    if lead {
        write_atomic(&out.join("config.toml"), &text).map_err(user)?;
    }
    let policy = CheckpointPolicy {
        path: out.join(CHECKPOINT_FILE),
        every: args.checkpoint_every,
        meta: BTreeMap::from([(CONFIG_KEY.to_string(), config_json.clone())]),
    };
    let crash = args.crash_after_epoch;
    let bar = epoch_bar("train", cfg.train.max_epochs, args.quiet || !lead);
    let mut hook = |log: &EpochLog| {
        on_epoch(&bar, log);
        if crash == Some(log.epoch) {
            std::process::abort();
        }
        Ok(())
    };
    let opts = FitOptions {
        checkpoint: Some(policy),
        resume,
        on_epoch: Some(&mut hook),
        inputs,
    };
    let fit = fit(
        &eval,
        &mut params,
        &train.samples,
        &val_samples.samples,
        &cfg.train,
        opts,
    )
    .map_err(|e| {
        bar.finish_and_clear();
        user(explain_nonfinite(e, &eval, &params, &train, &cfg))
    })?;
    bar.finish_and_clear();
    let meta = BTreeMap::from([(CONFIG_KEY.to_string(), config_json)]);
    if lead {
        save_model(&out.join(MODEL_FILE), &params, &meta).map_err(user)?;
    }
    // Every rank evaluates its share of the test set.
    let test_nll = match &test {
        Some(t) => Some(
            eval.evaluate(&params, &t.samples, cfg.train.eval_batch)
                .map_err(user)?,
        ),
        None => None,
    };
    let report = TrainReport {
        config: &cfg,
        train_samples: train.samples.len(),
        valid_samples: val_samples.samples.len(),
        epochs: fit.epochs,
        best_epoch: fit.best_epoch,
        stopped_early: fit.stopped_early,
        best_valid_nll: fit.best_val,
        test_nll,
        history: Losses::of(&fit.history),
    };
    if !lead {
        return Ok(());
    }
    let json = serde_json::to_string_pretty(&report).map_err(user)?;
    write_atomic(&out.join("result.json"), json.as_bytes()).map_err(user)?;
    let times = RunTimes {
        run: "train".into(),
        seconds: fit.seconds,
        epochs: &fit.history,
    };
    write_timings(&out, &[times], job.group().size(), threads.count())?;
    outln!(
        "trained {} ({}) for {} epochs, best epoch {}, valid nll {:.6}{}; wrote {}",
        cfg.model.kind(),
        cfg.family.describe(),
        fit.epochs,
        fit.best_epoch,
        fit.best_val,
        test_nll.map_or(String::new(), |t| format!(", test nll {t:.6}")),
        out.join(MODEL_FILE).display()
    )?;
    Ok(())
}
