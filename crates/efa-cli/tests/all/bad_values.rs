//! Inputs that pass a first look but not what a command does with them, and outputs it
//! cannot write. Each is an error (exit 2) naming the file, line, field, epoch, sample or
//! directory, before the work it would waste.

use std::path::{Path, PathBuf};
use std::process::Output;

use efa_testkit::scratch;

use crate::common;
use common::{efa, fixture, s};

/// Exit status 2 and standard error starting with `error: {prefix}`; returns standard error.
fn fails(o: &Output, prefix: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.starts_with(&format!("error: {prefix}")), "{err}");
    err
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "{:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `efa_poisson.toml` with `edits` applied (each `(from, to)` must change the text).
fn config(dir: &Path, name: &str, edits: &[(&str, &str)]) -> PathBuf {
    let mut text = std::fs::read_to_string(fixture("efa_poisson.toml")).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "{from}");
        text = text.replace(from, to);
    }
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn values_that_round_onto_a_support_bound_in_f32_are_errors_naming_the_line() {
    // 0.9999999999 is inside (0, 1) in f64 but 1 in f32, the dtype training uses; 1e-50 is
    // positive in f64 but 0 in f32. They passed the reader's f64 check and failed inside the
    // loss op, naming neither file nor line ("beta: observation y[0] = 1 at row 1 is outside
    // the support").
    let dir = scratch::scratch("efa-badval-f32");
    let beta = config(
        &dir,
        "beta.toml",
        &[
            ("kind = \"poisson\"", "kind = \"beta\""),
            ("out_dim = 1 ", "out_dim = 2 "),
            ("values = { rows = 10, dim = 4 }", ""),
            ("max_epochs = 6", "max_epochs = 1"),
        ],
    );
    let gamma = std::fs::read_to_string(&beta)
        .unwrap()
        .replace("kind = \"beta\"", "kind = \"gamma\"");
    let gamma = {
        let p = dir.join("gamma.toml");
        std::fs::write(&p, gamma).unwrap();
        p
    };
    let good = dir.join("good.csv");
    let mut text = String::from("seq,order,item,value\n");
    for k in 0..12 {
        for o in 0..3 {
            text += &format!("s{k},{o},{},0.{}\n", 1 + (k + o) % 5, 1 + (k * o) % 8);
        }
    }
    std::fs::write(&good, text).unwrap();
    let run = dir.join("run");
    let train = |cfg: &Path, csv: &Path| {
        efa(&[
            "train",
            "--quiet",
            "--config",
            s(cfg),
            "--data",
            s(csv),
            "--out",
            s(&run),
        ])
    };
    ok(&train(&beta, &good));
    let tiny = format!("0.{}1", "0".repeat(49));
    let cases = [
        (
            &beta,
            "0.9999999999",
            "0.9999999999",
            "1",
            "beta (0 < y < 1)",
        ),
        (&beta, "1e-50", tiny.as_str(), "0", "beta (0 < y < 1)"),
        (
            &gamma,
            "1e-50",
            tiny.as_str(),
            "0",
            "gamma (a finite y > 0)",
        ),
    ];
    for (k, (cfg, value, shown, rounded, support)) in cases.into_iter().enumerate() {
        let bad = dir.join(format!("bad{k}.csv"));
        std::fs::write(
            &bad,
            format!("seq,order,item,value\na,1,2,0.5\na,2,3,{value}\n"),
        )
        .unwrap();
        let message = format!(
            "{}:3: field `value` = \"{shown}\": rounds to {rounded} in f32 (the training dtype), \
             outside the support of {support}",
            bad.display()
        );
        let o = train(cfg, &bad);
        assert_eq!(fails(&o, "").trim_end(), format!("error: {message}"));
        // The same reader serves a trained model's inputs.
        if cfg == &beta {
            for cmd in ["evaluate", "predict"] {
                let o = efa(&[cmd, "--model", s(&run), "--data", s(&bad)]);
                assert_eq!(
                    fails(&o, "").trim_end(),
                    format!("error: {message}"),
                    "{cmd}"
                );
            }
        }
    }
}
