//! MovieLens-100K experiments: exp-1, the next / held-out movie as a category (docs/paper.md §3,
//! [`items`]), and exp-2, Poisson ratings (§4, [`ratings`]). The categorical item models of
//! exp-1 are shared with Instacart ([`super::instacart`]).

pub mod items;
pub mod ratings;

pub use crate::options::Protocol;
pub use items::*;
pub use ratings::*;

use crate::PaperError;
use efa_data::movielens::{
    buggy_user_split, load_u_data, preprocess, MlExperiment, MlPrepared, MlUserSplit,
};
use efa_data::rng::NumpyRng;
use std::path::{Path, PathBuf};

/// `DIR/movielens/u.data`, or an error saying where to get it.
pub fn u_data_path(dir: &Path) -> Result<PathBuf, PaperError> {
    let p = dir.join("movielens").join("u.data");
    if p.is_file() {
        Ok(p)
    } else {
        Err(PaperError::MissingData {
            path: p,
            how: crate::DataSet::Movielens.how().into(),
        })
    }
}

/// Loads `u.data` from `DIR/movielens` and applies the experiment's preprocessing (§3.1 / §4.1).
pub fn load(dir: &Path, exp: MlExperiment) -> Result<MlPrepared, PaperError> {
    let raw = load_u_data(&u_data_path(dir)?)?;
    Ok(preprocess(&raw, exp)?)
}

/// The user split of `protocol`: the notebooks' buggy one, or a correct random split of all
/// kept users (`RandomState(42).permutation(n)`, first 3n/4 train+val).
pub fn user_split(prep: &MlPrepared, protocol: Protocol) -> MlUserSplit {
    match protocol {
        Protocol::Paper => buggy_user_split(prep, 42),
        Protocol::Clean => {
            let n = prep.users.len();
            let perm = NumpyRng::seed(42).permutation(n);
            let pick = |idx: &[usize]| {
                let mut v: Vec<u32> = idx.iter().map(|&i| prep.users[i]).collect();
                v.sort_unstable();
                v
            };
            MlUserSplit {
                trainval: pick(&perm[..3 * n / 4]),
                test: pick(&perm[3 * n / 4..]),
                dropped: Vec::new(),
            }
        }
    }
}

/// Baskets of a categorical item experiment, split three ways.
#[derive(Clone, Debug)]
pub struct ItemData {
    /// Training baskets (item ids 1..=n_items), in split order.
    pub train: Vec<Vec<usize>>,
    /// Validation baskets.
    pub val: Vec<Vec<usize>>,
    /// Test baskets.
    pub test: Vec<Vec<usize>>,
    /// Number of items (classes).
    pub n_items: usize,
    /// Longest basket (the EFA context width).
    pub max_len: usize,
}

impl ItemData {
    /// Number of per-position samples in `baskets`.
    pub fn samples(baskets: &[Vec<usize>]) -> usize {
        baskets.iter().map(Vec::len).sum()
    }
}
