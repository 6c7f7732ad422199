//! The reader of the reference file format (`shared/reference/README.md`): JSON whose numbers
//! are strings (the shortest round-trip decimal, or `"inf"` / `"-inf"`), vectors given as a
//! list or as one bare number, matrices as lists of rows, `null` for a field a family does not
//! define. Built on serde derive; only with the `reference` feature (serde, serde_json and
//! serde_path_to_error), so that the numerics of this crate depend on none of them.
//!
//! [`read_file`] / [`parse`] return every case as a [`RefCase`], each already checked by
//! [`validate_case`] and with no id given twice. Any problem is a [`ReadError`] naming the
//! file, the case (its id when it has one, and its index in `cases`) and the field (a path
//! such as `params.n` or `d2A[1]`).

use super::{validate_case, RefCase};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// A number written as a string: a decimal, `"inf"` or `"-inf"` (Rust's `f64` parser, which
/// rounds correctly and also reads `"nan"` and `"infinity"`).
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(try_from = "String")]
struct Num(f64);

impl TryFrom<String> for Num {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "inf" => Ok(Num(f64::INFINITY)),
            "-inf" => Ok(Num(f64::NEG_INFINITY)),
            _ => s
                .parse()
                .map(Num)
                .map_err(|_| format!("{s:?} is not a number")),
        }
    }
}

/// A vector: a list of number strings, or one number string for a vector of length one.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "expected a number string or a list of number strings"
)]
enum Nums {
    One(Num),
    Many(Vec<Num>),
}

impl Nums {
    fn into_vec(self) -> Vec<f64> {
        match self {
            Nums::One(x) => vec![x.0],
            Nums::Many(v) => v.into_iter().map(|x| x.0).collect(),
        }
    }
}

/// The message of a value that is neither form of [`Nums`] (its `expecting`).
const NUMS_EXPECTED: &str = "expected a number string or a list of number strings";

/// The first element of `v` (a number or nested lists of them) that is not a number string,
/// with its path below `path` and what is wrong with it.
fn first_bad_number(v: &Value, path: &str) -> Option<(String, String)> {
    match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, x)| first_bad_number(x, &format!("{path}[{i}]"))),
        other => Num::deserialize(other)
            .err()
            .map(|e| (path.to_string(), e.to_string())),
    }
}

/// A matrix as a list of rows, flattened row-major.
fn flatten(rows: Vec<Nums>) -> Vec<f64> {
    rows.into_iter().flat_map(Nums::into_vec).collect()
}

/// The fixed parameters of a case; a name not listed here is an error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    n: Option<Num>,
    s2: Option<Num>,
    r: Option<Num>,
    cutpoints: Option<Nums>,
}

/// One case as the file writes it. Required fields are `Option`s too, so that a missing one
/// is reported by name (`missing`) rather than in serde's wording; fields of the format that
/// the check does not use (`A_hp`, `nll_hp`, `comment`) are ignored.
#[derive(Debug, Deserialize)]
struct RawCase {
    id: Option<String>,
    family: Option<String>,
    params: Option<Params>,
    eta: Option<Nums>,
    y: Option<Nums>,
    t: Option<Nums>,
    log_h: Option<Num>,
    #[serde(rename = "A")]
    a: Option<Num>,
    #[serde(rename = "dA")]
    da: Option<Nums>,
    #[serde(rename = "d2A")]
    d2a: Option<Vec<Nums>>,
    nll: Option<Num>,
    dnll: Option<Nums>,
    nll_scale: Option<Num>,
    dnll_scale: Option<Nums>,
    d2nll: Option<Vec<Nums>>,
    dnll_dcutpoints: Option<Nums>,
    probs: Option<Nums>,
    f32_exact_inputs: Option<bool>,
}

/// Which case of the file an error is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseAt {
    /// Position in the `cases` list (from 0).
    pub index: usize,
    /// The case's `id`, when it has one.
    pub id: Option<String>,
}

impl fmt::Display for CaseAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.id {
            Some(id) => write!(f, "case {id} (index {})", self.index),
            None => write!(f, "case at index {}", self.index),
        }
    }
}

/// Why a reference file cannot be used. Displayed as
/// `FILE: case ID (index I): field "PATH": MESSAGE`, leaving out what does not apply.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadError {
    /// The file.
    pub file: PathBuf,
    /// The case, for an error inside one.
    pub case: Option<CaseAt>,
    /// The field within the case (`eta`, `params.n`, `d2A[1]`), when one field is at fault.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file.display())?;
        if let Some(case) = &self.case {
            write!(f, "{case}: ")?;
        }
        if let Some(field) = &self.field {
            write!(f, "field {field:?}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ReadError {}

/// Reads and checks every case of a reference file (see the module docs).
pub fn read_file(file: &Path) -> Result<Vec<RefCase>, ReadError> {
    let text =
        std::fs::read_to_string(file).map_err(|e| file_error(file, format!("cannot read: {e}")))?;
    parse(file, &text)
}

/// Parses and checks the text of a reference file; `file` names it in errors.
pub fn parse(file: &Path, text: &str) -> Result<Vec<RefCase>, ReadError> {
    let doc: Value =
        serde_json::from_str(text).map_err(|e| file_error(file, format!("invalid JSON: {e}")))?;
    let cases = doc
        .get("cases")
        .and_then(Value::as_array)
        .ok_or_else(|| file_error(file, "no \"cases\" list".into()))?;
    if cases.is_empty() {
        return Err(file_error(
            file,
            "the \"cases\" list is empty: nothing to check".into(),
        ));
    }
    let mut seen = BTreeMap::new();
    let mut out = Vec::with_capacity(cases.len());
    for (index, value) in cases.iter().enumerate() {
        let at = CaseAt {
            index,
            id: value.get("id").and_then(Value::as_str).map(str::to_string),
        };
        let err = |field: Option<String>, message: String| ReadError {
            file: file.to_path_buf(),
            case: Some(at.clone()),
            field,
            message,
        };
        let case = case_of(value).map_err(|(field, m)| err(field, m))?;
        if let Some(first) = seen.insert(case.id.clone(), index) {
            return Err(err(None, format!("duplicate id (also at index {first})")));
        }
        validate_case(&case).map_err(|m| err(None, m))?;
        out.push(case);
    }
    Ok(out)
}

fn file_error(file: &Path, message: String) -> ReadError {
    ReadError {
        file: file.to_path_buf(),
        case: None,
        field: None,
        message,
    }
}

/// One case, or the field at fault and what is wrong with it.
fn case_of(value: &Value) -> Result<RefCase, (Option<String>, String)> {
    // (serde would also read a struct from a list, by position.)
    if !value.is_object() {
        return Err((None, format!("expected an object, found {}", short(value))));
    }
    let raw: RawCase = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let at = lookup(value, e.path());
        let message = e.into_inner().to_string();
        let (path, message) = match at {
            // Under the untagged enum serde says only that no form fits: name the first
            // element that is not a number string, or else show the value.
            Some(v) if message == NUMS_EXPECTED => first_bad_number(v, &path)
                .unwrap_or_else(|| (path, format!("{message}; found {}", short(v)))),
            _ => (path, message),
        };
        // The path of an error about the case object itself (not a field) is ".".
        (Some(path).filter(|p| p != "."), message)
    })?;
    let missing = |field: &str| (Some(field.to_string()), "missing".to_string());
    let need = |v: Option<Num>, field: &str| v.map(|x| x.0).ok_or_else(|| missing(field));
    let needs = |v: Option<Nums>, field: &str| v.map(Nums::into_vec).ok_or_else(|| missing(field));
    let params = raw.params.unwrap_or_default();
    let d2nll = match raw.d2nll.map(flatten) {
        Some(v) if v.len() == 1 => Some(v[0]),
        Some(v) => {
            return Err((
                Some("d2nll".into()),
                format!("expected 1x1, found {} values", v.len()),
            ))
        }
        None => None,
    };
    Ok(RefCase {
        id: raw.id.ok_or_else(|| missing("id"))?,
        family: raw.family.ok_or_else(|| missing("family"))?,
        n: params.n.map(|x| x.0),
        s2: params.s2.map(|x| x.0),
        r: params.r.map(|x| x.0),
        cutpoints: params.cutpoints.map(Nums::into_vec).unwrap_or_default(),
        eta: needs(raw.eta, "eta")?,
        y: needs(raw.y, "y")?,
        t: raw.t.map(Nums::into_vec),
        log_h: raw.log_h.map(|x| x.0),
        a: raw.a.map(|x| x.0),
        da: raw.da.map(Nums::into_vec),
        d2a: raw.d2a.map(flatten),
        nll: need(raw.nll, "nll")?,
        dnll: needs(raw.dnll, "dnll")?,
        nll_scale: need(raw.nll_scale, "nll_scale")?,
        dnll_scale: needs(raw.dnll_scale, "dnll_scale")?,
        d2nll,
        dnll_dcutpoints: raw.dnll_dcutpoints.map(Nums::into_vec),
        probs: raw.probs.map(Nums::into_vec),
        f32_exact_inputs: raw.f32_exact_inputs.unwrap_or(false),
    })
}

/// The value at a path inside a case, when the path leads to one.
fn lookup<'v>(value: &'v Value, path: &serde_path_to_error::Path) -> Option<&'v Value> {
    use serde_path_to_error::Segment;
    path.iter().try_fold(value, |v, seg| match seg {
        Segment::Seq { index } => v.get(*index),
        Segment::Map { key } => v.get(key),
        Segment::Enum { .. } | Segment::Unknown => None,
    })
}

/// Compact JSON of a value, cut to 60 characters.
fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(60) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"id": "poisson-ok", "family": "poisson", "params": {}, "eta": ["0.0"], "y": "1.0", "t": ["1.0"], "log_h": "0.0", "A": "1.0", "dA": ["1.0"], "d2A": [["1.0"]], "nll": "1.0", "dnll": ["0.0"], "nll_scale": "1.0", "dnll_scale": ["1.0"], "f32_exact_inputs": true}"#;

    fn file(cases: &[&str]) -> String {
        format!(r#"{{"cases": [{}]}}"#, cases.join(", "))
    }

    fn err(cases: &[&str]) -> ReadError {
        parse(Path::new("ref.json"), &file(cases)).unwrap_err()
    }

    #[test]
    fn reads_numbers_vectors_matrices_and_infinities() {
        let cat = r#"{"id": "cat", "family": "categorical", "params": {}, "eta": ["-inf", "0.0"], "y": "1", "t": ["0.0", "1.0"], "log_h": "0.0", "A": "0.0", "dA": ["0.0", "1.0"], "d2A": [["0.0", "0.0"], ["0.0", "0.0"]], "nll": "0.0", "dnll": ["0.0", "0.0"], "nll_scale": "0.0", "dnll_scale": ["0.0", "0.0"], "A_hp": "0", "comment": "x"}"#;
        let cases = parse(Path::new("ref.json"), &file(&[GOOD, cat])).unwrap();
        assert_eq!(cases[0].y, [1.0]);
        assert_eq!(cases[0].d2a.as_deref(), Some(&[1.0][..]));
        assert!(cases[0].f32_exact_inputs);
        assert_eq!(cases[1].eta, [f64::NEG_INFINITY, 0.0]);
        assert_eq!(cases[1].d2a.as_ref().map(Vec::len), Some(4));
        assert!(!cases[1].f32_exact_inputs);
    }

    #[test]
    fn a_malformed_entry_is_named_by_index_and_field() {
        let bad = GOOD.replacen("poisson-ok", "bad-1", 1).replacen(
            r#""dnll_scale": ["1.0"]"#,
            r#""dnll_scale": ["1.0", 2]"#,
            1,
        );
        let e = err(&[GOOD, &bad]);
        let at = CaseAt {
            index: 1,
            id: Some("bad-1".into()),
        };
        assert_eq!(e.case.as_ref(), Some(&at));
        assert_eq!(e.field.as_deref(), Some("dnll_scale[1]"));
        assert_eq!(
            e.to_string(),
            "ref.json: case bad-1 (index 1): field \"dnll_scale[1]\": invalid type: integer `2`, \
             expected a string"
        );
        // Neither form of a vector: the value is shown.
        let e = err(&[&GOOD.replacen(r#""y": "1.0""#, r#""y": [["1.0"]]"#, 1)]);
        assert_eq!(e.field.as_deref(), Some("y"));
        assert_eq!(e.message, format!(r#"{NUMS_EXPECTED}; found [["1.0"]]"#));
        // A bad number inside the parameters: the path and the value.
        let bad = GOOD.replacen(r#""params": {}"#, r#""params": {"n": "x7"}"#, 1);
        let e = err(&[&bad]);
        assert_eq!(e.field.as_deref(), Some("params.n"));
        assert!(e.message.contains(r#""x7" is not a number"#), "{e}");
        // A row of a matrix.
        let bad = GOOD.replacen(r#"[["1.0"]]"#, r#"[["1.0"], {}]"#, 1);
        assert_eq!(err(&[&bad]).field.as_deref(), Some("d2A[1]"));
        let e = err(&[&GOOD.replacen(r#""eta": ["0.0"]"#, r#""eta": ["abc"]"#, 1)]);
        assert_eq!(e.field.as_deref(), Some("eta[0]"));
        assert_eq!(e.message, r#""abc" is not a number"#);
        // A missing field; a case without an id is named by its index.
        let e = err(&[&GOOD.replacen(r#""nll": "1.0", "#, "", 1)]);
        assert_eq!(
            (e.field.as_deref(), e.message.as_str()),
            (Some("nll"), "missing")
        );
        let e = err(&[GOOD, &GOOD.replacen(r#""id": "poisson-ok", "#, "", 1)]);
        assert_eq!(
            e.to_string(),
            r#"ref.json: case at index 1: field "id": missing"#
        );
        // An unknown parameter, a case that is no object, a wrong boolean.
        let bad = GOOD.replacen(r#""params": {}"#, r#""params": {"k": "2"}"#, 1);
        let e = err(&[&bad]);
        assert!(
            e.field.as_deref() == Some("params.k") && e.message.contains("`k`"),
            "{e}"
        );
        let e = err(&["[1]"]);
        assert_eq!(
            (e.field, e.message.as_str()),
            (None, "expected an object, found [1]")
        );
        let bad = GOOD.replacen(
            r#""f32_exact_inputs": true"#,
            r#""f32_exact_inputs": "yes""#,
            1,
        );
        assert_eq!(err(&[&bad]).field.as_deref(), Some("f32_exact_inputs"));
    }

    #[test]
    fn file_level_and_validation_errors() {
        let p = Path::new("ref.json");
        let msg = |text: &str| parse(p, text).unwrap_err().to_string();
        assert!(msg("{not json").starts_with("ref.json: invalid JSON"));
        assert_eq!(msg(r#"{"set": "x"}"#), r#"ref.json: no "cases" list"#);
        assert!(msg(r#"{"cases": []}"#).contains("empty: nothing to check"));
        assert_eq!(
            err(&[GOOD, GOOD]).to_string(),
            "ref.json: case poisson-ok (index 1): duplicate id (also at index 0)"
        );
        let d2 = GOOD.replacen(r#""d2A": [["1.0"]]"#, r#""d2A": [["1.0", "2.0"]]"#, 1);
        let e = err(&[&d2]);
        assert!(
            e.field.is_none() && e.message.contains("d2A has 2 value(s)"),
            "{e}"
        );
        let e = read_file(Path::new("/nonexistent/ref.json")).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("/nonexistent/ref.json: cannot read"));
    }
}
