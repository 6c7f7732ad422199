//! A trained model on disk: its parameters and, in metadata [`CONFIG_KEY`], the run
//! configuration they belong to.

use super::{CONFIG_KEY, MODEL_FILE};
use crate::checkpoint::{load_model_layout, read_meta};
use crate::userdata::{check_items_match, ItemTable, UserConfig};
use crate::TrainError;
use efa_nn::params::{ParamCount, Params};
use std::collections::BTreeMap;
use std::path::Path;

/// A model read back from a model file: its run configuration, parameter count and
/// parameters.
#[derive(Clone, Debug)]
pub struct SavedModel {
    /// The run configuration (model, families, loss, training settings).
    pub config: UserConfig,
    /// The model's parameter count ([`UserConfig::validate`]).
    pub count: ParamCount,
    /// The parameters.
    pub params: Params<f32>,
}

/// The metadata of a model or checkpoint file of a run of `config`: the configuration as JSON
/// under [`CONFIG_KEY`].
pub fn model_meta(config: &UserConfig) -> Result<BTreeMap<String, String>, TrainError> {
    let json = config_json(config)?;
    Ok(BTreeMap::from([(CONFIG_KEY.to_string(), json)]))
}

/// `config` as the JSON stored under [`CONFIG_KEY`].
pub(crate) fn config_json(config: &UserConfig) -> Result<String, TrainError> {
    serde_json::to_string(config).map_err(|e| TrainError::config("config", e.to_string()))
}

/// Reads a saved model. `path` is a model file or a run directory holding
/// [`MODEL_FILE`]. An item-feature table given with it must be the one the model was trained
/// with ([`check_items_match`]).
///
/// The file's checksums are verified, then its configuration (metadata [`CONFIG_KEY`]:
/// [`TrainError::MissingMetadata`], or [`TrainError::Metadata`] naming the field), and the
/// tensors are checked against the configuration's layout before any parameter is built.
pub fn load_saved(path: &Path, items: Option<&ItemTable>) -> Result<SavedModel, TrainError> {
    let file = if path.is_dir() {
        path.join(MODEL_FILE)
    } else {
        path.to_path_buf()
    };
    let (config, count) = read_model_config(&file)?;
    if let Some(t) = items {
        // A field of the configuration is named as one of the model file's metadata.
        check_items_match(&config, t).map_err(|e| match e {
            TrainError::Config {
                file: None,
                field,
                reason,
            } => TrainError::Metadata {
                file: file.clone(),
                key: CONFIG_KEY.into(),
                field: Some(field),
                reason,
            },
            e => e,
        })?;
    }
    let (params, _) = load_model_layout(&file, &config.model.layout())?;
    Ok(SavedModel {
        config,
        count,
        params,
    })
}

/// The run configuration in a model file's metadata, validated, with its parameter count.
fn read_model_config(file: &Path) -> Result<(UserConfig, ParamCount), TrainError> {
    let meta = read_meta(file)?;
    let json = meta
        .get(CONFIG_KEY)
        .ok_or_else(|| TrainError::MissingMetadata {
            file: file.to_path_buf(),
            key: CONFIG_KEY.into(),
        })?;
    let bad = |field: Option<String>, reason: String| TrainError::Metadata {
        file: file.to_path_buf(),
        key: CONFIG_KEY.into(),
        field,
        reason,
    };
    let config: UserConfig = serde_json::from_str(json).map_err(|e| bad(None, e.to_string()))?;
    let count = config.validate().map_err(|e| match e.in_file(file) {
        TrainError::Config { field, reason, .. } => bad(Some(field), reason),
        e => bad(None, e.to_string()),
    })?;
    Ok((config, count))
}
