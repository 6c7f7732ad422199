//! The one CSV reader of the loaders (Instacart, temperature, item-feature tables): a fixed
//! header, then records of exactly that many fields, each error naming file, line and field;
//! the line numbers of all CSV readers ([`LineIndex`]); and the blank lines every CSV reader
//! refuses ([`first_blank_line`]); and one record read back by its line, for a
//! message that quotes a field as written ([`header_and_record`]).

use crate::DataError;
use std::io::BufRead;
use std::path::Path;

/// One data record: its 1-based line (the header is line 1) and its fields, trimmed.
pub(crate) type Record = (usize, Vec<String>);

/// Reads `path` as comma-separated values with RFC 4180 quoting. The header must be exactly
/// `want` (fields trimmed); every record must have `want.len()` fields; there must be at
/// least one record; and no line may be blank, as in the data CSV (the csv crate would skip it
/// silently). Errors: [`DataError::Io`] if the file cannot be opened, otherwise
/// [`DataError::Parse`] naming the line and the field (the header, the first missing column,
/// the column holding invalid UTF-8, none for a blank line, or the whole file when it has no
/// record).
pub(crate) fn read_records(path: &Path, want: &[&str]) -> Result<Vec<Record>, DataError> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    match first_blank_line(&bytes) {
        Some(1) => Err(DataError::parse(
            path,
            1,
            "header",
            "",
            format!("empty file: expected the header {}", want.join(",")),
        )),
        Some(line) => Err(DataError::parse(path, line, "", "", "empty line")),
        None => records_of(path, &bytes, want),
    }
}

/// [`read_records`] of the contents `bytes` of `path`.
pub(crate) fn records_of(
    path: &Path,
    bytes: &[u8],
    want: &[&str],
) -> Result<Vec<Record>, DataError> {
    let lines = LineIndex::new(bytes);
    let mut r = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(bytes);
    let h = r
        .headers()
        .map_err(|e| csv_error(path, 1, want, &lines, e))?
        .clone();
    if h.iter().map(str::trim).collect::<Vec<_>>() != want {
        return Err(DataError::parse(
            path,
            1,
            "header",
            &h.iter().collect::<Vec<_>>().join(","),
            format!("expected the header {}", want.join(",")),
        ));
    }
    let mut out: Vec<Record> = Vec::new();
    for rec in r.records() {
        let after = out.last().map_or(2, |x| x.0 + 1);
        let rec = rec.map_err(|e| csv_error(path, after, want, &lines, e))?;
        let line = rec.position().map_or(after, |p| lines.line_of(p.byte()));
        if rec.len() != want.len() {
            let (field, what) = match want.get(rec.len()) {
                Some(missing) => (*missing, format!("`{missing}` is missing")),
                None => (
                    want[want.len() - 1],
                    format!("unexpected text after `{}`", want[want.len() - 1]),
                ),
            };
            return Err(DataError::parse(
                path,
                line,
                field,
                &rec.iter().collect::<Vec<_>>().join(","),
                format!(
                    "expected {} fields ({}), found {}: {what}",
                    want.len(),
                    want.join(","),
                    rec.len()
                ),
            ));
        }
        out.push((line, rec.iter().map(|s| s.trim().to_string()).collect()));
    }
    if out.is_empty() {
        return Err(DataError::in_file(
            path,
            format!("no data rows after the header {}", want.join(",")),
        ));
    }
    Ok(out)
}

/// A csv-crate error as a [`DataError::Parse`]: its own line if it has one (else `fallback`),
/// and the column name when the error points into a field (invalid UTF-8).
fn csv_error(
    path: &Path,
    fallback: usize,
    names: &[&str],
    lines: &LineIndex,
    e: csv::Error,
) -> DataError {
    let line = e.position().map_or(fallback, |p| lines.line_of(p.byte()));
    let field = match e.kind() {
        csv::ErrorKind::Utf8 { err, .. } => names.get(err.field()).copied().unwrap_or(""),
        _ => "",
    };
    DataError::parse(path, line, field, "", e.to_string())
}

/// Line numbers of byte offsets in a CSV file. The csv crate's own count (`Position::line`)
/// is one short for a record after a blank line and for every record of a CRLF file: a
/// record's position there is the previous terminator's `\n`, or the blank line.
pub(crate) struct LineIndex<'a> {
    /// The file's bytes.
    bytes: &'a [u8],
    /// Offsets of the file's `\n` bytes.
    newlines: Vec<u64>,
}

impl<'a> LineIndex<'a> {
    /// Indexes the newlines of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        let newlines = bytes
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b'\n')
            .map(|(i, _)| i as u64)
            .collect();
        Self { bytes, newlines }
    }

    /// The 1-based line of the record starting at `byte`.
    pub(crate) fn line_of(&self, byte: u64) -> usize {
        // A record position may point at the rest of the previous record's terminator (the
        // `\n` of a CRLF) or at blank lines before the record; it starts after them.
        let mut b = byte as usize;
        while b < self.bytes.len() && matches!(self.bytes[b], b'\r' | b'\n') {
            b += 1;
        }
        self.newlines.partition_point(|&nl| nl < b as u64) + 1
    }
}

/// The first blank line (empty or whitespace only) outside quoted fields, if any; the end of
/// the file after a final newline is not a line. The csv crate skips blank lines silently
/// (and leaves them out of its line count), so they are found here first.
pub(crate) fn first_blank_line(bytes: &[u8]) -> Option<usize> {
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

/// The fields (trimmed) of the header and of the record starting on line `line` (> 1) of the
/// CSV file `path`, with lines numbered as [`LineIndex`] numbers the records read: one more
/// than the `\n` bytes before the record (a CRLF ends a line as an LF does; a quoted field
/// may span lines). The file is streamed up to that record, for a message only: `None` if it
/// cannot be read, is not a regular file (a pipe does not read the same twice), has no record
/// starting on that line, or the record is not valid CSV in UTF-8.
pub(crate) fn header_and_record(path: &Path, line: usize) -> Option<(Vec<String>, Vec<String>)> {
    if line < 2 {
        return None;
    }
    let file = std::fs::File::open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut records = RawRecords {
        input: std::io::BufReader::new(file),
        next_line: 1,
    };
    let (mut header, mut record) = (Vec::new(), Vec::new());
    records.next_record(&mut header)?;
    loop {
        let at = records.next_record(&mut record)?;
        if at == line {
            return Some((fields(&header)?, fields(&record)?));
        }
        if at > line {
            return None;
        }
    }
}

/// The fields (trimmed) of the one CSV record `bytes`.
fn fields(bytes: &[u8]) -> Option<Vec<String>> {
    let mut r = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(bytes);
    let mut rec = csv::StringRecord::new();
    r.read_record(&mut rec).ok()?.then_some(())?;
    Some(rec.iter().map(|f| f.trim().to_string()).collect())
}

/// The records of a CSV file as raw bytes, each with the line it starts on.
struct RawRecords<R> {
    /// The file, read a line at a time.
    input: R,
    /// The line the next record starts on.
    next_line: usize,
}

/// Where a CSV scan is inside a record, as the csv crate reads quotes: only a field that
/// starts with `"` is quoted; inside it `""` is a quote, and a `"` followed by anything else
/// ends the quoting.
#[derive(Clone, Copy, PartialEq)]
enum Scan {
    /// At the start of a field.
    FieldStart,
    /// In an unquoted field (or after a quoted one's closing quote).
    Unquoted,
    /// In a quoted field, where a line break is part of the field.
    Quoted,
    /// After a `"` in a quoted field: an escaped quote or the end of the quoting.
    QuoteInQuoted,
}

impl Scan {
    /// The state after the byte `b`.
    fn step(self, b: u8) -> Scan {
        match (self, b) {
            (Scan::Quoted, b'"') => Scan::QuoteInQuoted,
            (Scan::Quoted, _) => Scan::Quoted,
            (Scan::QuoteInQuoted, b'"') => Scan::Quoted,
            (Scan::FieldStart, b'"') => Scan::Quoted,
            (_, b',' | b'\n' | b'\r') => Scan::FieldStart,
            _ => Scan::Unquoted,
        }
    }
}

impl<R: BufRead> RawRecords<R> {
    /// Reads the next record (its lines, terminators included) into `buf`; returns the line
    /// it starts on, or `None` at the end of the file or on a read error.
    fn next_record(&mut self, buf: &mut Vec<u8>) -> Option<usize> {
        buf.clear();
        let start = self.next_line;
        let mut scan = Scan::FieldStart;
        loop {
            let from = buf.len();
            if self.input.read_until(b'\n', buf).ok()? == 0 {
                return (from > 0).then_some(start);
            }
            self.next_line += 1;
            scan = buf[from..].iter().fold(scan, |s, &b| s.step(b));
            if scan != Scan::Quoted {
                return Some(start);
            }
        }
    }
}
