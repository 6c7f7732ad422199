//! `efa reproduce all`: every experiment of the paper in one queue, one epoch each here.
//! Checks that every experiment and every run the paper reports is there (counted from
//! docs/paper.md, not from the code), with a finite value and the paper's figure beside it, the
//! temperature seed spreads under both protocols, and each experiment's own outputs.

use std::path::PathBuf;
use std::process::Command;

use efa_testkit::scratch;

fn data() -> PathBuf {
    efa_testkit::paper_data()
}

#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn every_experiment_runs_with_spreads_under_both_protocols() {
    let out = scratch::scratch("efa-all");
    let o = Command::new(env!("CARGO_BIN_EXE_efa"))
        .args(["reproduce", "all", "--epochs", "1", "--spread-seeds", "2"])
        .args(["--clean-seeds", "2", "--threads", "2", "--quiet", "--data"])
        .arg(data())
        .arg("--out")
        .arg(&*out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("wall time"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let exps = json["experiments"].as_array().unwrap();
    let names: Vec<&str> = exps
        .iter()
        .map(|e| e["experiment"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "synthetic",
            "movielens-items",
            "movielens-ratings-v1",
            "movielens-ratings-v2",
            "instacart",
            "temperature-lag0",
            "temperature-lag1",
            "temperature-lag2",
            "temperature-lag0-clean",
        ]
    );
    // docs/paper.md: synthetic, MovieLens items, both rating variants and Instacart each have
    // EFA and FM in both directions (4 rows); temperature without lags has L = 1, 2, 4 (here
    // two seeds each) and the FM at 12 values of k; each lag model is one EFA.
    let rows: Vec<usize> = exps
        .iter()
        .map(|e| e["rows"].as_array().unwrap().len())
        .collect();
    assert_eq!(rows, [4, 4, 4, 4, 4, 3 * 2 + 12, 1, 1, 3 * 2 + 12]);
    for e in exps {
        let name = e["experiment"].as_str().unwrap();
        for r in e["rows"].as_array().unwrap() {
            let v = r["value"].as_f64().unwrap();
            assert!(v.is_finite() && v > 0.0, "{name}: {r}");
            assert_eq!(r["epochs"].as_u64(), Some(1), "{name}: {r}");
            // Every run has the paper's figure beside it (docs/paper.md §0).
            assert!(r["paper"].as_f64().is_some(), "{name}: {r}");
        }
        assert!(out.join(name).join("results.json").is_file(), "{name}");
    }
    for (i, protocol) in [(5, "paper"), (8, "clean")] {
        let spreads = exps[i]["analysis"]["efa_seed_spread"].as_array().unwrap();
        let settings: Vec<&str> = spreads
            .iter()
            .map(|s| s["setting"].as_str().unwrap())
            .collect();
        assert_eq!(settings, ["L=1", "L=2", "L=4"], "{protocol}");
        for s in spreads {
            let (min, med, max) = (
                s["min"].as_f64().unwrap(),
                s["median"].as_f64().unwrap(),
                s["max"].as_f64().unwrap(),
            );
            assert!(min <= med && med <= max, "{protocol}: {s}");
            assert_eq!(s["values"].as_array().unwrap().len(), 2, "{protocol}: {s}");
        }
    }
}
