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

use crate::csvfile::{first_blank_line, LineIndex};
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
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    if let Some(line) = first_blank_line(&bytes) {
        return Err(if line == 1 {
            empty_file(path)
        } else {
            DataError::parse(path, line, "", "", "empty line")
        });
    }
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(bytes.as_slice());
    let headers = reader.headers().map_err(|_| not_utf8(path, 1))?.clone();
    let (has_lag, has_target) = read_header(path, &headers)?;
    let lines = LineIndex::new(&bytes);
    let sequences = read_records(path, &mut reader, &headers, &lines)?;
    assemble(path, sequences, has_lag, has_target)
}

/// The error of a file without a header.
fn empty_file(path: &Path) -> DataError {
    DataError::parse(
        path,
        1,
        "header",
        "",
        format!("empty file: expected the header `{}`", COLUMNS.join(",")),
    )
}

/// The error of a line that is not valid UTF-8.
fn not_utf8(path: &Path, line: usize) -> DataError {
    DataError::parse(path, line, "", "", "the line is not valid UTF-8")
}

/// Checks the header's column names; returns whether it has the `lag` and `target` columns.
fn read_header(path: &Path, headers: &csv::StringRecord) -> Result<(bool, bool), DataError> {
    let err = |field: &str, value: &str, why: String| DataError::parse(path, 1, field, value, why);
    if headers.is_empty() || headers.iter().all(str::is_empty) {
        return Err(empty_file(path));
    }
    let mut seen_cols = [false; 6];
    let all: Vec<&str> = COLUMNS.iter().chain(&OPTIONAL_COLUMNS).copied().collect();
    for name in headers.iter() {
        match all.iter().position(|c| *c == name) {
            Some(k) if !seen_cols[k] => seen_cols[k] = true,
            Some(_) => return Err(err(name, name, "duplicate column".into())),
            None => {
                return Err(err(
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
    if let Some(k) = seen_cols[..4].iter().position(|s| !s) {
        return Err(err(
            COLUMNS[k],
            "",
            format!("missing column (expected exactly {})", COLUMNS.join(",")),
        ));
    }
    Ok((seen_cols[4], seen_cols[5]))
}

/// Reads the records after the header, in file order, into sequences in order of first
/// appearance.
fn read_records(
    path: &Path,
    reader: &mut csv::Reader<&[u8]>,
    headers: &csv::StringRecord,
    lines: &LineIndex,
) -> Result<Vec<UserSequence>, DataError> {
    let err = |line: usize, value: &str, why: String| DataError::parse(path, line, "", value, why);
    let mut grouped = Grouped::default();
    let mut expected = 2;
    let mut record = csv::StringRecord::new();
    loop {
        match reader.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                let line = e.position().map_or(expected, |p| lines.line_of(p.byte()));
                return Err(match e.kind() {
                    csv::ErrorKind::Utf8 { .. } => not_utf8(path, line),
                    _ => err(line, "", e.to_string()),
                });
            }
        }
        let n = record
            .position()
            .map_or(expected, |p| lines.line_of(p.byte()));
        if n > expected {
            return Err(err(expected, "", "empty line".into()));
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
                &record.iter().collect::<Vec<_>>().join(","),
                format!("{} fields, the header has {}", record.len(), headers.len()),
            ));
        }
        let raw: RawRecord = record
            .deserialize(Some(headers))
            .map_err(|e| err(n, "", e.to_string()))?;
        let row = parse_row(path, n, &raw)?;
        grouped.push(path, &raw, row)?;
    }
    Ok(grouped.sequences)
}

/// The observation of the record `raw` on line `n`, every field checked.
fn parse_row(path: &Path, n: usize, raw: &RawRecord) -> Result<UserRow, DataError> {
    let err = |field: &str, value: &str, why: &str| DataError::parse(path, n, field, value, why);
    if raw.seq.is_empty() {
        return Err(err("seq", "", "empty sequence id"));
    }
    let order: i64 = raw
        .order
        .parse()
        .map_err(|_| err("order", &raw.order, "not an integer"))?;
    let item: usize = raw
        .item
        .parse()
        .map_err(|_| err("item", &raw.item, "not a non-negative integer"))?;
    let value = parse_value(path, n, &raw.value)?;
    let lag = match &raw.lag {
        Some(l) => l
            .parse()
            .map_err(|_| err("lag", l, "not a non-negative integer"))?,
        None => 0,
    };
    let target = match raw.target.as_deref() {
        None => None,
        Some("1") => Some(true),
        Some("0") => Some(false),
        Some(t) => return Err(err("target", t, "must be 1 (target) or 0 (context only)")),
    };
    Ok(UserRow {
        order,
        item,
        value,
        lag,
        target,
        line: n,
    })
}

/// Rows grouped by sequence, in order of first appearance.
#[derive(Default)]
struct Grouped {
    /// Index of each sequence id in `sequences`.
    index: HashMap<String, usize>,
    /// The sequences, rows in file order.
    sequences: Vec<UserSequence>,
    /// The line of each (sequence, order) key.
    first_line: HashMap<(usize, i64), usize>,
}

impl Grouped {
    /// Adds `row` (from the record `raw`) to its sequence; a repeated `(seq, order)` key is an
    /// error.
    fn push(&mut self, path: &Path, raw: &RawRecord, row: UserRow) -> Result<(), DataError> {
        let s = *self.index.entry(raw.seq.clone()).or_insert_with(|| {
            self.sequences.push(UserSequence {
                id: raw.seq.clone(),
                rows: Vec::new(),
            });
            self.sequences.len() - 1
        });
        if let Some(first) = self.first_line.insert((s, row.order), row.line) {
            return Err(DataError::parse(
                path,
                row.line,
                "order",
                &raw.order,
                format!(
                    "duplicate key (seq `{}`, order {}), first at line {first}",
                    raw.seq, row.order
                ),
            ));
        }
        self.sequences[s].rows.push(row);
        Ok(())
    }
}

/// The table of the sequences read: an error without rows, else each sequence's rows sorted
/// by `order`.
fn assemble(
    path: &Path,
    mut sequences: Vec<UserSequence>,
    has_lag: bool,
    has_target: bool,
) -> Result<UserTable, DataError> {
    if sequences.is_empty() {
        return Err(DataError::parse(
            path,
            1,
            "",
            "",
            "no data rows after the header",
        ));
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
