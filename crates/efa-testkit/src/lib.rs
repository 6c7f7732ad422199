//! Helpers shared by efa's test suites. Dev-only: no library crate depends on it outside
//! `[dev-dependencies]`.
//!
//! # Tests that need the paper's data
//!
//! The paper's data sets (MovieLens 100K, the Instacart baskets, the city temperatures) are
//! not in the repository. A test that reads them is marked
//! `#[ignore = "needs the paper data (EFA_DATA)"]`, so `cargo test --workspace` passes on a
//! clone alone, and gets the directory from [`paper_data`]. Run them with
//! `EFA_DATA=DIR cargo test --workspace -- --include-ignored` (or from a checkout with
//! `../shared/data` beside it).
//!
//! The exponential-family reference values (`expfam_reference.json`, kept beside the project
//! in `../shared/reference`, not in the repository) follow the same policy:
//! `#[ignore = "needs the expfam reference values (EFA_REFERENCE)"]` and [`expfam_reference`].
//!
//! # Other helpers
//!
//! [`scratch()`] directories, seeded arrays and NaN-pattern assertions ([`arrays`]), tolerant
//! comparison and central differences ([`compare`]), and on the tape an audit assertion and a fused op with a plantable bug ([`tape`]).

#![warn(missing_docs)]

pub mod arrays;
pub mod compare;
pub mod scratch;
pub mod tape;

pub use arrays::{assert_nan_pattern, rand_array};
pub use compare::{assert_close, central_diff, rel_err};
pub use scratch::{scratch, Scratch};

use std::path::{Path, PathBuf};

/// The reason every data-dependent test gives in its `#[ignore = …]` attribute.
pub const NEEDS_DATA: &str = "needs the paper data (EFA_DATA)";

/// The repository's root directory (this crate sits at `crates/efa-testkit`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the paper's data are: `EFA_DATA` if set, else `../shared/data` beside the
/// repository if it exists, else `None`.
pub fn find_paper_data() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("EFA_DATA") {
        return Some(PathBuf::from(d));
    }
    let beside = repo_root().join("../shared/data");
    beside.is_dir().then_some(beside)
}

/// The paper's data directory for a test that was explicitly included (it is `#[ignore]`d
/// by default). Panics with what to do when there is none: an included test that cannot
/// read its data fails, it never passes silently.
#[track_caller]
pub fn paper_data() -> PathBuf {
    find_paper_data().unwrap_or_else(|| {
        panic!(
            "this test reads the paper's data: set EFA_DATA=DIR (the directory holding \
             movielens/, instacart/ and temperature/) or run from a checkout beside \
             ../shared/data"
        )
    })
}

/// `paper_data()/rel`, which must exist (a missing file fails the test, naming it).
#[track_caller]
pub fn paper_file(rel: &str) -> PathBuf {
    let p = paper_data().join(rel);
    assert!(p.exists(), "the paper data has no {}", p.display());
    p
}

/// The exponential-family reference file for a test that was explicitly included:
/// `EFA_REFERENCE` if set, else `../shared/reference/expfam_reference.json` beside the
/// repository. Panics with what to do when there is none.
#[track_caller]
pub fn expfam_reference() -> PathBuf {
    if let Some(f) = std::env::var_os("EFA_REFERENCE") {
        return PathBuf::from(f);
    }
    let beside = repo_root().join("../shared/reference/expfam_reference.json");
    assert!(
        beside.is_file(),
        "this test reads the exponential-family reference values: set \
         EFA_REFERENCE=FILE (expfam_reference.json) or run from a checkout beside \
         ../shared/reference"
    );
    beside
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_holds_the_workspace_manifest() {
        let manifest = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
        assert!(manifest.contains("[workspace]"));
    }

    #[test]
    fn rel_err_is_relative_to_the_references_largest_entry() {
        let b = ndarray::arr1(&[4.0f64, -8.0, 1.0]);
        let a = ndarray::arr1(&[4.5f32, -8.0, 0.0]);
        assert_eq!(rel_err(&a, &b), 1.0 / 8.0);
        let zero = ndarray::arr1(&[0.0f64, 0.0]);
        assert_eq!(rel_err(&ndarray::arr1(&[0.0f64, -0.25]), &zero), 0.25);
    }
}
