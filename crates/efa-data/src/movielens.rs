//! MovieLens-100K `u.data` and the preprocessing / buggy splits of docs/paper.md §3–§4.

use crate::error::parse_field;
use crate::rng::{pandas_sample_one, train_test_split, NumpyRng};
use crate::samples::{RatingData, Sequence};
use crate::DataError;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// One `u.data` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlRow {
    /// User id (1-based).
    pub user: u32,
    /// Original MovieLens item id.
    pub item: u32,
    /// Rating 1..=5 (exp-2 shifts it by −2).
    pub rating: i32,
    /// Unix timestamp.
    pub timestamp: u64,
}

/// What [`load_u_data`] read.
#[derive(Clone, Debug)]
pub struct MlRaw {
    /// Rows in file order.
    pub rows: Vec<MlRow>,
    /// Distinct users.
    pub n_users: usize,
    /// Distinct items.
    pub n_items: usize,
}

/// The `u.data` columns, in file order (the names used in errors).
pub const U_DATA_COLUMNS: [&str; 4] = ["user_id", "item_id", "rating", "timestamp"];

/// Values at least this large in `timestamp` are Unix times (10⁸ s is 1973-03-03, long before
/// any MovieLens rating); the swapped-column rule of [`load_u_data`] compares ids against it.
pub const TIMESTAMP_FLOOR: u64 = 100_000_000;

/// Reads a tab-separated `u.data` (user_id, item_id, rating, timestamp; one rating per line).
///
/// Every line must hold exactly 4 tab-separated fields, and:
/// * `user_id`, `item_id`: integers ≥ 1 (0 is not an id; no upper bound is assumed);
/// * `rating`: an integer in 1..=5 (MovieLens-100K ratings are whole stars);
/// * `timestamp`: a non-negative integer (Unix seconds);
/// * a (user, item) pair appears once (MovieLens keeps one rating per user and movie).
///
/// Swapped columns are caught by range where they can be: a timestamp or an id moved into
/// `rating` breaks 1..=5; an id of at least [`TIMESTAMP_FLOOR`] (nine digits) on a line whose
/// `timestamp` is below it is a timestamp and an id (or a rating) trading places. A swap of
/// `user_id` and `item_id`, or of a rating and an id ≤ 5, leaves every field in range and
/// cannot be told from data.
///
/// Every failure names file, 1-based line and field. A blank line (empty or whitespace only;
/// the end of the file after a final newline is not a line) is an error, as in the data CSV;
/// so is a file without any rating.
pub fn load_u_data(path: &Path) -> Result<MlRaw, DataError> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    let names = U_DATA_COLUMNS;
    let mut rows = Vec::new();
    let mut seen: HashMap<(u32, u32), usize> = HashMap::new();
    let n_lines = bytes.split(|&b| b == b'\n').count();
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let ln = i + 1;
        if raw.is_empty() && ln == n_lines {
            break; // after the final newline
        }
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let line = std::str::from_utf8(raw)
            .map_err(|e| DataError::parse(path, ln, "", "", format!("not valid UTF-8 ({e})")))?;
        if line.trim().is_empty() {
            return Err(DataError::parse(path, ln, "", "", "empty line"));
        }
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 4 {
            let (field, what) = match names.get(f.len()) {
                Some(missing) => (*missing, format!("`{missing}` is missing")),
                None => (names[3], "unexpected text after `timestamp`".to_string()),
            };
            return Err(DataError::parse(
                path,
                ln,
                field,
                line,
                format!(
                    "expected 4 tab-separated fields ({}), found {}: {what}",
                    names.join(", "),
                    f.len()
                ),
            ));
        }
        let user = parse_id(path, ln, names[0], f[0])?;
        let item = parse_id(path, ln, names[1], f[1])?;
        let rating: i64 = parse_field(path, ln, names[2], f[2])?;
        if !(1..=5).contains(&rating) {
            let hint = if rating >= TIMESTAMP_FLOOR as i64 {
                ": it looks like a Unix timestamp (are the columns swapped?)"
            } else if rating > 5 {
                ": an id in the rating column? (are the columns swapped?)"
            } else {
                ""
            };
            return Err(DataError::parse(
                path,
                ln,
                names[2],
                f[2],
                format!("rating must be an integer in 1..=5{hint}"),
            ));
        }
        let timestamp: u64 = parse_field(path, ln, names[3], f[3])?;
        if timestamp < TIMESTAMP_FLOOR {
            for (k, id) in [(0, user), (1, item)] {
                if u64::from(id) >= TIMESTAMP_FLOOR {
                    return Err(DataError::parse(
                        path,
                        ln,
                        names[k],
                        f[k],
                        format!(
                            "{id} looks like a Unix timestamp (≥ {TIMESTAMP_FLOOR}) while \
                             `timestamp` = {timestamp} does not: are the columns swapped?"
                        ),
                    ));
                }
            }
        }
        if let Some(first) = seen.insert((user, item), ln) {
            return Err(DataError::parse(
                path,
                ln,
                names[1],
                f[1],
                format!("user {user} already rated item {item} at line {first}"),
            ));
        }
        rows.push(MlRow {
            user,
            item,
            rating: rating as i32, // 1..=5, checked above
            timestamp,
        });
    }
    if rows.is_empty() {
        return Err(DataError::in_file(path, "no ratings (the file is empty)"));
    }
    let n_users = rows.iter().map(|r| r.user).collect::<HashSet<_>>().len();
    let n_items = rows.iter().map(|r| r.item).collect::<HashSet<_>>().len();
    Ok(MlRaw {
        rows,
        n_users,
        n_items,
    })
}

/// A user or item id: an integer ≥ 1.
fn parse_id(path: &Path, line: usize, field: &str, raw: &str) -> Result<u32, DataError> {
    let id: u32 = parse_field(path, line, field, raw)?;
    if id == 0 {
        return Err(DataError::parse(
            path,
            line,
            field,
            raw,
            "ids start at 1 (0 is not an id)",
        ));
    }
    Ok(id)
}

/// Which MovieLens experiment's preprocessing to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MlExperiment {
    /// §3.1: next-movie categorical; ratings unused.
    Exp1,
    /// §4.1: rating − 2, keep > 0, Poisson ratings 1..3; users with one rating dropped.
    Exp2,
}

/// The exp-1 top-50 movies (original ids), in final new-id order 1..50 (§3.1).
pub const EXP1_TOP50: [u32; 50] = [
    172, 127, 181, 1, 50, 7, 15, 237, 25, 121, 118, 28, 69, 64, 202, 204, 96, 79, 174, 234, 176,
    216, 195, 269, 173, 210, 9, 222, 258, 286, 288, 257, 276, 313, 300, 302, 294, 328, 405, 100,
    151, 183, 168, 423, 98, 117, 22, 318, 56, 748,
];

/// The exp-2 top-50 movies (original ids), in final new-id order 1..50 (§4.1).
pub const EXP2_TOP50: [u32; 50] = [
    172, 127, 181, 1, 50, 7, 15, 121, 28, 69, 64, 202, 89, 204, 96, 79, 191, 174, 234, 176, 216,
    195, 269, 173, 210, 12, 9, 222, 258, 286, 288, 275, 257, 276, 237, 313, 300, 294, 405, 100,
    151, 183, 168, 423, 98, 302, 22, 318, 56, 117,
];

/// Counts of everything preprocessing removed, by reason (each a step of docs/paper.md §3.1/§4.1).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MlReport {
    /// Rows read.
    pub rows_in: usize,
    /// Exp-2 only: rows with rating − 2 ≤ 0.
    pub rows_low_rating: usize,
    /// Rows of movies outside the top 50.
    pub rows_not_top50: usize,
    /// Users removed because count / unique timestamps ≥ 2, and their rows.
    pub users_timestamp_dup: usize,
    /// Rows of those users.
    pub rows_timestamp_dup: usize,
    /// Exp-2 only: users with exactly one rating (and as many rows).
    pub users_single_rating: usize,
    /// Rows removed by the (user, timestamp) dedup.
    pub rows_dedup: usize,
    /// Dedup group sizes (size → number of groups with more than one row).
    pub dedup_groups: BTreeMap<usize, usize>,
}

impl MlReport {
    /// One line for logs: rows read, then every removal with its count, e.g.
    /// `100000 rows read; removed: 82159 outside the top 50, …`.
    pub fn summary(&self) -> String {
        let groups: usize = self.dedup_groups.values().sum();
        format!(
            "{} rows read; removed: {} with rating - 2 <= 0, {} outside the \
             top 50, {} rows of {} users with count / unique timestamps >= 2, {} users with one \
             rating, {} duplicate (user, timestamp) rows in {} groups",
            self.rows_in,
            self.rows_low_rating,
            self.rows_not_top50,
            self.rows_timestamp_dup,
            self.users_timestamp_dup,
            self.users_single_rating,
            self.rows_dedup,
            groups
        )
    }
}

/// A preprocessed MovieLens frame: one time-ordered sequence per user.
#[derive(Clone, Debug)]
pub struct MlPrepared {
    /// User ids ascending.
    pub users: Vec<u32>,
    /// Per user `(new movie id 1..=50, rating)` sorted by timestamp; rating is the raw rating
    /// (exp-1) or rating − 2 (exp-2).
    pub sequences: Vec<Sequence>,
    /// Original MovieLens id of new id `k` at index `k − 1` (pandas factorize order).
    pub movie_ids: Vec<u32>,
    /// What was removed.
    pub report: MlReport,
}

impl MlPrepared {
    /// Number of ratings kept.
    pub fn n_ratings(&self) -> usize {
        self.sequences.iter().map(Vec::len).sum()
    }

    /// The sequence of `user`, if kept.
    pub fn user(&self, user: u32) -> Option<&Sequence> {
        self.users
            .binary_search(&user)
            .ok()
            .map(|i| &self.sequences[i])
    }
}

/// The §3.1 / §4.1 preprocessing, in the notebooks' order: (exp-2: rating − 2, keep > 0), keep
/// the explicit top-50 list, drop users with count / unique timestamps ≥ 2, (exp-2: drop users
/// with one rating), keep one row per (user, timestamp) by the pandas-sample rule with seed 42
/// ([`pandas_sample_one`]) over the group's rows in file order, sort by (user, timestamp) and
/// factorize movie ids in order of first appearance.
pub fn preprocess(raw: &MlRaw, exp: MlExperiment) -> Result<MlPrepared, DataError> {
    let mut rep = MlReport {
        rows_in: raw.rows.len(),
        ..Default::default()
    };
    let mut rows: Vec<MlRow> = raw.rows.clone();
    if exp == MlExperiment::Exp2 {
        rows.iter_mut().for_each(|r| r.rating -= 2);
        let before = rows.len();
        rows.retain(|r| r.rating > 0);
        rep.rows_low_rating = before - rows.len();
    }
    let top: &[u32; 50] = if exp == MlExperiment::Exp1 {
        &EXP1_TOP50
    } else {
        &EXP2_TOP50
    };
    let top: HashSet<u32> = top.iter().copied().collect();
    let before = rows.len();
    rows.retain(|r| top.contains(&r.item));
    rep.rows_not_top50 = before - rows.len();

    let mut per_user: HashMap<u32, (usize, HashSet<u64>)> = HashMap::new();
    for r in &rows {
        let e = per_user.entry(r.user).or_default();
        e.0 += 1;
        e.1.insert(r.timestamp);
    }
    let heavy: HashSet<u32> = per_user
        .iter()
        .filter(|(_, (c, ts))| *c as f64 / ts.len() as f64 >= 2.0)
        .map(|(&u, _)| u)
        .collect();
    rep.users_timestamp_dup = heavy.len();
    let before = rows.len();
    rows.retain(|r| !heavy.contains(&r.user));
    rep.rows_timestamp_dup = before - rows.len();

    if exp == MlExperiment::Exp2 {
        let mut count: HashMap<u32, usize> = HashMap::new();
        rows.iter()
            .for_each(|r| *count.entry(r.user).or_default() += 1);
        let single: HashSet<u32> = count
            .iter()
            .filter(|(_, &c)| c == 1)
            .map(|(&u, _)| u)
            .collect();
        rep.users_single_rating = single.len();
        rows.retain(|r| !single.contains(&r.user));
    }

    // Dedup (user, timestamp): groups keep file order.
    let mut groups: HashMap<(u32, u64), Vec<usize>> = HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        groups.entry((r.user, r.timestamp)).or_default().push(i);
    }
    let mut kept: Vec<MlRow> = Vec::with_capacity(groups.len());
    for idx in groups.values() {
        if idx.len() > 1 {
            *rep.dedup_groups.entry(idx.len()).or_default() += 1;
            rep.rows_dedup += idx.len() - 1;
        }
        kept.push(rows[idx[pandas_sample_one(idx.len(), 42)]]);
    }
    kept.sort_by_key(|r| (r.user, r.timestamp));

    let mut new_id: HashMap<u32, usize> = HashMap::new();
    let mut movie_ids = Vec::new();
    let mut users = Vec::new();
    let mut sequences: Vec<Sequence> = Vec::new();
    for r in &kept {
        let id = *new_id.entry(r.item).or_insert_with(|| {
            movie_ids.push(r.item);
            movie_ids.len()
        });
        if users.last() != Some(&r.user) {
            users.push(r.user);
            sequences.push(Vec::new());
        }
        sequences
            .last_mut()
            .expect("pushed above")
            .push((id, r.rating as f64));
    }
    Ok(MlPrepared {
        users,
        sequences,
        movie_ids,
        report: rep,
    })
}

/// The user split as the notebooks coded it (§3.2, §4.2), bug included.
#[derive(Clone, Debug, PartialEq)]
pub struct MlUserSplit {
    /// Users whose id is among `perm[perm[..3n/4]]` (train + val), ascending.
    pub trainval: Vec<u32>,
    /// Users whose id is among `perm[perm[3n/4..]]`, ascending.
    pub test: Vec<u32>,
    /// Users in neither set (every id ≥ n): dropped by the bug, reported here.
    pub dropped: Vec<u32>,
}

/// `perm = RandomState(seed).permutation(n)` with `n` = number of users; the index *values*
/// `perm[perm[..3n/4]]` and `perm[perm[3n/4..]]` are compared against user ids.
pub fn buggy_user_split(prep: &MlPrepared, seed: u32) -> MlUserSplit {
    let n = prep.users.len();
    let perm = NumpyRng::seed(seed).permutation(n);
    let cut = 3 * n / 4;
    let tr: HashSet<u32> = perm[..cut].iter().map(|&i| perm[i] as u32).collect();
    let te: HashSet<u32> = perm[cut..].iter().map(|&i| perm[i] as u32).collect();
    let mut s = MlUserSplit {
        trainval: Vec::new(),
        test: Vec::new(),
        dropped: Vec::new(),
    };
    for &u in &prep.users {
        if tr.contains(&u) {
            s.trainval.push(u);
        } else if te.contains(&u) {
            s.test.push(u);
        } else {
            s.dropped.push(u);
        }
    }
    s
}

/// Exp-1 baskets: movie-id lists per user (ids ascending), split into train / val (whole users,
/// `train_test_split(0.25, 42)` over the train+val baskets, in split order) and test.
#[derive(Clone, Debug)]
pub struct Exp1Baskets {
    /// `(user, movies)` for training, in split order.
    pub train: Vec<(u32, Vec<usize>)>,
    /// Validation baskets in split order.
    pub val: Vec<(u32, Vec<usize>)>,
    /// Test baskets, users ascending.
    pub test: Vec<(u32, Vec<usize>)>,
    /// Longest basket over all kept users (44 in the paper).
    pub max_len: usize,
}

fn basket(prep: &MlPrepared, u: u32) -> (u32, Vec<usize>) {
    (
        u,
        prep.user(u)
            .map(|s| s.iter().map(|&(m, _)| m).collect())
            .unwrap_or_default(),
    )
}

/// Builds [`Exp1Baskets`] from the preprocessed exp-1 frame and its buggy split.
pub fn exp1_baskets(prep: &MlPrepared, split: &MlUserSplit) -> Result<Exp1Baskets, DataError> {
    let tv: Vec<_> = split.trainval.iter().map(|&u| basket(prep, u)).collect();
    let (tr, va) = train_test_split(tv.len(), 42)?;
    Ok(Exp1Baskets {
        train: tr.iter().map(|&i| tv[i].clone()).collect(),
        val: va.iter().map(|&i| tv[i].clone()).collect(),
        test: split.test.iter().map(|&u| basket(prep, u)).collect(),
        max_len: prep.sequences.iter().map(Vec::len).max().unwrap_or(0),
    })
}

/// Exp-2 rating samples (§4.2–§4.3): train+val and test users' sequences with the per-sample
/// split, `max_ctx` = the longest kept sequence (44).
pub fn exp2_rating_data(prep: &MlPrepared, split: &MlUserSplit) -> Result<RatingData, DataError> {
    let seqs = |us: &[u32]| {
        us.iter()
            .map(|&u| prep.user(u).cloned().unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let max_ctx = prep.sequences.iter().map(Vec::len).max();
    RatingData::new(seqs(&split.trainval), seqs(&split.test), max_ctx, 42)
}
