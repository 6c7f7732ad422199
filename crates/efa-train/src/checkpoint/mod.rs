//! Model files and training checkpoints in the safetensors format (readable by numpy and
//! PyTorch: `safetensors.numpy.load_file`), checksummed and written atomically.
//!
//! * A model file holds one little-endian f32 tensor per parameter under its own name
//!   (`item_emb`, `block0.attn.q.w`, …) and string metadata (`efa.*` keys).
//! * A checkpoint holds the current parameters under `params/<name>`, the best-so-far
//!   parameters under `best/<name>`, the optimizer state ([`efa_optim::Adam::save`] bytes) as
//!   a `U8` tensor `optimizer/adam`, and the [`TrainState`] as JSON in metadata `efa.state`
//!   (every float stored as its IEEE-754 bit pattern, so a resumed run is bit-exact).
//!
//! **Checksums.** Every file carries, in its metadata, `efa.crc32/<tensor>` = the CRC-32
//! ([`crate::fsio::crc32`], eight lowercase hex digits) of each tensor's data bytes, and
//! `efa.meta_crc32` = the CRC-32 of all other metadata entries in key order, each encoded as
//! `u64 LE key length, key bytes, u64 LE value length, value bytes`. Loading verifies all of
//! them, then the tensor names, dtypes and shapes against the model, then that every value is
//! finite (and, in the Adam state, that every second moment is ≥ 0): a flipped bit anywhere
//! in the file is an error naming the file and the tensor or metadata entry. Files without
//! checksums (written before they were introduced, or by other tools) are refused with a
//! message saying so: their damage could not be detected.
//!
//! Every write goes to `<file>.tmp`, is fsynced, renamed over the target and the directory is
//! fsynced: a crash leaves either the old file or the new one, never a torn one; a failed
//! write removes `<file>.tmp`. The header is written here (keys in sorted order, tensors by
//! dtype size then name), so the same contents always give the same bytes.

use crate::fsio::crc32::{crc32, to_hex, Crc32};
use crate::TrainError;
use efa_nn::params::{Layout, Params};
use safetensors::tensor::{Dtype, SafeTensors};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub mod state;

pub use crate::fsio::write_atomic;
pub use state::{EpochBits, InputDigest, ShuffleState, TrainState};

/// Metadata key of the JSON training state in a checkpoint.
pub const STATE_KEY: &str = "efa.state";
/// Prefix of the per-tensor checksum keys: `efa.crc32/<tensor name>`.
pub const CRC_PREFIX: &str = "efa.crc32/";
/// Metadata key of the checksum over the other metadata entries.
pub const META_CRC_KEY: &str = "efa.meta_crc32";
/// Name of the optimizer-state tensor in a checkpoint.
pub const ADAM_TENSOR: &str = "optimizer/adam";

/// Where and how often [`crate::fit::fit`] writes checkpoints.
#[derive(Clone, Debug)]
pub struct CheckpointPolicy {
    /// The checkpoint file (overwritten atomically each time).
    pub path: PathBuf,
    /// Write after every `every`-th epoch (≥ 1) and after the last one.
    pub every: usize,
    /// Extra string metadata stored in the file (e.g. the model configuration).
    pub meta: BTreeMap<String, String>,
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
    /// Extra metadata (`efa.state` and the checksums excluded).
    pub meta: BTreeMap<String, String>,
}

fn f32_bytes(a: &ndarray::ArrayD<f32>) -> Vec<u8> {
    a.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// CRC-32 of the metadata entries other than the checksums (encoding in the module docs).
fn meta_crc(meta: &BTreeMap<String, String>) -> u32 {
    let mut c = Crc32::new();
    for (k, v) in meta {
        if k.starts_with(CRC_PREFIX) || k == META_CRC_KEY {
            continue;
        }
        c.update(&(k.len() as u64).to_le_bytes())
            .update(k.as_bytes());
        c.update(&(v.len() as u64).to_le_bytes())
            .update(v.as_bytes());
    }
    c.finish()
}

/// A tensor to write: (name, dtype name, element size, shape, bytes).
type Entry = (String, &'static str, usize, Vec<usize>, Vec<u8>);

/// Serialises named f32 tensors (prefixed), raw byte tensors and metadata, with checksums.
fn serialize(
    groups: &[(&str, &Params<f32>)],
    raw: &[(&str, &[u8])],
    meta: &BTreeMap<String, String>,
) -> Result<Vec<u8>, TrainError> {
    if let Some(k) = meta
        .keys()
        .find(|k| k.starts_with(CRC_PREFIX) || *k == META_CRC_KEY)
    {
        return Err(TrainError::config(
            "checkpoint metadata",
            format!("key `{k}` is reserved for checksums"),
        ));
    }
    let mut tensors: Vec<Entry> = Vec::new();
    for (prefix, params) in groups {
        for (name, v) in params.iter() {
            let shape = v.shape().to_vec();
            tensors.push((format!("{prefix}{name}"), "F32", 4, shape, f32_bytes(v)));
        }
    }
    for (name, bytes) in raw {
        tensors.push((name.to_string(), "U8", 1, vec![bytes.len()], bytes.to_vec()));
    }
    // As the safetensors crate orders them: larger elements first (alignment), then by name.
    tensors.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    let mut meta = meta.clone();
    for (name, _, _, _, data) in &tensors {
        meta.insert(format!("{CRC_PREFIX}{name}"), to_hex(crc32(data)));
    }
    meta.insert(META_CRC_KEY.into(), to_hex(meta_crc(&meta)));
    let mut header = format!("{{\"__metadata__\":{}", json(&meta)?);
    let mut offset = 0usize;
    for (name, dtype, _, shape, data) in &tensors {
        header.push_str(&format!(
            ",{}:{{\"dtype\":\"{dtype}\",\"shape\":{},\"data_offsets\":[{offset},{}]}}",
            json(name.as_str())?,
            json(shape.as_slice())?,
            offset + data.len()
        ));
        offset += data.len();
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut out = Vec::with_capacity(8 + header.len() + offset);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for (_, _, _, _, data) in &tensors {
        out.extend_from_slice(data);
    }
    Ok(out)
}

/// Compact JSON of a header piece.
fn json<T: serde::Serialize + ?Sized>(v: &T) -> Result<String, TrainError> {
    serde_json::to_string(v).map_err(|e| TrainError::Io {
        path: PathBuf::new(),
        what: "cannot encode a safetensors header",
        source: std::io::Error::other(e),
    })
}

/// A parsed and verified safetensors file with its path for messages.
struct Loaded<'a> {
    path: &'a Path,
    st: SafeTensors<'a>,
    /// Metadata without the checksum entries.
    meta: BTreeMap<String, String>,
}

/// Parses `bytes` and verifies every checksum (see the module docs).
fn parse<'a>(path: &'a Path, bytes: &'a [u8]) -> Result<Loaded<'a>, TrainError> {
    let bad = |e: safetensors::SafeTensorError| {
        TrainError::file(
            path,
            format!("not a valid safetensors file (truncated or corrupt?): {e}"),
        )
    };
    let (_, metadata) = SafeTensors::read_metadata(bytes).map_err(bad)?;
    let mut meta: BTreeMap<String, String> = metadata
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let st = SafeTensors::deserialize(bytes).map_err(bad)?;
    if !meta.contains_key(META_CRC_KEY) && !meta.keys().any(|k| k.starts_with(CRC_PREFIX)) {
        return Err(TrainError::file(
            path,
            format!(
                "the file has no checksums (metadata `{CRC_PREFIX}<tensor>` and \
             `{META_CRC_KEY}`): it was written by an efa from before checksums or by another \
             tool, and damage to it could not be detected; train again to write a checked file"
            ),
        ));
    }
    let stored = meta.get(META_CRC_KEY).ok_or_else(|| {
        TrainError::file(
            path,
            format!("metadata `{META_CRC_KEY}` is missing: the file is corrupt or was edited"),
        )
    })?;
    let actual = to_hex(meta_crc(&meta));
    if *stored != actual {
        return Err(TrainError::file(
            path,
            format!(
                "metadata checksum mismatch (`{META_CRC_KEY}` = {stored:?}, the metadata \
             gives {actual}): the file is corrupt"
            ),
        ));
    }
    let mut names: Vec<&String> = st.names();
    names.sort();
    for name in &names {
        let key = format!("{CRC_PREFIX}{name}");
        let stored = meta.get(&key).ok_or_else(|| {
            TrainError::file(
                path,
                format!(
                    "tensor `{name}` has no checksum (metadata `{key}` is missing): the \
                 file is corrupt or was edited"
                ),
            )
        })?;
        let data = st.tensor(name).map_err(bad)?;
        let actual = to_hex(crc32(data.data()));
        if *stored != actual {
            return Err(TrainError::file(
                path,
                format!(
                    "tensor `{name}`: checksum mismatch (stored CRC-32 {stored:?}, the data \
                 gives {actual}): the file is corrupt"
                ),
            ));
        }
    }
    if let Some(k) = meta.keys().find(|k| {
        k.strip_prefix(CRC_PREFIX)
            .is_some_and(|n| !names.iter().any(|m| m.as_str() == n))
    }) {
        return Err(TrainError::file(
            path,
            format!(
                "metadata `{k}` is the checksum of a tensor the file does not have: the \
             file is corrupt or was edited"
            ),
        ));
    }
    meta.retain(|k, _| !k.starts_with(CRC_PREFIX) && k != META_CRC_KEY);
    Ok(Loaded { path, st, meta })
}

/// The row-major multi-index of flat position `flat` in `shape`.
pub fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (i, &d) in shape.iter().enumerate().rev() {
        if d > 0 {
            idx[i] = flat % d;
            flat /= d;
        }
    }
    idx
}

/// The first value of `data` (shape `shape`) that fails `ok`, as `(value, "flat index i =
/// [multi-index]")`.
fn first_bad(data: &[f32], shape: &[usize], ok: impl Fn(f32) -> bool) -> Option<(f32, String)> {
    let i = data.iter().position(|&v| !ok(v))?;
    Some((data[i], format!("flat index {i} = {:?}", unravel(i, shape))))
}

/// The names and shapes of a parameter set.
pub fn layout_of(params: &Params<f32>) -> Layout {
    Layout {
        entries: params
            .iter()
            .map(|(n, v)| (n.to_string(), v.shape().to_vec()))
            .collect(),
    }
}

impl Loaded<'_> {
    /// The tensors `prefix<name>` for every parameter of `layout`, checked for dtype and shape
    /// (before anything is built: the data come from the file, whose shapes the safetensors
    /// crate checked against its length with overflow-safe products) and finite values.
    fn params(&self, prefix: &str, layout: &Layout) -> Result<Params<f32>, TrainError> {
        let mut out = Params::new();
        for (name, shape) in &layout.entries {
            let key = format!("{prefix}{name}");
            let v = self.st.tensor(&key).map_err(|_| {
                TrainError::file(
                    self.path,
                    format!("tensor `{key}` is missing (the model needs shape {shape:?})"),
                )
            })?;
            if v.dtype() != Dtype::F32 || v.shape() != shape.as_slice() {
                return Err(TrainError::file(
                    self.path,
                    format!(
                        "tensor `{key}` is {:?} {:?}, the model needs F32 {shape:?}",
                        v.dtype(),
                        v.shape(),
                    ),
                ));
            }
            let data: Vec<f32> = v
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            if let Some((x, at)) = first_bad(&data, shape, f32::is_finite) {
                return Err(TrainError::file(
                    self.path,
                    format!(
                        "tensor `{key}` holds {x} at {at} (shape {shape:?}); model values \
                     must be finite"
                    ),
                ));
            }
            let a = ndarray::ArrayD::from_shape_vec(shape.as_slice(), data)
                .map_err(|e| TrainError::file(self.path, format!("tensor `{key}`: {e}")))?;
            out.insert(name, a);
        }
        Ok(out)
    }

    fn check_no_extra(&self, expected: usize) -> Result<(), TrainError> {
        if self.st.len() != expected {
            let mut names: Vec<_> = self.st.names().into_iter().cloned().collect();
            names.sort();
            return Err(TrainError::file(
                self.path,
                format!(
                    "{} tensors but the model has {expected} ({})",
                    names.len(),
                    names.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// The `optimizer/adam` bytes, decoded and checked: one moment pair per parameter of
    /// `layout` (same names, order and shapes), every `m` finite, every `v` finite and ≥ 0.
    fn adam(&self, layout: &Layout) -> Result<Vec<u8>, TrainError> {
        let err = |m: String| TrainError::file(self.path, format!("tensor `{ADAM_TENSOR}`: {m}"));
        let v = self.st.tensor(ADAM_TENSOR).map_err(|_| {
            TrainError::file(self.path, format!("tensor `{ADAM_TENSOR}` is missing"))
        })?;
        if v.dtype() != Dtype::U8 {
            return Err(err(format!("is {:?}, expected U8", v.dtype())));
        }
        let bytes = v.data().to_vec();
        let adam = efa_optim::Adam::<f32>::load(&bytes).map_err(|e| err(e.to_string()))?;
        let moments = adam.moments();
        let names: Vec<&str> = layout.entries.iter().map(|(n, _)| n.as_str()).collect();
        let got: Vec<&str> = moments.iter().map(|m| m.name.as_str()).collect();
        if names != got {
            return Err(err(format!(
                "moments of parameters [{}], but the model has [{}]",
                got.join(", "),
                names.join(", ")
            )));
        }
        for (m, (name, shape)) in moments.iter().zip(&layout.entries) {
            if m.shape != *shape {
                return Err(err(format!(
                    "moments of `{name}` have shape {:?}, the parameter {shape:?}",
                    m.shape
                )));
            }
            if let Some((x, at)) = first_bad(&m.m, &m.shape, f32::is_finite) {
                return Err(err(format!(
                    "first moment `m` of `{name}` holds {x} at {at}; it must be finite"
                )));
            }
            if let Some((x, at)) = first_bad(&m.v, &m.shape, |x| x.is_finite() && x >= 0.0) {
                return Err(err(format!(
                    "second moment `v` of `{name}` holds {x} at {at}; it must be finite and ≥ 0"
                )));
            }
        }
        Ok(bytes)
    }
}

/// The safetensors crate's limit on a header's length (`MAX_HEADER_SIZE`, not exported).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Reads a safetensors file as far as its header declares: the 8-byte header length, the
/// header (when that length is within the format's limit), then the data the header's
/// offsets reach and one byte more (so that a longer file is still refused by [`parse`]).
/// A file that is no safetensors file, such as a large CSV or `/dev/zero`, is thus refused
/// after at most its header, instead of being read whole first; a damaged header reads
/// nothing past itself but one byte.
fn read(path: &Path) -> Result<Vec<u8>, TrainError> {
    use std::io::Read;
    let err = |e| TrainError::io(path, "cannot read", e);
    let mut file = std::fs::File::open(path).map_err(err)?;
    let mut bytes = Vec::new();
    let mut more = |bytes: &mut Vec<u8>, n: u64| (&mut file).take(n).read_to_end(bytes);
    more(&mut bytes, 8).map_err(err)?;
    let Ok(len) = <[u8; 8]>::try_from(bytes.as_slice()) else {
        return Ok(bytes);
    };
    let n = u64::from_le_bytes(len);
    if n > MAX_HEADER_BYTES {
        return Ok(bytes);
    }
    more(&mut bytes, n).map_err(err)?;
    let data = declared_data_bytes(&bytes[8..]).unwrap_or(0);
    // Room for what the header declares, at most what the file holds, reserved at once (read
    // into by doubling, a large model's buffer took up to twice its size).
    let left = std::fs::metadata(path).map_or(0, |m| m.len().saturating_sub(8 + n));
    let room = usize::try_from(data.min(left)).unwrap_or(0);
    bytes
        .try_reserve_exact(room.saturating_add(1))
        .map_err(|_| {
            TrainError::io(
                path,
                "cannot read",
                std::io::Error::from(std::io::ErrorKind::OutOfMemory),
            )
        })?;
    more(&mut bytes, data.saturating_add(1)).map_err(err)?;
    Ok(bytes)
}

/// The data bytes a safetensors header declares (the largest end offset of its tensors), or
/// `None` when it is not a JSON object.
fn declared_data_bytes(header: &[u8]) -> Option<u64> {
    let v: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(header).ok()?;
    Some(
        v.values()
            .filter_map(|t| t.get("data_offsets")?.get(1)?.as_u64())
            .max()
            .unwrap_or(0),
    )
}

/// Writes a model file: one tensor per parameter under its own name, plus `meta` and the
/// checksums.
pub fn save_model(
    path: &Path,
    params: &Params<f32>,
    meta: &BTreeMap<String, String>,
) -> Result<(), TrainError> {
    write_atomic(path, &serialize(&[("", params)], &[], meta)?)
}

/// Reads a model file written by [`save_model`]; `template` gives the names, order and shapes
/// expected (only those: [`load_model_layout`] with [`layout_of`]`(template)`).
pub fn load_model(
    path: &Path,
    template: &Params<f32>,
) -> Result<(Params<f32>, BTreeMap<String, String>), TrainError> {
    load_model_layout(path, &layout_of(template))
}

/// Reads a model file written by [`save_model`]; `layout` (e.g. [`efa_model::ModelConfig::layout`]
/// of a configuration that passed [`efa_model::ModelConfig::validate`]) gives the names, order and
/// shapes expected. Nothing is allocated for the model before every tensor's shape matches:
/// the parameters are built from the file's data. Returns the parameters and the metadata
/// (checksums verified and removed). A damaged file, a missing or extra tensor, a wrong shape
/// or a non-finite value is an error naming the file and the tensor.
pub fn load_model_layout(
    path: &Path,
    layout: &Layout,
) -> Result<(Params<f32>, BTreeMap<String, String>), TrainError> {
    let bytes = read(path)?;
    let l = parse(path, &bytes)?;
    let p = l.params("", layout)?;
    l.check_no_extra(layout.entries.len())?;
    Ok((p, l.meta))
}

/// Only the metadata of a model or checkpoint file (to learn its configuration first), after
/// verifying the file's checksums.
pub fn read_meta(path: &Path) -> Result<BTreeMap<String, String>, TrainError> {
    let bytes = read(path)?;
    Ok(parse(path, &bytes)?.meta)
}

impl Checkpoint {
    /// Writes the checkpoint atomically.
    pub fn save(&self, path: &Path) -> Result<(), TrainError> {
        let mut meta = self.meta.clone();
        let state = serde_json::to_string(&self.state)
            .map_err(|e| TrainError::file(path, e.to_string()))?;
        meta.insert(STATE_KEY.into(), state);
        let bytes = serialize(
            &[("params/", &self.params), ("best/", &self.best)],
            &[(ADAM_TENSOR, &self.adam)],
            &meta,
        )?;
        write_atomic(path, &bytes)
    }

    /// Reads a checkpoint; `template` gives the parameter names and shapes. A truncated or
    /// damaged file, a missing tensor, a non-finite value (parameters, best parameters, Adam
    /// moments), a malformed state or one inconsistent with itself
    /// ([`TrainState::validate`]) is an error naming the file.
    pub fn load(path: &Path, template: &Params<f32>) -> Result<Self, TrainError> {
        let bytes = read(path)?;
        let l = parse(path, &bytes)?;
        let layout = layout_of(template);
        let params = l.params("params/", &layout)?;
        let best = l.params("best/", &layout)?;
        let adam = l.adam(&layout)?;
        l.check_no_extra(2 * template.len() + 1)?;
        let mut meta = l.meta;
        let state = meta
            .remove(STATE_KEY)
            .ok_or_else(|| TrainError::file(path, format!("metadata `{STATE_KEY}` is missing")))?;
        let state: TrainState = serde_json::from_str(&state)
            .map_err(|e| TrainError::file(path, format!("metadata `{STATE_KEY}`: {e}")))?;
        state
            .validate()
            .map_err(|e| TrainError::file(path, format!("metadata `{STATE_KEY}`: {e}")))?;
        Ok(Checkpoint {
            params,
            best,
            adam,
            state,
            meta,
        })
    }
}
