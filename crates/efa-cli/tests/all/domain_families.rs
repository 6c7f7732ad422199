//! Families with a restricted natural parameter space train from a user's CSV through the
//! link of `efa_model::ops::link`, and `efa predict` reports η in the domain with the
//! family's own mean and variance.

use std::path::PathBuf;
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/train")
        .join(name)
}

#[test]
fn exponential_family_trains_and_predicts_inside_its_domain() {
    let out = std::env::temp_dir().join(format!("efa-domain-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let train = Command::new(env!("CARGO_BIN_EXE_efa"))
        .args(["train", "--quiet", "--config"])
        .arg(fixture("fm_exponential.toml"))
        .arg("--data")
        .arg(fixture("counts_train.csv"))
        .arg("--valid")
        .arg(fixture("counts_valid.csv"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        train.status.success(),
        "{}",
        String::from_utf8_lossy(&train.stderr)
    );
    let pred = Command::new(env!("CARGO_BIN_EXE_efa"))
        .args(["predict", "--model"])
        .arg(&out)
        .arg("--data")
        .arg(fixture("counts_test.csv"))
        .output()
        .unwrap();
    assert!(
        pred.status.success(),
        "{}",
        String::from_utf8_lossy(&pred.stderr)
    );
    let text = String::from_utf8(pred.stdout).unwrap();
    let mut rows = 0;
    for line in text.lines().skip(1) {
        let f: Vec<f64> = line
            .split(',')
            .skip(3)
            .map(|x| x.parse().unwrap())
            .collect();
        let (eta, mean, var) = (f[1], f[2], f[3]);
        // Exponential: η = −λ < 0, mean 1/λ = −1/η, variance 1/λ² = mean².
        assert!(eta < 0.0, "{line}");
        assert!((mean + 1.0 / eta).abs() <= 1e-12 * mean, "{line}");
        assert!((var - mean * mean).abs() <= 1e-12 * var, "{line}");
        rows += 1;
    }
    assert_eq!(rows, 43);
    let _ = std::fs::remove_dir_all(&out);
}
