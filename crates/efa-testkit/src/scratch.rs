//! Scratch directories for tests that write files: a fresh directory under the system temp
//! dir, removed when the test passes and kept after a failure, for inspection.

use std::path::{Path, PathBuf};

/// A scratch directory, removed on drop unless the test is panicking.
pub struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

/// An empty directory `<temp>/<name>-<pid>` (emptied first if a failed run left it).
///
/// # Panics
/// When the directory cannot be created (a test cannot go on without it).
pub fn scratch(name: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d)
        .unwrap_or_else(|e| panic!("cannot create the scratch directory {}: {e}", d.display()));
    Scratch(d)
}
