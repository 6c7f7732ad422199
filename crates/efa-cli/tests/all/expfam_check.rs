//! `efa expfam check` on the shared reference file (must pass) and on corrupted copies (must
//! fail with a message naming the case).

use std::path::{Path, PathBuf};
use std::process::Command;

fn reference() -> PathBuf {
    efa_testkit::expfam_reference()
}

fn efa(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_efa"))
        .args(args)
        .output()
        .expect("efa runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("efa-expfam-check-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
#[ignore = "needs the expfam reference values (EFA_REFERENCE)"]
fn shared_reference_passes_in_table_and_json() {
    let path = reference();
    let (code, out, err) = efa(&["expfam", "check", "--reference", path.to_str().unwrap()]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains("negative_binomial") && out.contains("ordinal_logit"),
        "{out}"
    );
    let (code, out, _) = efa(&[
        "expfam",
        "check",
        "--reference",
        path.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON report");
    assert_eq!(v["cases"], 146);
    assert_eq!(v["passed"], true);
    assert_eq!(v["failed"], 0);
    let f64_cases: u64 = v["families"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["precision"] == "f64")
        .map(|f| f["passed"].as_u64().unwrap())
        .sum();
    assert_eq!(f64_cases, 146);
}

/// A copy keeping two cases (`poisson-p08`, `bernoulli-p17`) with `poisson-p08`'s nll changed.
fn corrupted_copy(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(reference()).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = doc["cases"].as_array_mut().unwrap();
    cases.retain(|c| c["id"] == "poisson-p08" || c["id"] == "bernoulli-p17");
    for c in cases.iter_mut() {
        if c["id"] == "poisson-p08" {
            c["nll"] = serde_json::json!("1.6100412976871003");
        }
    }
    let path = dir.join("corrupted.json");
    std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
    path
}

#[test]
#[ignore = "needs the expfam reference values (EFA_REFERENCE)"]
fn corrupted_value_fails_naming_the_case() {
    let dir = temp_dir("value");
    let path = corrupted_copy(&dir);
    let (code, out, err) = efa(&["expfam", "check", "--reference", path.to_str().unwrap()]);
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("FAIL poisson-p08 [f64] nll"), "{out}");
    assert!(err.contains("poisson-p08"), "{err}");
    let (code, out, _) = efa(&[
        "expfam",
        "check",
        "--reference",
        path.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["passed"], false);
    assert_eq!(v["failures"][0]["id"], "poisson-p08");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn malformed_file_names_file_case_and_field() {
    let dir = temp_dir("malformed");
    let path = dir.join("bad.json");
    std::fs::write(
        &path,
        r#"{"cases": [{"id": "poisson-x1", "family": "poisson", "params": {}, "eta": ["abc"]}]}"#,
    )
    .unwrap();
    let (code, _, err) = efa(&["expfam", "check", "--reference", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad.json") && err.contains("poisson-x1") && err.contains("eta"),
        "{err}"
    );
    std::fs::write(&path, "{not json").unwrap();
    let (code, _, err) = efa(&["expfam", "check", "--reference", path.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("invalid JSON"), "{err}");
    let (code, _, err) = efa(&["expfam", "check", "--reference", "/nonexistent/ref.json"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/ref.json"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A hand-written valid case: Poisson with η = 0, y = 1, so A = e⁰ = 1, ∇A = ∇²A = 1,
/// t = 1, log h = −ln 1! = 0, nll = A − yη − log h = 1, ∂nll/∂η = e⁰ − 1 = 0.
const GOOD: &str = r#"{"id": "poisson-ok", "family": "poisson", "params": {}, "eta": ["0.0"], "y": "1.0", "t": ["1.0"], "log_h": "0.0", "A": "1.0", "dA": ["1.0"], "d2A": [["1.0"]], "nll": "1.0", "dnll": ["0.0"], "nll_scale": "1.0", "dnll_scale": ["1.0"], "f32_exact_inputs": true}"#;

/// Writes `body` to `dir/name` and runs the check on it.
fn check_file(dir: &Path, name: &str, body: &str) -> (i32, String, String) {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    efa(&["expfam", "check", "--reference", path.to_str().unwrap()])
}

#[test]
fn hand_written_case_passes_and_an_empty_file_fails() {
    let dir = temp_dir("empty");
    let (code, out, err) = check_file(&dir, "good.json", &format!(r#"{{"cases": [{GOOD}]}}"#));
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains("(1 cases)") && out.contains("poisson"),
        "{out}"
    );
    for body in [r#"{"cases": []}"#, r#"{"set": "x", "cases": [] }"#] {
        let (code, out, err) = check_file(&dir, "empty.json", body);
        assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
        assert!(
            err.contains("empty.json") && err.contains("empty: nothing to check"),
            "{err}"
        );
        assert!(
            !out.contains("family"),
            "no report for an empty file: {out}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn malformed_cases_are_input_errors_naming_case_and_index() {
    let dir = temp_dir("badcase");
    // Each malformed case sits at index 1, after a valid one; the expected words of the error.
    let renamed = || GOOD.replacen("poisson-ok", "bad-1", 1);
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            renamed().replacen("\"family\": \"poisson\"", "\"family\": \"poison\"", 1),
            vec!["unknown family", "\"poison\""],
        ),
        (
            renamed().replacen("\"family\": \"poisson\"", "\"family\": \"gamma\"", 1),
            vec!["eta has 1 value(s), gamma needs 2"],
        ),
        (
            r#"{"id": "bad-1", "family": "multinomial", "params": {"n": "3.0"}, "eta": ["0.0", "0.0", "0.0"], "y": ["1.0", "2.0"], "nll": "1.0", "dnll": ["0.0", "0.0", "0.0"], "nll_scale": "1.0", "dnll_scale": ["1.0", "1.0", "1.0"]}"#.to_string(),
            vec!["y has 2 value(s), multinomial needs 3"],
        ),
        (
            renamed().replacen("\"y\": \"1.0\"", "\"y\": [[\"1.0\"]]", 1),
            vec!["field \"y\"", "expected a number string"],
        ),
        (
            renamed().replacen("\"nll\": \"1.0\", ", "", 1),
            vec!["field \"nll\"", "missing"],
        ),
        (
            renamed().replacen("\"dnll_scale\": [\"1.0\"]", "\"dnll_scale\": [\"1.0\", 2]", 1),
            vec!["field \"dnll_scale[1]\"", "integer `2`, expected a string"],
        ),
        (
            renamed().replacen("\"eta\": [\"0.0\"]", "\"eta\": [\"0.0\", \"1.5x\"]", 1),
            vec!["field \"eta[1]\"", "\"1.5x\" is not a number"],
        ),
        (
            renamed().replacen("\"y\": \"1.0\"", "\"y\": \"-1e-300\"", 1),
            vec!["y[0] = -1e-300", "support"],
        ),
        (
            renamed().replacen("\"params\": {}", "\"params\": {\"n\": \"4.0\"}", 1),
            vec!["params.n is not a parameter of poisson"],
        ),
        (
            GOOD.to_string(),
            vec!["duplicate id", "also at index 0"],
        ),
    ];
    for (case, words) in &cases {
        let body = format!(r#"{{"cases": [{GOOD}, {case}]}}"#);
        let (code, out, err) = check_file(&dir, "bad.json", &body);
        assert_eq!(code, 2, "{case}\nstdout:\n{out}\nstderr:\n{err}");
        let id = if words[0] == "duplicate id" {
            "poisson-ok"
        } else {
            "bad-1"
        };
        assert!(
            err.contains("bad.json") && err.contains(&format!("case {id} (index 1)")),
            "{err}"
        );
        for w in words {
            assert!(err.contains(w), "{err:?} lacks {w:?}");
        }
        assert!(
            !out.contains("FAIL"),
            "an input error is not a numerics failure: {out}"
        );
    }
    // A case without an id is named by its index.
    let body = format!(
        r#"{{"cases": [{GOOD}, {}]}}"#,
        GOOD.replacen("\"id\": \"poisson-ok\", ", "", 1)
    );
    let (code, _, err) = check_file(&dir, "noid.json", &body);
    assert_eq!(code, 2);
    assert!(
        err.contains("case at index 1") && err.contains("\"id\""),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
