//! Helpers of the malformed-input tests: fixture files written into a scratch directory, and
//! an assertion that an error names the file, line and field.

#![allow(dead_code)]

pub use efa_testkit::scratch;

use efa_data::DataError;
use std::path::{Path, PathBuf};

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Asserts `r` failed with a parse error at `file:line`, field `field`, whose message
/// contains `needle`; also checks the rendered message starts with `file:line: field`.
#[track_caller]
pub fn assert_at<T: std::fmt::Debug>(
    r: Result<T, DataError>,
    file: &Path,
    line: usize,
    field: &str,
    needle: &str,
) {
    let e = r.expect_err("expected an error");
    let msg = e.to_string();
    match &e {
        DataError::Parse { at, .. } => {
            assert_eq!(at.file, file, "{msg}");
            assert_eq!(at.line, line, "{msg}");
            assert_eq!(at.field, field, "{msg}");
        }
        other => panic!("not a located error: {other:?}"),
    }
    let head = if line > 0 {
        format!("{}:{line}: ", file.display())
    } else {
        format!("{}: ", file.display())
    };
    assert!(msg.starts_with(&head), "{msg}");
    if !field.is_empty() {
        assert!(
            msg[head.len()..].starts_with(&format!("field `{field}`")),
            "{msg}"
        );
    }
    assert!(msg.contains(needle), "`{needle}` not in: {msg}");
}
