//! A training run from files to a run directory: [`Run::load`] reads and checks the inputs,
//! [`Run::train`] checks a resume, trains, and writes the model and the result files.

use super::inputs::{input_digests, load_split, read_items, read_text};
use super::report::{Losses, RunTimes, TrainReport};
use super::resume::check_checkpoint;
use super::RunDir;
use crate::checkpoint::{Checkpoint, InputDigest};
use crate::collective::{Collective, Solo};
use crate::fit::{fit, EpochHook, FitOptions};
use crate::history::FitResult;
use crate::userdata::diagnose::{check_split_loss, explain_nonfinite};
use crate::userdata::{ItemTable, UserConfig, UserSamples};
use crate::{Evaluator, Threads, TrainError};
use efa_nn::params::{ParamCount, Params};
use std::path::PathBuf;

/// The input files of a training run (what `efa train` reads).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunInputs {
    /// The TOML run configuration.
    pub config: PathBuf,
    /// The training CSV.
    pub data: PathBuf,
    /// The item-feature CSV of continuous inputs.
    pub items: Option<PathBuf>,
    /// The validation CSV for early stopping (default: the training data).
    pub valid: Option<PathBuf>,
    /// The test CSV, evaluated once with the final model.
    pub test: Option<PathBuf>,
}

impl RunInputs {
    /// A configuration and training data, without other files.
    pub fn new(config: impl Into<PathBuf>, data: impl Into<PathBuf>) -> Self {
        RunInputs {
            config: config.into(),
            data: data.into(),
            ..RunInputs::default()
        }
    }
}

/// Where and how a run trains.
pub struct RunOptions<'a> {
    /// The run directory written (created if missing).
    pub out: RunDir,
    /// Continue the run whose checkpoint is in this directory (same configuration and data).
    pub resume: Option<RunDir>,
    /// Write a checkpoint every N epochs (≥ 1) and after the last one.
    pub checkpoint_every: usize,
    /// Stop at the first non-finite value in any op, naming it.
    pub detect_anomaly: bool,
    /// The worker threads.
    pub threads: &'a Threads,
    /// The members of the job (rank 0 alone locks and writes the run directory).
    pub group: &'a dyn Collective,
    /// Called after each epoch and its checkpoint; an error ends training with it.
    pub on_epoch: Option<EpochHook<'a>>,
}

impl<'a> RunOptions<'a> {
    /// One process training into `out` on `threads`, a checkpoint after every epoch.
    pub fn new(out: RunDir, threads: &'a Threads) -> Self {
        RunOptions {
            out,
            resume: None,
            checkpoint_every: 1,
            detect_anomaly: false,
            threads,
            group: &Solo,
            on_epoch: None,
        }
    }
}

/// A training run's inputs, read and checked.
#[derive(Clone, Debug)]
pub struct Run {
    /// The run configuration (with the item-feature table as its site table).
    pub config: UserConfig,
    /// The model's parameter count.
    pub count: ParamCount,
    /// The training samples.
    pub train: UserSamples,
    /// The validation samples, with a validation file.
    pub valid: Option<UserSamples>,
    /// The test samples, with a test file.
    pub test: Option<UserSamples>,
    /// The item-feature table, with one.
    pub items: Option<ItemTable>,
    /// The configuration file's bytes (copied into the run directory).
    config_text: Vec<u8>,
    /// The configuration file.
    config_file: PathBuf,
    /// The identities of the training and validation files.
    inputs: Vec<InputDigest>,
}

/// What a finished run gives back (rank 0 has also written it into the run directory).
#[derive(Clone, Debug)]
pub struct Trained {
    /// The run configuration.
    pub config: UserConfig,
    /// The training history, best epoch and validation loss.
    pub fit: FitResult,
    /// The test loss of the kept weights, with a test file.
    pub test_nll: Option<f64>,
    /// The kept (best) parameters.
    pub params: Params<f32>,
    /// The run directory.
    pub dir: RunDir,
}

impl Run {
    /// Reads the item-feature table, the configuration and the splits (each checked against
    /// the model and for memory with `threads`), and the inputs' identities.
    pub fn load(files: &RunInputs, threads: &Threads) -> Result<Run, TrainError> {
        let items = read_items(files.items.as_deref())?;
        let text = read_text(&files.config)?;
        let (config, count) =
            UserConfig::from_toml_with_items(&text, &files.config, items.as_ref())?;
        let load = |p: &std::path::Path| load_split(p, &config, &count, threads, items.as_ref());
        let train = load(&files.data)?;
        let valid = files.valid.as_deref().map(load).transpose()?;
        let test = files.test.as_deref().map(load).transpose()?;
        let inputs = input_digests(&files.data, files.valid.as_deref())?;
        Ok(Run {
            config,
            count,
            train,
            valid,
            test,
            items,
            config_text: text.into_bytes(),
            config_file: files.config.clone(),
            inputs,
        })
    }

    /// The validation samples: the validation file's, else the training samples.
    pub fn valid_samples(&self) -> &UserSamples {
        self.valid.as_ref().unwrap_or(&self.train)
    }

    /// Trains: locks and prepares the run directory (rank 0), checks a resume completely
    /// before the first write there, trains with checkpoints, saves the model, evaluates the
    /// test split and writes `result.json` and `timings.json` (rank 0).
    pub fn train(self, mut opts: RunOptions<'_>) -> Result<Trained, TrainError> {
        if opts.checkpoint_every == 0 {
            return Err(TrainError::config("checkpoint_every", "must be at least 1"));
        }
        let lead = opts.group.rank() == 0;
        if let Some(r) = &opts.resume {
            // A resume without a readable checkpoint (a mistyped directory) is refused before
            // the run directory, which defaults to it, is created.
            let ck = r.checkpoint_file();
            std::fs::File::open(&ck).map_err(|e| TrainError::io(&ck, "cannot read", e))?;
        }
        if lead {
            opts.out.create()?;
        }
        // One process per run directory; released (and its file removed) when this returns,
        // and by the operating system if the process dies.
        let _lock = lead.then(|| opts.out.lock()).transpose()?;
        let objective = self.config.objective();
        let eval = Evaluator::new(&self.config.model, &objective)
            .with_threads(opts.threads)
            .with_group(opts.group)
            .with_detect_anomaly(opts.detect_anomaly);
        let mut params = self.config.model.init::<f32>(self.config.init_seed);
        let resume = self.resume_from(opts.resume.as_ref(), &params)?;
        if lead {
            opts.out.write_config(&self.config_text)?;
        }
        let fit_opts = FitOptions {
            checkpoint: Some(
                opts.out
                    .checkpoint_policy(&self.config, opts.checkpoint_every)?,
            ),
            resume,
            on_epoch: opts.on_epoch.take(),
            inputs: self.inputs.clone(),
        };
        let (train, val) = (&self.train, self.valid_samples());
        let cfg = &self.config;
        let fit = fit(
            &eval,
            &mut params,
            &train.samples,
            &val.samples,
            &cfg.train,
            fit_opts,
        )
        .map_err(|e| explain_nonfinite(e, &eval, &params, (train, val), cfg))?;
        if lead {
            opts.out.save_model(cfg, &params)?;
        }
        // Every rank evaluates its share of the test set.
        let test_nll = match &self.test {
            Some(t) => {
                let nll = eval.evaluate(&params, &t.samples, cfg.train.eval_batch)?;
                Some(check_split_loss(nll, "test", &eval, &params, t, cfg)?)
            }
            None => None,
        };
        if lead {
            self.write_results(&opts, &fit, test_nll)?;
        }
        Ok(Trained {
            config: self.config,
            fit,
            test_nll,
            params,
            dir: opts.out,
        })
    }

    /// The checkpoint of `dir`, checked completely against this run, or none without a
    /// directory.
    fn resume_from(
        &self,
        dir: Option<&RunDir>,
        template: &Params<f32>,
    ) -> Result<Option<Checkpoint>, TrainError> {
        let Some(dir) = dir else {
            return Ok(None);
        };
        let ck = dir.load_checkpoint(template, &self.config, Some(&self.config_file))?;
        let path = dir.checkpoint_file();
        check_checkpoint(
            &path,
            &ck,
            &self.config,
            &self.train,
            self.valid_samples(),
            &self.inputs,
        )?;
        Ok(Some(ck))
    }

    /// `result.json` and `timings.json` of a finished run.
    fn write_results(
        &self,
        opts: &RunOptions<'_>,
        fit: &FitResult,
        test_nll: Option<f64>,
    ) -> Result<(), TrainError> {
        let report = TrainReport {
            config: &self.config,
            train_samples: self.train.samples.len(),
            valid_samples: self.valid_samples().samples.len(),
            epochs: fit.epochs,
            best_epoch: fit.best_epoch,
            stopped_early: fit.stopped_early,
            best_valid_nll: fit.best_val,
            test_nll,
            history: Losses::of(&fit.history),
        };
        opts.out.write_result(&report)?;
        let times = RunTimes {
            run: "train".into(),
            seconds: fit.seconds,
            epochs: &fit.history,
        };
        opts.out
            .write_timings(&[times], opts.group.size(), opts.threads.count())
    }
}
