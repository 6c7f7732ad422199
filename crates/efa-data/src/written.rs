//! The fields of a user's file quoted as written, for messages raised after the file was
//! read (a row's checks against the model, a non-finite loss, an item table unlike the
//! training one): a value `1e-50` quoted as parsed would read `0.000…01` (52 characters), an
//! item `+0099` would read `99`. No text is kept per row: the message reads its row's line
//! back from the file (lines numbered as the readers number them) and quotes the field if it
//! still reads as the number parsed; otherwise (a file changed or gone since, a row made in
//! code) the number in its shortest form ([`shortest`]).

use crate::csvfile::header_and_record;
use std::path::Path;

/// The field `column` of the record on line `line` of the CSV file `file` as written there
/// (trimmed), if it reads as `same` would have it (the value parsed from it).
pub fn field(
    file: &Path,
    line: usize,
    column: &str,
    same: impl Fn(&str) -> bool,
) -> Option<String> {
    let (header, record) = header_and_record(file, line)?;
    let k = header.iter().position(|h| h == column)?;
    record.get(k).filter(|f| same(f)).cloned()
}

/// The real `x` read from the field `column` on line `line` of `file`, as written there
/// ([`field`]), else in its shortest form.
pub fn real(file: &Path, line: usize, column: &str, x: f64) -> String {
    field(file, line, column, |t| t.parse::<f64>() == Ok(x)).unwrap_or_else(|| shortest(x))
}

/// The non-negative integer `n` read from the field `column` on line `line` of `file`, as
/// written there ([`field`]; `+0099` for 99), else in decimal.
pub fn integer(file: &Path, line: usize, column: &str, n: usize) -> String {
    field(file, line, column, |t| t.parse::<usize>() == Ok(n)).unwrap_or_else(|| n.to_string())
}

/// `x` in the shortest decimal that reads back as `x` (`42.725`, `0.1`), or in exponent form
/// when that decimal is long and the exponent form shorter (`1e-50`, `1e20`, not their 52 and
/// 21 digits): for a number no file shows as written.
pub fn shortest(x: f64) -> String {
    let (d, e) = (format!("{x}"), format!("{x:e}"));
    if d.len() > 17 && e.len() < d.len() {
        e
    } else {
        d
    }
}
