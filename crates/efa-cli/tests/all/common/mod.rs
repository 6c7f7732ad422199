//! What the CLI's integration tests share: the fixtures, the binary and paths as arguments.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `fixtures/train/<name>`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/train")
        .join(name)
}

/// Runs the `efa` binary with `args`.
pub fn efa(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_efa"))
        .args(args)
        .output()
        .unwrap()
}

/// A path as an argument.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}
