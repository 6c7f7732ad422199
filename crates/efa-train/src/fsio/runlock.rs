//! One training process per output directory: [`RunLock`] holds an exclusive operating-system
//! lock (`flock` on Unix, `LockFileEx` on Windows, through `std::fs::File::try_lock`) on
//! `<dir>/train.lock` while a run writes there.
//!
//! The lock belongs to the open file, so the operating system releases it when the process
//! ends, however it ends (SIGKILL included): a stale `train.lock` left by a killed process
//! never blocks the next run, which simply takes the lock. A second process is refused at
//! once with an error naming the lock file and the holder's process id. The file holds
//! `pid <id>` for that message and is removed when the lock is dropped; a process that
//! locked a file just removed by its previous holder notices (the path no longer leads to
//! its file) and tries again.

use crate::TrainError;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// Name of the lock file inside the output directory.
pub const LOCK_FILE: &str = "train.lock";

/// An exclusive lock on an output directory, released (and its file removed) on drop.
#[derive(Debug)]
pub struct RunLock {
    path: PathBuf,
    file: Option<File>,
}

/// Whether `path` still names the file `f` (same device and inode on Unix).
fn still_there(f: &File, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (f.metadata(), std::fs::metadata(path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = f;
        path.exists()
    }
}

impl RunLock {
    /// Locks `dir` (which must exist) for this process. Fails at once, naming the lock file
    /// and the holder's pid, when another process holds it.
    pub fn acquire(dir: &Path) -> Result<RunLock, TrainError> {
        let path = dir.join(LOCK_FILE);
        let io = |what: &'static str, e: std::io::Error| TrainError::io(&path, what, e);
        // Each retry means another process removed the file between our open and our lock.
        for _ in 0..100 {
            let mut f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(|e| io("cannot open the lock file", e))?;
            match f.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    let mut text = String::new();
                    let _ = f.read_to_string(&mut text);
                    let holder = text
                        .trim()
                        .strip_prefix("pid ")
                        .and_then(|p| p.parse::<u32>().ok())
                        .map_or("another process".to_string(), |p| format!("process {p}"));
                    return Err(TrainError::Locked { path, holder });
                }
                Err(TryLockError::Error(e)) => return Err(io("cannot lock", e)),
            }
            if !still_there(&f, &path) {
                continue;
            }
            f.set_len(0)
                .map_err(|e| io("cannot write the lock file", e))?;
            f.rewind()
                .map_err(|e| io("cannot write the lock file", e))?;
            f.write_all(format!("pid {}\n", std::process::id()).as_bytes())
                .map_err(|e| io("cannot write the lock file", e))?;
            return Ok(RunLock {
                path,
                file: Some(f),
            });
        }
        Err(TrainError::io(
            &path,
            "cannot lock",
            std::io::Error::other("the lock file keeps being replaced"),
        ))
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Remove the file while still holding the lock, then close it (which unlocks).
        let _ = std::fs::remove_file(&self.path);
        drop(self.file.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_a_stale_file_does_not_block() {
        let dir = std::env::temp_dir().join(format!("efa-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let a = RunLock::acquire(&dir).unwrap();
        let text = std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap();
        assert_eq!(text, format!("pid {}\n", std::process::id()));
        // A second lock (its own open file) is refused while the first is held.
        let e = RunLock::acquire(&dir).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}: the output directory is in use by process {} (another training run); \
                 wait for it to end or choose another output directory",
                dir.join(LOCK_FILE).display(),
                std::process::id()
            )
        );
        drop(a);
        assert!(!dir.join(LOCK_FILE).exists(), "the lock file is removed");
        // A lock file left by a killed process (nobody holds the lock) does not block.
        std::fs::write(dir.join(LOCK_FILE), "pid 999999999\n").unwrap();
        let b = RunLock::acquire(&dir).unwrap();
        assert_eq!(b.path(), dir.join(LOCK_FILE));
        drop(b);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
