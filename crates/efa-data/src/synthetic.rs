//! The synthetic movie-rating data of docs/paper.md §2.1, reproduced bit for bit.
//!
//! One global `RandomState(42)`; for each user in turn: the watch order is
//! `permutation(5) + 1`, then each position's rating is one `normal(mean, 1)` draw, in position
//! order, with the mean chosen by the rules on [`synthetic_mean`].

use crate::rng::NumpyRng;

/// One row of the long-format synthetic data frame.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatingRow {
    /// User id, 1-based.
    pub user: u32,
    /// Movie id, 1..=5.
    pub movie: u32,
    /// The drawn rating.
    pub rating: f64,
    /// Timestamp = position + 1 (1..=5).
    pub timestamp: u32,
}

/// Sizes and seed of the synthetic experiment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SyntheticConfig {
    /// Number of users (paper: 10,000).
    pub n_users: usize,
    /// Seed of the global RandomState (paper: 42).
    pub seed: u32,
    /// Noise standard deviation σ (paper: 1).
    pub sigma: f64,
}

impl Default for SyntheticConfig {
    /// The paper's values: 10,000 users, seed 42, σ = 1.
    fn default() -> Self {
        SyntheticConfig {
            n_users: 10_000,
            seed: 42,
            sigma: 1.0,
        }
    }
}

/// Number of movies per user (every user watches movies 1..=5 once).
pub const SYNTHETIC_MOVIES: usize = 5;

/// The mean of movie `order[j]`'s rating at position `j` of watch order `order` (ids 1..=5):
/// * movie 2: 1 if movie 1 appears in `order[..j]`, else 5;
/// * movie 4: 1 if `j > 0` and `order[j−1] = 3`, else 3;
/// * movie 3: 1 if `j > 0` and `order[j−1] = 4`, else 3;
/// * movie 5: 5 if `j = 4` (last), else 3;
/// * movie 1: 3.
pub fn synthetic_mean(order: &[u32], j: usize) -> f64 {
    let prev = if j > 0 { Some(order[j - 1]) } else { None };
    match order[j] {
        2 if order[..j].contains(&1) => 1.0,
        2 => 5.0,
        4 if prev == Some(3) => 1.0,
        3 if prev == Some(4) => 1.0,
        5 if j == order.len() - 1 => 5.0,
        _ => 3.0,
    }
}

/// Generates the long-format frame: users 1..=n in order, each user's 5 rows in watch order.
///
/// Per user the RNG calls are exactly `permutation(5)` followed by five `normal(mean, σ)`, with
/// the Gaussian cache carried across users and permutations as numpy does.
pub fn generate_synthetic(cfg: &SyntheticConfig) -> Vec<RatingRow> {
    let mut rng = NumpyRng::seed(cfg.seed);
    let mut rows = Vec::with_capacity(cfg.n_users * SYNTHETIC_MOVIES);
    for u in 0..cfg.n_users {
        let order: Vec<u32> = rng
            .permutation(SYNTHETIC_MOVIES)
            .into_iter()
            .map(|m| m as u32 + 1)
            .collect();
        for j in 0..SYNTHETIC_MOVIES {
            let mean = synthetic_mean(&order, j);
            let rating = rng.normal(mean, cfg.sigma);
            rows.push(RatingRow {
                user: u as u32 + 1,
                movie: order[j],
                rating,
                timestamp: j as u32 + 1,
            });
        }
    }
    rows
}

/// Groups a long frame (sorted by user, then timestamp) into per-user sequences of
/// `(movie, rating)`, users ascending. Returns `(user ids, sequences)`.
///
/// Fails if the frame is not sorted by (user, timestamp), since the experiments rely on it.
pub fn sequences_by_user(
    rows: &[RatingRow],
) -> Result<(Vec<u32>, Vec<crate::Sequence>), crate::DataError> {
    let mut users = Vec::new();
    let mut seqs: Vec<crate::Sequence> = Vec::new();
    let mut last: Option<(u32, u32)> = None;
    for (i, r) in rows.iter().enumerate() {
        if let Some((lu, lt)) = last {
            if (r.user, r.timestamp) <= (lu, lt) {
                return Err(crate::DataError::invalid(format!(
                    "row {i}: (user {}, timestamp {}) is not after (user {lu}, timestamp {lt})",
                    r.user, r.timestamp
                )));
            }
        }
        if last.map(|(lu, _)| lu) != Some(r.user) {
            users.push(r.user);
            seqs.push(Vec::new());
        }
        seqs.last_mut()
            .expect("pushed above")
            .push((r.movie as usize, r.rating));
        last = Some((r.user, r.timestamp));
    }
    Ok((users, seqs))
}
