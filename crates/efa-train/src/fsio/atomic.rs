//! Atomic file writes: a reader sees the old file or the whole new one, never a part.

use crate::TrainError;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` atomically: `<path>.tmp`, fsync, rename, fsync of the directory.
/// On any error `<path>.tmp` is removed and `path` is left as it was.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let written = (|| {
        // Errors name the file asked for, and the temporary the failure may belong to (a
        // name one `.tmp` too long, a directory of that name).
        let io = |what, e| TrainError::io(path, what, e);
        let mut f = std::fs::File::create(&tmp)
            .map_err(|e| io("cannot create (through its temporary `<file>.tmp`)", e))?;
        f.write_all(bytes)
            .map_err(|e| io("cannot write (through its temporary `<file>.tmp`)", e))?;
        f.sync_all()
            .map_err(|e| io("cannot fsync (through its temporary `<file>.tmp`)", e))?;
        drop(f);
        std::fs::rename(&tmp, path)
            .map_err(|e| TrainError::io(path, "cannot rename the temporary file over it", e))
    })();
    if let Err(e) = written {
        // Nothing else writes `<path>.tmp` (the run directory is locked), so it is ours.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
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
