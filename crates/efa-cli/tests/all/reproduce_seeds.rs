//! `efa reproduce temperature --seeds`: one EFA run per seed, each identical to the run with
//! that `--seed` alone, and a spread (min, median, max) over exactly those runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use efa_testkit::scratch;

fn data() -> PathBuf {
    efa_testkit::paper_data()
}

fn reproduce(out: &Path, extra: &[&str]) -> Output {
    reproduce_from(&data(), out, extra)
}

fn reproduce_from(data: &Path, out: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_efa"))
        .args(["reproduce", "temperature", "--layers", "1", "--epochs", "1"])
        .args(["--threads", "1", "--quiet", "--data"])
        .arg(data)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

fn results(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap()
}

#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn seeds_run_once_each_and_their_spread_is_reported() {
    let dir = scratch::scratch("efa-seeds");
    let (many, one) = (dir.join("many"), dir.join("one"));
    let o = reproduce(&many, &["--model", "efa", "--seeds", "2,0,1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("EFA test MSE over seeds"), "{stdout}");
    let o = reproduce(&one, &["--model", "efa", "--seed", "0"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let (m, s) = (results(&many), results(&one));
    let rows = m["rows"].as_array().unwrap();
    let settings: Vec<&str> = rows
        .iter()
        .map(|r| r["setting"].as_str().unwrap())
        .collect();
    assert_eq!(settings, ["L=1 seed 2", "L=1 seed 0", "L=1 seed 1"]);
    let values: Vec<f64> = rows.iter().map(|r| r["value"].as_f64().unwrap()).collect();
    // The seed-0 run of the sweep is the --seed 0 run, bit for bit.
    assert_eq!(
        values[1].to_bits(),
        s["rows"][0]["value"].as_f64().unwrap().to_bits()
    );
    // Different seeds start from different parameters.
    assert!(
        values[0] != values[1] && values[1] != values[2],
        "{values:?}"
    );

    let spread = &m["analysis"]["efa_seed_spread"][0];
    assert_eq!(spread["setting"], "L=1");
    assert_eq!(spread["seeds"], serde_json::json!([2, 0, 1]));
    let listed: Vec<f64> = spread["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(listed, values);
    let mut sorted = values.clone();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(spread["min"].as_f64().unwrap(), sorted[0]);
    assert_eq!(spread["median"].as_f64().unwrap(), sorted[1]);
    assert_eq!(spread["max"].as_f64().unwrap(), sorted[2]);
    assert_eq!(
        spread["paper"].as_f64().unwrap(),
        rows[0]["paper"].as_f64().unwrap()
    );
    // One epoch is far from the paper's 17.1 °F².
    assert!(sorted[0] > 100.0, "{sorted:?}");
    assert_eq!(spread["within_1pct"], 0);
}

#[test]
fn seeds_without_an_efa_is_a_clear_error() {
    // The arguments are refused before any data is read: an empty directory serves.
    let dir = scratch::scratch("efa-seeds-fm");
    let o = reproduce_from(&dir, &dir.join("out"), &["--model", "fm", "--seeds", "0,1"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--seeds [0, 1]") && err.contains("model = fm runs no EFA"),
        "{err}"
    );
}
