//! Configurations claiming huge sizes (in a TOML file or in a model file's `efa.config`) are
//! refused by `validate`, naming the field or the parameter, before anything is allocated;
//! a model file is checked against the configuration's layout before parameters are built.

use efa_model::checkpoint::{load_model_layout, save_model};
use efa_model::sizes::{param_values, MAX_PARAM_VALUES};
use efa_model::userdata::UserConfig;
use efa_nn::params::Layout;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[path = "../../../tests/common/scratch.rs"]
mod scratch;

fn fixture() -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/train/efa_poisson.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text)
}

/// The fixture configuration with `from` replaced by `to` (which must occur once).
fn edited(from: &str, to: &str) -> Result<UserConfig, String> {
    let (path, text) = fixture();
    assert_eq!(text.matches(from).count(), 1, "{from}");
    UserConfig::from_toml(&text.replacen(from, to, 1), &path).map_err(|e| e.to_string())
}

#[test]
fn the_limit_and_the_fixtures_count() {
    assert_eq!(MAX_PARAM_VALUES, 268_435_456);
    let (path, text) = fixture();
    let cfg = UserConfig::from_toml(&text, &path).unwrap();
    // The count by the formula Σ Π shape over the tensors the initialiser actually builds.
    let built: usize = cfg.model.init::<f32>(0).iter().map(|(_, v)| v.len()).sum();
    assert_eq!(param_values(&cfg.model).unwrap(), built);
}

#[test]
fn a_huge_field_is_refused_naming_it() {
    let (path, _) = fixture();
    let e = edited("items = 6 ", "items = 1099511627776 ").unwrap_err();
    assert_eq!(
        e,
        format!(
            "invalid model configuration: {}: field `model.efa.items` = 1099511627776 is beyond \
             the limit of 268435456 (the most parameter values a model may have)",
            path.display()
        )
    );
    let e = edited("max_len = 5", "max_len = 9223372036854775807").unwrap_err();
    // The EFA's own element-count check may answer first; both name the field.
    assert!(
        e.contains("field `model.efa.positions.max_len` = 9223372036854775807 is beyond")
            || e.contains("field `positions.max_len` = 9223372036854775807: parameter `pos_emb`"),
        "{e}"
    );
    let e = edited("head_hidden = [8]", "head_hidden = [8, 4294967296]").unwrap_err();
    assert!(
        e.contains("field `model.efa.head_hidden[1]` = 4294967296 is beyond"),
        "{e}"
    );
}

#[test]
fn a_huge_product_is_refused_naming_the_parameter() {
    // 2^27 rows of width 2^27: each field is within the limit, the table has 2^54 values.
    let (path, text) = fixture();
    let text = text
        .replacen("items = 6 ", "items = 134217728 ", 1)
        .replacen("item_dim = 8", "item_dim = 134217728", 1);
    let e = UserConfig::from_toml(&text, &path).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "invalid model configuration: {}: parameter `item_emb` would have shape \
             [134217728, 134217728] (18014398509481984 values), bringing the model beyond the \
             limit of 268435456 parameter values; check the sizes in the configuration",
            path.display()
        )
    );
    // Many blocks of a small model: the count stops at the first block beyond the limit
    // instead of declaring (or allocating) all of them.
    // (The layer bound of 1024, checked first, refuses this one naming `layers`.)
    let e = edited("layers = 1", "layers = 268435456").unwrap_err();
    assert!(
        (e.contains(": parameter `block") && e.contains("bringing the model beyond the limit"))
            || e.contains("field `layers`: 268435456 blocks; at most 1024"),
        "{e}"
    );
    // Just under the limit in one table is accepted (nothing is allocated by validate).
    let cfg = edited("items = 6 ", "items = 16777215 ").unwrap();
    let n = param_values(&cfg.model).unwrap();
    assert!(n > 16_777_215 * 8 && n <= MAX_PARAM_VALUES, "{n}");
}

#[test]
fn a_model_file_is_checked_against_the_layout_before_building() {
    let dir = scratch::scratch("efa-sizes");
    let (path, text) = fixture();
    let cfg = UserConfig::from_toml(&text, &path).unwrap();
    let file = dir.join("model.safetensors");
    save_model(&file, &cfg.model.init::<f32>(3), &BTreeMap::new()).unwrap();
    let (p, _) = load_model_layout(&file, &cfg.model.layout()).unwrap();
    assert_eq!(p.get("item_emb").unwrap().shape(), &[6, 8]);
    // A layout claiming an enormous first tensor (2^62 values, which could never be
    // allocated): refused from the file's header alone.
    let mut layout: Layout = cfg.model.layout();
    layout.entries[0].1 = vec![1 << 31, 1 << 31];
    let e = load_model_layout(&file, &layout).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: tensor `item_emb` is F32 [6, 8], the model needs F32 [2147483648, 2147483648]",
            file.display()
        )
    );
}
