//! The one size check of a model configuration, before any parameter is allocated.
//!
//! A configuration comes from a user's TOML file or from the metadata of a model file, so its
//! sizes may be anything up to `u64::MAX`. [`count_params`] refuses a configuration whose
//! parameters could not be built and otherwise counts them:
//! 1. every integer field of the configuration (`items`, `item_dim`, `layers`, …: each one is
//!    a count of parameter rows, columns or blocks) is at most [`MAX_PARAM_VALUES`], and the
//!    attention blocks and head layers at most [`MAX_LAYERS`]; the error names the field by
//!    its path (`efa.items`);
//! 2. the parameters are declared to a counter ([`efa_nn::params::Counter`]: names and shapes
//!    only, nothing allocated) that forms each tensor's element count `Π shape` and the
//!    running total with checked arithmetic and stops at the first tensor whose count, or the
//!    total with it, passes [`MAX_PARAM_VALUES`]; the error names the tensor, its shape and
//!    the configuration field it comes from.
//!
//! Step 1 bounds every quantity step 2 forms (products of two fields fit in 64 bits, and the
//! blocks declared before the total runs over are few), so neither step overflows or
//! allocates in proportion to a claimed size.

use crate::fm::FmConfig;
use crate::model::ModelConfig;
use crate::ModelError;
use efa_nn::params::{Counter, ParamCount};

/// The most parameter values a model may have, and the largest value any size field may
/// take: 2²⁸ = 268 435 456 (1 GiB in f32). The paper's largest models have a few million.
pub const MAX_PARAM_VALUES: u64 = 1 << 28;

/// Most attention blocks (and most head layers) a model may declare. The paper's models have
/// at most 4; a block count in the millions would take hours to declare before failing.
pub const MAX_LAYERS: usize = 1024;

/// Checks `model`'s sizes and counts its parameters (module docs); the error names the field
/// or the tensor.
pub fn count_params(model: &ModelConfig) -> Result<ParamCount, ModelError> {
    let v =
        serde_json::to_value(model).map_err(|e| ModelError::config("(whole)", e.to_string()))?;
    if let Some((field, x)) = first_large(&v, "", MAX_PARAM_VALUES) {
        return Err(beyond_limit(field.trim_start_matches('.'), x));
    }
    if let ModelConfig::Efa(c) = model {
        if c.layers > MAX_LAYERS {
            return Err(ModelError::config(
                "efa.layers",
                format!("{} blocks; at most {MAX_LAYERS} are supported", c.layers),
            ));
        }
        if c.head_hidden.len() > MAX_LAYERS {
            return Err(ModelError::config(
                "efa.head_hidden",
                format!(
                    "{} hidden layers; at most {MAX_LAYERS} are supported",
                    c.head_hidden.len()
                ),
            ));
        }
    }
    let field_of = |name: &str| field_of(model, name);
    let mut counter = Counter::new(MAX_PARAM_VALUES, &field_of);
    model.declare(&mut counter)?;
    Ok(counter.into_count())
}

/// Checks one size before it is used to allocate (e.g. the rows of a table built from the
/// field): `x` at most [`MAX_PARAM_VALUES`], else the error [`count_params`] gives for a
/// field beyond the limit, naming `field` (its path below the model, `efa.items`).
pub fn check_size(field: &str, x: u64) -> Result<(), ModelError> {
    match x > MAX_PARAM_VALUES {
        true => Err(beyond_limit(field, x)),
        false => Ok(()),
    }
}

/// The error of the size field `field` whose value `x` is beyond [`MAX_PARAM_VALUES`].
fn beyond_limit(field: &str, x: u64) -> ModelError {
    ModelError::config(
        field,
        format!(
            "{x} is beyond the limit of {MAX_PARAM_VALUES} (the most parameter values a model \
             may have)"
        ),
    )
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

/// The configuration field (with its value, in backticks) behind parameter `name` of `model`.
fn field_of(model: &ModelConfig, name: &str) -> String {
    let root = name.split('.').next().unwrap_or(name);
    match model {
        ModelConfig::Efa(c) => match root {
            "item_emb" if c.continuous.is_some() => format!(
                "`items` = {} × `continuous.dim` = {}",
                c.items,
                c.continuous.as_ref().map_or(0, |c| c.dim)
            ),
            "item_emb" => format!("`items` = {} × `item_dim` = {}", c.items, c.item_dim),
            "value_emb" => {
                let (rows, dim) = c.values.as_ref().map_or((0, 0), |v| (v.rows, v.dim));
                format!("`values.rows` = {rows} × `values.dim` = {dim}")
            }
            "pos_emb" => format!(
                "`positions.max_len` = {}",
                c.positions.as_ref().map_or(0, |p| p.max_len)
            ),
            r if r.starts_with("block") && name.contains(".attn.") => format!(
                "`heads` = {} × `key_dim` = {} (in each of `layers` = {})",
                c.heads, c.key_dim, c.layers
            ),
            r if r.starts_with("block") && name.contains(".ffn") => format!(
                "`ffn` = {} (in each of `layers` = {})",
                c.ffn.unwrap_or(0),
                c.layers
            ),
            r if r.starts_with("block") => format!("`layers` = {}", c.layers),
            r if r.starts_with("head") => format!("`head_hidden` = {:?}", c.head_hidden),
            "out" => format!("`out_dim` = {}", c.out_dim),
            _ => {
                let ci = c.continuous.as_ref();
                let get = |f: fn(&crate::efa::ContinuousInputs) -> usize| ci.map_or(0, f);
                match root {
                    "value_mlp1" | "value_mlp2" | "site_mlp1" | "site_mlp2" => format!(
                        "`continuous.hidden` = {} × `continuous.dim` = {}",
                        get(|c| c.hidden),
                        get(|c| c.dim)
                    ),
                    "lag_emb" => format!(
                        "`continuous.lag_rows` = {}",
                        ci.and_then(|c| c.lag_rows).unwrap_or(0)
                    ),
                    "fuse1" | "fuse2" => format!(
                        "`continuous.fuse` = {} × `item_dim` = {}",
                        get(|c| c.fuse),
                        c.item_dim
                    ),
                    _ => format!("`continuous.dim` = {}", get(|c| c.dim)),
                }
            }
        },
        ModelConfig::Fm(FmConfig::Rating { items, dim }) => {
            format!("`items` = {items} × `dim` = {dim}")
        }
        ModelConfig::Fm(FmConfig::Item {
            tokens,
            dim,
            classes,
        }) => match root {
            "out" => format!("`classes` = {classes} × `dim` = {dim}"),
            _ => format!("`tokens` = {tokens} × `dim` = {dim}"),
        },
    }
}
