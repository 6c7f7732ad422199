//! The Poisson EFA fixture the checkpoint and resume tests train: its configuration and its
//! training and validation splits.

use efa_model::Samples;
use efa_train::userdata::{build_samples, read_csv, UserConfig};
use std::path::{Path, PathBuf};

/// `fixtures/train/<name>`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/train")
        .join(name)
}

/// `efa_poisson.toml` with its training and validation samples.
pub fn setup() -> (UserConfig, Samples, Samples) {
    let path = fixture("efa_poisson.toml");
    let cfg = UserConfig::from_toml(&std::fs::read_to_string(&path).unwrap(), &path)
        .unwrap()
        .0;
    let train = build_samples(&read_csv(&fixture("counts_train.csv"), &cfg).unwrap(), &cfg);
    let val = build_samples(&read_csv(&fixture("counts_valid.csv"), &cfg).unwrap(), &cfg);
    (cfg, train, val)
}
