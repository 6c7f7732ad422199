//! The CSV layout of `efa train` (your own data): sequences of (item, value) observations.
//!
//! A header naming the four columns `seq`, `order`, `item`, `value` and optionally `lag` and
//! `target` (any order), then one record per observation (RFC 4180 quoting through the `csv`
//! crate; records are mapped to their columns by name through serde):
//! * `seq`: sequence id (any non-empty text);
//! * `order`: integer position key inside the sequence (rows are sorted by it; a repeated
//!   `(seq, order)` pair is an error);
//! * `item`: non-negative integer item id;
//! * `value`: the observed value, a number finite in f64 and in the f32 training dtype
//!   ([`crate::parse_real`]);
//! * `lag` (optional, default 0): a non-negative integer, 0 for the target's own time, 1, 2, …
//!   for earlier times (what a model does with it is the model crate's business);
//! * `target` (optional): `1` if the row is a target, `0` if it is context only.
//!
//! Every error names the file, the 1-based line (the header is line 1) and the field. Blank
//! lines are errors, not skipped, so that no line of the file is silently ignored. What a
//! model can use (item range, the family's support, sequence lengths) is checked by the model
//! crate against its configuration, with the lines kept here.

use crate::{parse_real, DataError};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The columns of the layout.
pub const COLUMNS: [&str; 4] = ["seq", "order", "item", "value"];

/// The optional columns of the layout.
pub const OPTIONAL_COLUMNS: [&str; 2] = ["lag", "target"];

/// One record as text, mapped from its columns by name.
#[derive(Deserialize)]
struct RawRecord {
    seq: String,
    order: String,
    item: String,
    value: String,
    #[serde(default)]
    lag: Option<String>,
    #[serde(default)]
    target: Option<String>,
}

/// One observation.
#[derive(Clone, Debug, PartialEq)]
pub struct UserRow {
    /// Order key.
    pub order: i64,
    /// Item id.
    pub item: usize,
    /// Observed value.
    pub value: f64,
    /// Lag (0 without a `lag` column).
    pub lag: usize,
    /// The `target` column (`None` without one).
    pub target: Option<bool>,
    /// Line in the file (header = line 1).
    pub line: usize,
}

/// One sequence: its id and its rows sorted by `order`.
#[derive(Clone, Debug, PartialEq)]
pub struct UserSequence {
    /// Sequence id.
    pub id: String,
    /// Rows, sorted by `order`.
    pub rows: Vec<UserRow>,
}

/// A parsed file: sequences in order of first appearance.
#[derive(Clone, Debug)]
pub struct UserTable {
    /// The file read.
    pub file: PathBuf,
    /// The sequences.
    pub sequences: Vec<UserSequence>,
    /// The file has a `lag` column.
    pub has_lag: bool,
    /// The file has a `target` column.
    pub has_target: bool,
}

impl UserTable {
    /// Number of rows (observations).
    pub fn rows(&self) -> usize {
        self.sequences.iter().map(|s| s.rows.len()).sum()
    }
}

/// Reads `path` in the layout of the module docs.
pub fn read_user_csv(path: &Path) -> Result<UserTable, DataError> {
    let err = |line: usize, field: &str, value: &str, why: String| {
        DataError::parse(path, line, field, value, why)
    };
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    // Line numbers from byte offsets: the csv crate's own line count skips blank lines.
    let newlines: Vec<u64> = bytes
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .map(|(i, _)| i as u64)
        .collect();
    // A record position may point at the rest of the previous record's terminator (the `\n`
    // of a CRLF); the record starts after it (blank lines are rejected below, first).
    let line_of = |byte: u64| {
        let mut b = byte as usize;
        while b < bytes.len() && matches!(bytes[b], b'\r' | b'\n') {
            b += 1;
        }
        newlines.partition_point(|&nl| nl < b as u64) + 1
    };
    if let Some(line) = first_blank_line(&bytes) {
        return Err(if line == 1 {
            err(
                1,
                "header",
                "",
                format!("empty file: expected the header `{}`", COLUMNS.join(",")),
            )
        } else {
            err(line, "", "", "empty line".into())
        });
    }
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(bytes.as_slice());
    let utf8 = |line: usize| err(line, "", "", "the line is not valid UTF-8".into());
    let headers = reader.headers().map_err(|_| utf8(1))?.clone();
    if headers.is_empty() || headers.iter().all(str::is_empty) {
        return Err(err(
            1,
            "header",
            "",
            format!("empty file: expected the header `{}`", COLUMNS.join(",")),
        ));
    }
    let mut seen_cols = [false; 6];
    let all: Vec<&str> = COLUMNS.iter().chain(&OPTIONAL_COLUMNS).copied().collect();
    for name in headers.iter() {
        match all.iter().position(|c| *c == name) {
            Some(k) if !seen_cols[k] => seen_cols[k] = true,
            Some(_) => return Err(err(1, name, name, "duplicate column".into())),
            None => {
                return Err(err(
                    1,
                    name,
                    name,
                    format!(
                        "unknown column (expected exactly {}, and optionally {})",
                        COLUMNS.join(","),
                        OPTIONAL_COLUMNS.join(",")
                    ),
                ))
            }
        }
    }
    let (has_lag, has_target) = (seen_cols[4], seen_cols[5]);
    if let Some(k) = seen_cols[..4].iter().position(|s| !s) {
        return Err(err(
            1,
            COLUMNS[k],
            "",
            format!("missing column (expected exactly {})", COLUMNS.join(",")),
        ));
    }
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut sequences: Vec<UserSequence> = Vec::new();
    let mut first_line: HashMap<(usize, i64), usize> = HashMap::new();
    let mut expected = 2;
    let mut record = csv::StringRecord::new();
    loop {
        match reader.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                let line = e.position().map_or(expected, |p| line_of(p.byte()));
                return Err(match e.kind() {
                    csv::ErrorKind::Utf8 { .. } => utf8(line),
                    _ => err(line, "", "", e.to_string()),
                });
            }
        }
        let n = record.position().map_or(expected, |p| line_of(p.byte()));
        if n > expected {
            return Err(err(expected, "", "", "empty line".into()));
        }
        expected = n
            + 1
            + record
                .iter()
                .map(|f| f.matches('\n').count())
                .sum::<usize>();
        if record.len() != headers.len() {
            return Err(err(
                n,
                "",
                &record.iter().collect::<Vec<_>>().join(","),
                format!("{} fields, the header has {}", record.len(), headers.len()),
            ));
        }
        let raw: RawRecord = record
            .deserialize(Some(&headers))
            .map_err(|e| err(n, "", "", e.to_string()))?;
        if raw.seq.is_empty() {
            return Err(err(n, "seq", "", "empty sequence id".into()));
        }
        let order: i64 = raw
            .order
            .parse()
            .map_err(|_| err(n, "order", &raw.order, "not an integer".into()))?;
        let item: usize = raw
            .item
            .parse()
            .map_err(|_| err(n, "item", &raw.item, "not a non-negative integer".into()))?;
        let value = parse_value(path, n, &raw.value)?;
        let lag = match &raw.lag {
            Some(l) => l
                .parse()
                .map_err(|_| err(n, "lag", l, "not a non-negative integer".into()))?,
            None => 0,
        };
        let target = match raw.target.as_deref() {
            None => None,
            Some("1") => Some(true),
            Some("0") => Some(false),
            Some(t) => {
                return Err(err(
                    n,
                    "target",
                    t,
                    "must be 1 (target) or 0 (context only)".into(),
                ))
            }
        };
        let s = *index.entry(raw.seq.clone()).or_insert_with(|| {
            sequences.push(UserSequence {
                id: raw.seq.clone(),
                rows: Vec::new(),
            });
            sequences.len() - 1
        });
        if let Some(first) = first_line.insert((s, order), n) {
            return Err(err(
                n,
                "order",
                &raw.order,
                format!(
                    "duplicate key (seq `{}`, order {order}), first at line {first}",
                    raw.seq
                ),
            ));
        }
        sequences[s].rows.push(UserRow {
            order,
            item,
            value,
            lag,
            target,
            line: n,
        });
    }
    if sequences.is_empty() {
        return Err(err(1, "", "", "no data rows after the header".into()));
    }
    for s in &mut sequences {
        s.rows.sort_by_key(|r| r.order);
    }
    Ok(UserTable {
        file: path.to_path_buf(),
        sequences,
        has_lag,
        has_target,
    })
}

/// The first blank line (empty or whitespace only) outside quoted fields, if any; the end of
/// the file after a final newline is not a line. The csv crate skips blank lines silently
/// (and leaves them out of its line count), so they are found here first.
fn first_blank_line(bytes: &[u8]) -> Option<usize> {
    let (mut in_quotes, mut line, mut start) = (false, 1, 0);
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'"' => in_quotes = !in_quotes,
            b'\n' if !in_quotes => {
                if bytes[start..i].iter().all(u8::is_ascii_whitespace) {
                    return Some(line);
                }
                line += 1;
                start = i + 1;
            }
            b'\n' => line += 1,
            _ => {}
        }
    }
    (start < bytes.len() && bytes[start..].iter().all(u8::is_ascii_whitespace)).then_some(line)
}

/// The `value` field: a number (`not a number` otherwise), finite (NaN and ±∞ are not data),
/// and finite in f32 ([`parse_real`]).
fn parse_value(path: &Path, line: usize, raw: &str) -> Result<f64, DataError> {
    let err = |why: &str| DataError::parse(path, line, "value", raw, why);
    let v: f64 = raw.parse().map_err(|_| err("not a number"))?;
    if !v.is_finite() {
        return Err(err("NaN and infinite values are not allowed"));
    }
    parse_real(path, line, "value", raw)
}
