//! Resuming a run from a run directory's checkpoint: every check before anything is written.

use super::model::config_json;
use super::CONFIG_KEY;
use crate::checkpoint::{Checkpoint, InputDigest};
use crate::resume::check_resume;
use crate::userdata::{UserConfig, UserSamples};
use crate::TrainError;
use efa_nn::params::Params;
use std::path::Path;

/// Reads the checkpoint at `path` (checksums, tensors against `template`, state) and checks
/// that it was written by a run of `config`: the configuration in its metadata
/// [`CONFIG_KEY`] must be `config`'s, else [`TrainError::ConfigDiffers`] naming the checkpoint
/// and `config_file` (the file `config` came from, if any).
pub fn load_checkpoint(
    path: &Path,
    template: &Params<f32>,
    config: &UserConfig,
    config_file: Option<&Path>,
) -> Result<Checkpoint, TrainError> {
    let ck = Checkpoint::load(path, template)?;
    if ck.meta.get(CONFIG_KEY) != Some(&config_json(config)?) {
        return Err(TrainError::ConfigDiffers {
            checkpoint: path.to_path_buf(),
            config: config_file.map(Path::to_path_buf),
        });
    }
    Ok(ck)
}

/// Checks that checkpoint `ck`, read from `path`, can continue a run of `config` on `train`
/// and `valid` with `inputs` ([`check_resume`]: settings, sample counts, inputs, optimizer
/// steps); a refusal is [`TrainError::ResumeFrom`] naming the checkpoint.
pub fn check_checkpoint(
    path: &Path,
    ck: &Checkpoint,
    config: &UserConfig,
    train: &UserSamples,
    valid: &UserSamples,
    inputs: &[InputDigest],
) -> Result<(), TrainError> {
    check_resume(ck, &config.train, &train.samples, &valid.samples, inputs).map_err(|e| {
        TrainError::ResumeFrom {
            checkpoint: path.to_path_buf(),
            source: Box::new(e),
        }
    })
}
