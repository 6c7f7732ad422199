//! Size limits of a model configuration, checked before any parameter is allocated.
//!
//! A configuration comes from a user's TOML file or from the metadata of a model file
//! (`efa.config`), so its sizes may be anything up to `u64::MAX`. [`check_sizes`] refuses a
//! configuration whose parameters could not be built:
//! 1. every integer field of the model configuration (`items`, `item_dim`, `layers`, …: each
//!    one is a count of parameter rows, columns or blocks) is at most [`MAX_PARAM_VALUES`];
//!    the error names the field by its path (`model.efa.items`);
//! 2. the parameters are declared to a counter (names and shapes only, nothing allocated)
//!    that forms each tensor's element count `Π shape` and the running total with checked
//!    arithmetic, and stops at the first tensor whose count overflows or brings the total
//!    beyond [`MAX_PARAM_VALUES`]; the error names the tensor and its shape.
//!
//! Step 1 bounds every quantity step 2 needs (such as the model width `item_dim + values.dim`
//! and the number of blocks declared before the total runs over), so neither step overflows
//! or allocates in proportion to a claimed size.

use crate::model::ModelConfig;
use crate::ModelError;
use efa_nn::params::{InitKind, ParamSink};
use efa_nn::NnError;

/// The most parameter values a model may have: 2²⁸ = 268 435 456 (1 GiB in f32). The paper's
/// largest models have a few million.
pub const MAX_PARAM_VALUES: usize = 1 << 28;

/// Counts declared parameter values with checked arithmetic (see the module docs). A refusal
/// stops the declaration with an [`NnError`]; the error this module reports is the one kept in
/// `refused`.
#[derive(Debug, Default)]
struct Counter {
    total: usize,
    refused: Option<ModelError>,
}

impl ParamSink for Counter {
    type Handle = ();

    fn param(&mut self, name: &str, shape: &[usize], _: InitKind) -> Result<(), NnError> {
        let count = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let total = count.and_then(|c| c.checked_add(self.total));
        match (count, total) {
            (Some(_), Some(t)) if t <= MAX_PARAM_VALUES => {
                self.total = t;
                Ok(())
            }
            _ => Err(self.refuse(name, shape, count)),
        }
    }
}

impl Counter {
    /// Keeps this module's message for parameter `name` and returns the declaration's error.
    fn refuse(&mut self, name: &str, shape: &[usize], count: Option<usize>) -> NnError {
        self.refused = Some(ModelError::Config(format!(
            "parameter `{name}` would have shape {shape:?} ({} values), bringing the model \
                 beyond the limit of {MAX_PARAM_VALUES} parameter values; check the sizes in \
                 the configuration",
            count.map_or("more than 2^64".to_string(), |c| c.to_string())
        )));
        let (name, shape) = (name.to_string(), shape.to_vec());
        let field = "model".to_string();
        let limit = MAX_PARAM_VALUES as u64;
        match count {
            Some(c) if c <= MAX_PARAM_VALUES => NnError::TotalTooLarge {
                field,
                name,
                shape,
                limit,
            },
            _ => NnError::TensorTooLarge {
                field,
                name,
                shape,
                limit,
            },
        }
    }
}

/// The first integer in `v` (depth first, in field order) greater than `limit`, with its path
/// below `path`.
fn first_large(v: &serde_json::Value, path: &str, limit: u64) -> Option<(String, u64)> {
    match v {
        serde_json::Value::Number(n) => n.as_u64().filter(|&x| x > limit).map(|x| (path.into(), x)),
        serde_json::Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, x)| first_large(x, &format!("{path}[{i}]"), limit)),
        serde_json::Value::Object(m) => m
            .iter()
            .find_map(|(k, x)| first_large(x, &format!("{path}.{k}"), limit)),
        _ => None,
    }
}

/// Checks that `cfg`'s parameters can be built (module docs): every integer field at most
/// [`MAX_PARAM_VALUES`], and `Σ_tensors Π shape ≤ MAX_PARAM_VALUES`, computed without
/// overflow and without allocating. The error names the field (`model.efa.items`) or the
/// parameter and its shape.
pub fn check_sizes(cfg: &ModelConfig) -> Result<(), ModelError> {
    param_values(cfg).map(|_| ())
}

/// The number of parameter values of `cfg` (`Σ_tensors Π shape`), with the checks of
/// [`check_sizes`] (one declaration to the counter does both).
pub fn param_values(cfg: &ModelConfig) -> Result<usize, ModelError> {
    let v = serde_json::to_value(cfg).map_err(|e| ModelError::Config(e.to_string()))?;
    if let Some((field, x)) = first_large(&v, "model", MAX_PARAM_VALUES as u64) {
        return Err(ModelError::Config(format!(
            "field `{field}` = {x} is beyond the limit of {MAX_PARAM_VALUES} (the most \
             parameter values a model may have)"
        )));
    }
    let mut c = Counter::default();
    if let Err(e) = cfg.declare(&mut c) {
        return Err(c.refused.take().unwrap_or(e));
    }
    Ok(c.total)
}
