//! Model files and training checkpoints in the safetensors format (readable by numpy and
//! PyTorch: `safetensors.numpy.load_file`), written atomically.
//!
//! * A model file holds one little-endian f32 tensor per parameter under its own name
//!   (`item_emb`, `block0.attn.query.kernel`, …) and string metadata (`efa.*` keys).
//! * A checkpoint holds the current parameters under `params/<name>`, the best-so-far
//!   parameters under `best/<name>`, the optimizer state ([`efa_optim::Adam::save`] bytes) as
//!   a `U8` tensor `optimizer/adam`, and the [`TrainState`] as JSON in metadata `efa.state`
//!   (every float stored as its IEEE-754 bit pattern, so a resumed run is bit-exact).
//!
//! Every write goes to `<file>.tmp`, is fsynced, renamed over the target and the directory is
//! fsynced: a crash leaves either the old file or the new one, never a torn one.

use crate::history::{EarlyStopping, EpochLog};
use crate::params::Params;
use crate::recipe::TrainConfig;
use crate::ModelError;
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Metadata key of the JSON training state in a checkpoint.
pub const STATE_KEY: &str = "efa.state";

/// Where and how often [`crate::train::fit`] writes checkpoints.
#[derive(Clone, Debug)]
pub struct CheckpointPolicy {
    /// The checkpoint file (overwritten atomically each time).
    pub path: PathBuf,
    /// Write after every `every`-th epoch (≥ 1) and after the last one.
    pub every: usize,
    /// Extra string metadata stored in the file (e.g. the model configuration).
    pub meta: BTreeMap<String, String>,
}

/// The state of the epoch shuffle: [`crate::train::fit`] draws each epoch's order from one
/// `StdRng` seeded with `seed`, shuffling the previous order in place, so the generator and
/// the order after `shuffles` epochs are rebuilt exactly by replaying that many shuffles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShuffleState {
    /// Seed of the generator (`TrainConfig::seed`).
    pub seed: u64,
    /// Epoch shuffles drawn so far.
    pub shuffles: usize,
}

/// One epoch of history with every float as its bit pattern.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpochBits {
    /// 1-based epoch.
    pub epoch: usize,
    /// `train_loss.to_bits()`.
    pub train_loss: u64,
    /// `val_loss.to_bits()`.
    pub val_loss: u64,
    /// `seconds.to_bits()`.
    pub seconds: u64,
    /// `samples_per_s.to_bits()`.
    pub samples_per_s: u64,
}

impl EpochBits {
    /// Bit-exact copy of a log entry.
    pub fn from_log(l: &EpochLog) -> Self {
        Self {
            epoch: l.epoch,
            train_loss: l.train_loss.to_bits(),
            val_loss: l.val_loss.to_bits(),
            seconds: l.seconds.to_bits(),
            samples_per_s: l.samples_per_s.to_bits(),
        }
    }

    /// The log entry back.
    pub fn to_log(&self) -> EpochLog {
        EpochLog {
            epoch: self.epoch,
            train_loss: f64::from_bits(self.train_loss),
            val_loss: f64::from_bits(self.val_loss),
            seconds: f64::from_bits(self.seconds),
            samples_per_s: f64::from_bits(self.samples_per_s),
        }
    }
}

/// Everything besides tensors that a resumed run needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainState {
    /// Epochs completed.
    pub epoch: usize,
    /// Shuffle generator state.
    pub shuffle: ShuffleState,
    /// Early stopping: patience, best loss bits, best epoch, wait counter.
    pub patience: usize,
    /// `best.to_bits()` of the early-stopping monitor.
    pub best_bits: u64,
    /// Epoch of the best validation loss.
    pub best_epoch: usize,
    /// Epochs since the last improvement.
    pub wait: usize,
    /// Loss history so far.
    pub history: Vec<EpochBits>,
    /// Whether patience ran out before `max_epochs`.
    pub stopped_early: bool,
    /// Whether training is over (stopped early or reached `max_epochs`).
    pub finished: bool,
    /// Training settings of the run (a resume must use the same).
    pub train: TrainConfig,
    /// Number of training samples (a resume must use the same data).
    pub n_train: usize,
}

impl TrainState {
    /// The early-stopping monitor back.
    pub fn stopper(&self) -> EarlyStopping {
        EarlyStopping {
            patience: self.patience,
            best: f64::from_bits(self.best_bits),
            best_epoch: self.best_epoch,
            wait: self.wait,
        }
    }
}

/// A training checkpoint.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// Parameters after the last completed epoch.
    pub params: Params<f32>,
    /// Best parameters so far (restored at the end of training).
    pub best: Params<f32>,
    /// [`efa_optim::Adam::save`] bytes.
    pub adam: Vec<u8>,
    /// Counters, early stopping and history.
    pub state: TrainState,
    /// Extra metadata (`efa.state` excluded).
    pub meta: BTreeMap<String, String>,
}

fn io_err(path: &Path, what: &str, e: impl std::fmt::Display) -> ModelError {
    ModelError::Io(format!("{}: {what}: {e}", path.display()))
}

/// Writes `bytes` to `path` atomically: `<path>.tmp`, fsync, rename, fsync of the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ModelError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp).map_err(|e| io_err(&tmp, "cannot create", e))?;
    f.write_all(bytes)
        .map_err(|e| io_err(&tmp, "cannot write", e))?;
    f.sync_all().map_err(|e| io_err(&tmp, "cannot fsync", e))?;
    drop(f);
    std::fs::rename(&tmp, path)
        .map_err(|e| io_err(path, "cannot rename the temporary file over it", e))?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let Ok(d) = std::fs::File::open(dir) {
        // Directory fsync makes the rename durable; unsupported on some platforms.
        let _ = d.sync_all();
    }
    Ok(())
}

fn f32_bytes(a: &ndarray::ArrayD<f32>) -> Vec<u8> {
    a.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Serialises named f32 tensors (prefixed), optional raw byte tensors and metadata.
fn serialize(
    groups: &[(&str, &Params<f32>)],
    raw: &[(&str, &[u8])],
    meta: &BTreeMap<String, String>,
) -> Result<Vec<u8>, ModelError> {
    let mut owned: Vec<(String, Vec<usize>, Vec<u8>, Dtype)> = Vec::new();
    for (prefix, params) in groups {
        for (name, v) in params.iter() {
            owned.push((
                format!("{prefix}{name}"),
                v.shape().to_vec(),
                f32_bytes(v),
                Dtype::F32,
            ));
        }
    }
    for (name, bytes) in raw {
        owned.push((
            name.to_string(),
            vec![bytes.len()],
            bytes.to_vec(),
            Dtype::U8,
        ));
    }
    let views = owned
        .iter()
        .map(|(n, shape, data, dt)| Ok((n.clone(), TensorView::new(*dt, shape.clone(), data)?)))
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()
        .map_err(|e| ModelError::Io(format!("safetensors: {e}")))?;
    let meta: HashMap<String, String> = meta.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    safetensors::tensor::serialize(views, &Some(meta))
        .map_err(|e| ModelError::Io(format!("safetensors: {e}")))
}

/// A parsed safetensors file with its path for messages.
struct Loaded<'a> {
    path: &'a Path,
    st: SafeTensors<'a>,
    meta: BTreeMap<String, String>,
}

fn parse<'a>(path: &'a Path, bytes: &'a [u8]) -> Result<Loaded<'a>, ModelError> {
    let bad = |e: safetensors::SafeTensorError| {
        ModelError::Io(format!(
            "{}: not a valid safetensors file (truncated or corrupt?): {e}",
            path.display()
        ))
    };
    let (_, metadata) = SafeTensors::read_metadata(bytes).map_err(bad)?;
    let meta = metadata
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let st = SafeTensors::deserialize(bytes).map_err(bad)?;
    Ok(Loaded { path, st, meta })
}

impl Loaded<'_> {
    /// The tensors `prefix<name>` for every parameter of `template`, checked for dtype and shape.
    fn params(&self, prefix: &str, template: &Params<f32>) -> Result<Params<f32>, ModelError> {
        let mut out = Params::new();
        for (name, t) in template.iter() {
            let key = format!("{prefix}{name}");
            let v = self.st.tensor(&key).map_err(|_| {
                ModelError::Io(format!(
                    "{}: tensor `{key}` is missing (the model needs shape {:?})",
                    self.path.display(),
                    t.shape()
                ))
            })?;
            if v.dtype() != Dtype::F32 || v.shape() != t.shape() {
                return Err(ModelError::Io(format!(
                    "{}: tensor `{key}` is {:?} {:?}, the model needs F32 {:?}",
                    self.path.display(),
                    v.dtype(),
                    v.shape(),
                    t.shape()
                )));
            }
            let data: Vec<f32> = v
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let a = ndarray::ArrayD::from_shape_vec(t.raw_dim(), data)
                .map_err(|e| ModelError::Io(e.to_string()))?;
            out.insert(name, a);
        }
        Ok(out)
    }

    fn check_no_extra(&self, expected: usize) -> Result<(), ModelError> {
        if self.st.len() != expected {
            let mut names: Vec<_> = self.st.names().into_iter().cloned().collect();
            names.sort();
            return Err(ModelError::Io(format!(
                "{}: {} tensors but the model has {expected} ({})",
                self.path.display(),
                names.len(),
                names.join(", ")
            )));
        }
        Ok(())
    }
}

fn read(path: &Path) -> Result<Vec<u8>, ModelError> {
    std::fs::read(path).map_err(|e| io_err(path, "cannot read", e))
}

/// Writes a model file: one tensor per parameter under its own name, plus `meta`.
pub fn save_model(
    path: &Path,
    params: &Params<f32>,
    meta: &BTreeMap<String, String>,
) -> Result<(), ModelError> {
    write_atomic(path, &serialize(&[("", params)], &[], meta)?)
}

/// Reads a model file written by [`save_model`]; `template` (e.g. `model.init(0)`) gives the
/// names, order and shapes expected. Returns the parameters and the metadata.
pub fn load_model(
    path: &Path,
    template: &Params<f32>,
) -> Result<(Params<f32>, BTreeMap<String, String>), ModelError> {
    let bytes = read(path)?;
    let l = parse(path, &bytes)?;
    let p = l.params("", template)?;
    l.check_no_extra(template.len())?;
    Ok((p, l.meta))
}

/// Only the metadata of a model or checkpoint file (to learn its configuration first).
pub fn read_meta(path: &Path) -> Result<BTreeMap<String, String>, ModelError> {
    let bytes = read(path)?;
    Ok(parse(path, &bytes)?.meta)
}

impl Checkpoint {
    /// Writes the checkpoint atomically.
    pub fn save(&self, path: &Path) -> Result<(), ModelError> {
        let mut meta = self.meta.clone();
        let state =
            serde_json::to_string(&self.state).map_err(|e| ModelError::Io(e.to_string()))?;
        meta.insert(STATE_KEY.into(), state);
        let bytes = serialize(
            &[("params/", &self.params), ("best/", &self.best)],
            &[("optimizer/adam", &self.adam)],
            &meta,
        )?;
        write_atomic(path, &bytes)
    }

    /// Reads a checkpoint; `template` gives the parameter names and shapes. A truncated or
    /// corrupt file, a missing tensor or a malformed state is an error naming the file.
    pub fn load(path: &Path, template: &Params<f32>) -> Result<Self, ModelError> {
        let bytes = read(path)?;
        let l = parse(path, &bytes)?;
        let params = l.params("params/", template)?;
        let best = l.params("best/", template)?;
        let adam =
            l.st.tensor("optimizer/adam")
                .map_err(|_| {
                    ModelError::Io(format!(
                        "{}: tensor `optimizer/adam` is missing",
                        path.display()
                    ))
                })?
                .data()
                .to_vec();
        l.check_no_extra(2 * template.len() + 1)?;
        let mut meta = l.meta;
        let state = meta.remove(STATE_KEY).ok_or_else(|| {
            ModelError::Io(format!(
                "{}: metadata `{STATE_KEY}` is missing",
                path.display()
            ))
        })?;
        let state: TrainState = serde_json::from_str(&state).map_err(|e| {
            ModelError::Io(format!("{}: metadata `{STATE_KEY}`: {e}", path.display()))
        })?;
        Ok(Checkpoint {
            params,
            best,
            adam,
            state,
            meta,
        })
    }
}
