//! A training run's inputs: the run configuration, the item-feature table and the CSV
//! splits, each read and checked against the others, and the identities of the inputs a
//! checkpoint records.

use crate::checkpoint::InputDigest;
use crate::userdata::{
    build, check_job_memory, read_csv_with, read_item_csv, ItemTable, UserConfig, UserSamples,
};
use crate::{Threads, TrainError};
use efa_nn::params::ParamCount;
use std::path::Path;

/// The role of the training file in a checkpoint's recorded inputs. The text is part of the
/// checkpoint format (checkpoints written since the first release record it), so it stays as
/// it was first written.
pub const INPUT_DATA: &str = "--data";
/// The role of the validation file in a checkpoint's recorded inputs (the training file when
/// there is no validation file); kept as first written, as [`INPUT_DATA`].
pub const INPUT_VALID: &str = "--valid";

/// Reads an optional item-feature table (`item,<feature>,…`; errors name file, line, field).
pub fn read_items(path: Option<&Path>) -> Result<Option<ItemTable>, TrainError> {
    Ok(path.map(read_item_csv).transpose()?)
}

/// Reads and validates the TOML run configuration at `path`, with the item-feature table
/// `items` as the site table of its continuous inputs; returns it with its model's parameter
/// count. Errors name the file and the field.
pub fn read_config(
    path: &Path,
    items: Option<&ItemTable>,
) -> Result<(UserConfig, ParamCount), TrainError> {
    let text = read_text(path)?;
    UserConfig::from_toml_with_items(&text, path, items)
}

/// [`read_config`] of the configuration a trained model (configuration `saved`) was given,
/// without an item-feature table: a site table the file leaves out is the model's stored one
/// ([`UserConfig::from_toml_for`]).
pub fn read_config_for(
    path: &Path,
    saved: &UserConfig,
) -> Result<(UserConfig, ParamCount), TrainError> {
    let text = read_text(path)?;
    UserConfig::from_toml_for(&text, path, saved)
}

/// The text of a configuration file.
pub(super) fn read_text(path: &Path) -> Result<String, TrainError> {
    std::fs::read_to_string(path).map_err(|e| TrainError::io(path, "cannot read", e))
}

/// Reads a CSV split into samples (stored as sequences), checked against the model (and the
/// item-feature table), and checks that training and evaluating on it with `threads` fits in
/// the available memory.
pub fn load_split(
    path: &Path,
    cfg: &UserConfig,
    params: &ParamCount,
    threads: &Threads,
    items: Option<&ItemTable>,
) -> Result<UserSamples, TrainError> {
    let data = read_csv_with(path, cfg, items)?;
    let s = build(&data, cfg);
    check_job_memory(&data, &s.samples, cfg, params, threads.count())?;
    Ok(s)
}

/// The identities of a run's inputs as its checkpoints record them: the training file
/// ([`INPUT_DATA`]) and the validation file, or the training file again without one
/// ([`INPUT_VALID`]). A resume must see the same bytes. (An item-feature table is part of the
/// configuration kept in the checkpoint.)
pub fn input_digests(data: &Path, valid: Option<&Path>) -> Result<Vec<InputDigest>, TrainError> {
    Ok(vec![
        InputDigest::of_file(INPUT_DATA, data)?,
        InputDigest::of_file(INPUT_VALID, valid.unwrap_or(data))?,
    ])
}
