//! Fingerprints of data files: a file's size and SHA-256 ([`crate::sha256`]), so that a run
//! meant to reproduce a result can refuse any file other than the one the result came from.
//!
//! ```
//! use efa_data::fingerprint::{Fingerprint, Differs};
//! let dir = std::env::temp_dir().join(format!("efa-fingerprint-doc-{}", std::process::id()));
//! std::fs::create_dir_all(dir.join("set")).unwrap();
//! std::fs::write(dir.join("set/a.txt"), b"abc").unwrap();
//! let fp = Fingerprint {
//!     path: "set/a.txt",
//!     size: 3,
//!     sha256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
//! };
//! assert!(fp.check(&dir).unwrap().is_none());
//! std::fs::write(dir.join("set/a.txt"), b"abd").unwrap();
//! let m = fp.check(&dir).unwrap().unwrap();
//! assert!(matches!(m.differs, Differs::Sha256 { .. }));
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use crate::sha256::{file_sha256, hex};
use crate::DataError;
use serde::Serialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// The size and SHA-256 of a file, with its path relative to a data directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    /// The path relative to the data directory, `/`-separated (e.g. `movielens/u.data`).
    pub path: &'static str,
    /// The size in bytes.
    pub size: u64,
    /// The SHA-256 of the contents, 64 lowercase hex digits.
    pub sha256: &'static str,
}

/// How a file differs from its fingerprint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "differs", rename_all = "lowercase")]
pub enum Differs {
    /// The file does not exist.
    Missing,
    /// The size differs (the contents were not hashed).
    Size {
        /// The fingerprint's size.
        expected: u64,
        /// The file's size.
        found: u64,
    },
    /// The size matches, the SHA-256 does not.
    Sha256 {
        /// The fingerprint's hash.
        expected: String,
        /// The file's hash.
        found: String,
    },
}

/// A file that is not the one its fingerprint describes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    /// The file looked at.
    pub file: PathBuf,
    /// How it differs.
    #[serde(flatten)]
    pub differs: Differs,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.display();
        match &self.differs {
            Differs::Missing => write!(f, "{file}: the file does not exist"),
            Differs::Size { expected, found } => write!(
                f,
                "{file}: {found} bytes, but the expected file has {expected} bytes"
            ),
            Differs::Sha256 { expected, found } => write!(
                f,
                "{file}: SHA-256 {found}, but the expected file (of the same size) has SHA-256 \
                 {expected}"
            ),
        }
    }
}

impl Fingerprint {
    /// The file this fingerprint describes inside `dir`.
    pub fn file(&self, dir: &Path) -> PathBuf {
        self.path
            .split('/')
            .fold(dir.to_path_buf(), |p, c| p.join(c))
    }

    /// Compares `dir`'s file with the fingerprint: `None` when it is the same file (size and
    /// SHA-256), else how it differs (the size is compared first, so a file of another size is
    /// not read). A file that exists but cannot be read is an error naming it.
    pub fn check(&self, dir: &Path) -> Result<Option<Mismatch>, DataError> {
        let file = self.file(dir);
        let mismatch = |differs| {
            Ok(Some(Mismatch {
                file: file.clone(),
                differs,
            }))
        };
        let meta = match std::fs::metadata(&file) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return mismatch(Differs::Missing)
            }
            Err(e) => return Err(DataError::io(&file, e)),
        };
        if meta.len() != self.size {
            return mismatch(Differs::Size {
                expected: self.size,
                found: meta.len(),
            });
        }
        let (_, digest) = file_sha256(&file).map_err(|e| DataError::io(&file, e))?;
        let found = hex(&digest);
        if found != self.sha256 {
            return mismatch(Differs::Sha256 {
                expected: self.sha256.to_string(),
                found,
            });
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ABC: Fingerprint = Fingerprint {
        path: "set/abc.txt",
        size: 3,
        sha256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    };

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("efa-fp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("set")).unwrap();
        d
    }

    #[test]
    fn the_same_file_matches() {
        let d = dir("same");
        std::fs::write(d.join("set/abc.txt"), b"abc").unwrap();
        assert_eq!(ABC.check(&d).unwrap(), None);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_missing_file_is_named() {
        let d = dir("missing");
        let m = ABC.check(&d).unwrap().unwrap();
        let file = d.join("set").join("abc.txt");
        assert_eq!(m.differs, Differs::Missing);
        assert_eq!(
            m.to_string(),
            format!("{}: the file does not exist", file.display())
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn another_size_is_named_with_both_sizes() {
        let d = dir("size");
        std::fs::write(d.join("set/abc.txt"), b"abcd").unwrap();
        let m = ABC.check(&d).unwrap().unwrap();
        assert_eq!(
            m.to_string(),
            format!(
                "{}: 4 bytes, but the expected file has 3 bytes",
                d.join("set/abc.txt").display()
            )
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_same_size_with_other_bytes_is_named_with_both_hashes() {
        let d = dir("hash");
        std::fs::write(d.join("set/abc.txt"), b"abd").unwrap();
        let m = ABC.check(&d).unwrap().unwrap();
        let found = hex(&crate::sha256::sha256(b"abd"));
        assert_eq!(
            m.to_string(),
            format!(
                "{}: SHA-256 {found}, but the expected file (of the same size) has SHA-256 {}",
                d.join("set/abc.txt").display(),
                ABC.sha256
            )
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_unreadable_path_is_an_error_naming_it() {
        let d = dir("unreadable");
        // A directory where the file should be: it exists, has some size, cannot be read.
        std::fs::create_dir_all(d.join("set/abc.txt")).unwrap();
        let r = Fingerprint {
            size: std::fs::metadata(d.join("set/abc.txt")).unwrap().len(),
            ..ABC
        }
        .check(&d);
        let e = r.unwrap_err().to_string();
        assert!(e.contains("abc.txt"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
