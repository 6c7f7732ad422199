//! `efa expfam check` on the shared reference file (must pass) and on corrupted copies (must
//! fail with a message naming the case).

use std::path::{Path, PathBuf};
use std::process::Command;

fn reference() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/expfam_reference.json")
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
