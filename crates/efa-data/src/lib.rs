//! efa-data: the paper's data, exactly as its notebooks prepared it.
//!
//! * [`rng`]: numpy-compatible MT19937 (`RandomState`), sklearn's `train_test_split`, pandas'
//!   one-row group sample.
//! * [`synthetic`]: the synthetic movie-rating generator (docs/paper.md §2.1).
//! * [`samples`]: per-position EFA / FM samples for the rating experiments (§2.2, §4.3) and the
//!   rating → embedding-row mappings (§2.3).
//! * [`item_samples`]: per-position samples for the categorical item experiments (§3.3, §5).
//! * [`movielens`], [`instacart`], [`temperature`]: loaders for the original files and the
//!   experiments' preprocessing and splits (§3–§6).
//! * [`user_csv`]: the CSV layout of `efa train` (sequences of item, value observations).
//! * [`written`]: a field of a user's file quoted as written, read back for a message.
//! * [`sha256`], [`fingerprint`]: a file's size and SHA-256, to tell the paper's data files
//!   from any other.
//!
//! Errors ([`DataError`]) name file, line, field and value; rows that cannot be used are an
//! error or are counted in the returned reports, never silently dropped (the only rows a
//! loader leaves out are the paper's own filters, each counted: see [`movielens::MlReport`]
//! and [`temperature::TemperatureTable::summary`]). Every real-valued field read from a file
//! goes through [`parse_real`], which rejects values that are finite in f64 but overflow the
//! f32 the models train in.
//!
//! ```
//! use efa_data::prelude::*;
//! // numpy's RandomState(42).permutation(5): [1, 4, 2, 0, 3] (as numpy prints it).
//! assert_eq!(NumpyRng::seed(42).permutation(5), vec![1, 4, 2, 0, 3]);
//! // A field that overflows the f32 training dtype is an error naming file, line and field.
//! let e = parse_real(std::path::Path::new("t.csv"), 7, "temp", "1e39").unwrap_err();
//! assert!(e.to_string().starts_with("t.csv:7: field `temp` = \"1e39\""));
//! ```

#![warn(missing_docs)]

mod csvfile;
pub mod error;
pub mod fingerprint;
pub mod instacart;
pub mod item_csv;
pub mod item_samples;
pub mod movielens;
pub mod rng;
pub mod samples;
pub mod sha256;
pub mod synthetic;
pub mod temperature;
pub mod user_csv;
pub mod written;

pub use error::{parse_real, DataError, Location};
pub use item_samples::{
    item_efa_samples, item_fm_bi_samples, item_fm_uni_samples, ItemEfaSample, ItemFmSample,
};
pub use rng::{
    pandas_sample_one, train_test_split, train_test_split_frac, NumpyRng, NumpyRngState,
};
pub use samples::{
    rating_row, CompactRatingTable, Direction, EfaSample, FmSample, RatingData, SampleRef,
    Sequence, Split,
};
pub use synthetic::{generate_synthetic, sequences_by_user, RatingRow, SyntheticConfig};

use std::path::PathBuf;

/// The loaders' common types in one import: `use efa_data::prelude::*;`.
pub mod prelude {
    pub use crate::default_data_dir;
    pub use crate::error::{parse_real, DataError, Location};
    pub use crate::rng::{train_test_split, NumpyRng};
    pub use crate::samples::{Direction, RatingData, Split};
    pub use crate::user_csv::{read_user_csv, UserTable};
}

/// The default data directory: `../shared/data` relative to the current directory, if it
/// exists (the CLI overrides it with `--data DIR`).
pub fn default_data_dir() -> Option<PathBuf> {
    let p = std::env::current_dir()
        .ok()?
        .join("..")
        .join("shared")
        .join("data");
    p.is_dir().then_some(p)
}
