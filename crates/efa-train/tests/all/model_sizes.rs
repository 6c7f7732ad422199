//! Configurations claiming huge sizes (in a TOML file or in a model file's `efa.config`) are
//! refused by `validate`, naming the field or the parameter, before anything is allocated;
//! a model file is checked against the configuration's layout before parameters are built.

use efa_model::size::MAX_PARAM_VALUES;
use efa_nn::params::Layout;
use efa_train::checkpoint::{load_model_layout, save_model};
use efa_train::userdata::UserConfig;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use efa_testkit::scratch;

fn fixture() -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/train/efa_poisson.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text)
}

/// The fixture configuration with `from` replaced by `to` (which must occur once).
fn edited(from: &str, to: &str) -> Result<UserConfig, String> {
    let (path, text) = fixture();
    assert_eq!(text.matches(from).count(), 1, "{from}");
    UserConfig::from_toml(&text.replacen(from, to, 1), &path)
        .map(|(c, _)| c)
        .map_err(|e| e.to_string())
}

#[test]
fn the_limit_and_the_fixtures_count() {
    assert_eq!(MAX_PARAM_VALUES, 268_435_456);
    let (path, text) = fixture();
    let (cfg, count) = UserConfig::from_toml(&text, &path).unwrap();
    // The count by the formula Σ Π shape over the tensors the initialiser actually builds.
    let built: usize = cfg.model.init::<f32>(0).iter().map(|(_, v)| v.len()).sum();
    assert_eq!(count.elements, built as u64);
}

#[test]
fn a_huge_field_is_refused_naming_it() {
    let (path, _) = fixture();
    let e = edited("items = 6 ", "items = 1099511627776 ").unwrap_err();
    assert_eq!(
        e,
        format!(
            "{}: field `model.efa.items`: 1099511627776 is beyond the limit of 268435456 (the \
             most parameter values a model may have)",
            path.display()
        )
    );
    let e = edited("max_len = 5", "max_len = 9223372036854775807").unwrap_err();
    assert!(
        e.contains("field `model.efa.positions.max_len`: 9223372036854775807 is beyond"),
        "{e}"
    );
    let e = edited("head_hidden = [8]", "head_hidden = [8, 4294967296]").unwrap_err();
    assert!(
        e.contains("field `model.efa.head_hidden[1]`: 4294967296 is beyond"),
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
            "{}: field `model`: parameter `item_emb` of shape [134217728, 134217728] (from \
             `items` = 134217728 × `item_dim` = 134217728) has more than 268435456 values",
            path.display()
        )
    );
    // More blocks than the layer bound: refused naming `layers` before any block is declared.
    let e = edited("layers = 1", "layers = 268435456").unwrap_err();
    assert!(
        e.contains("field `model.efa.layers`: 268435456 blocks; at most 1024"),
        "{e}"
    );
    // Just under the limit in one table is accepted (nothing is allocated by validate).
    let (path, text) = fixture();
    let (_, count) =
        UserConfig::from_toml(&text.replacen("items = 6 ", "items = 16777215 ", 1), &path).unwrap();
    let n = count.elements;
    assert!(n > 16_777_215 * 8 && n <= MAX_PARAM_VALUES, "{n}");
}

#[test]
fn a_model_file_is_checked_against_the_layout_before_building() {
    let dir = scratch::scratch("efa-sizes");
    let (path, text) = fixture();
    let cfg = UserConfig::from_toml(&text, &path).unwrap().0;
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
