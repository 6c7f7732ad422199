//! `efa audit`: every run of an experiment and a model of your own data are audited (parameter
//! gradients and every fused op), with the forward plan chosen or forced, as tables or JSON
//! holding every compared value; plans that do not apply and missing inputs are clear errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn efa(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_efa"))
        .args(args)
        .output()
        .unwrap()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/train")
        .join(name)
}

fn json(o: &Output) -> serde_json::Value {
    assert!(
        o.status.success(),
        "{:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("one JSON object")
}

#[test]
fn synthetic_audit_covers_every_run_plan_and_fused_op() {
    let o = efa(&[
        "audit",
        "synthetic",
        "--users",
        "40",
        "--batch",
        "4",
        "--json",
    ]);
    let v = json(&o);
    let models = v["models"].as_array().unwrap();
    let titles: Vec<&str> = models
        .iter()
        .map(|m| m["model"].as_str().unwrap())
        .collect();
    assert_eq!(
        titles,
        [
            "synthetic fm unidirectional",
            "synthetic efa unidirectional",
            "synthetic fm bidirectional",
            "synthetic efa bidirectional"
        ]
    );
    for m in models {
        assert_eq!(m["passed"], true, "{m}");
        assert!(m["loss"].as_f64().unwrap().is_finite());
        // Every compared value is in the JSON: analytic beside numeric, with its location.
        for t in m["params"]["tensors"].as_array().unwrap() {
            let values = t["values"].as_array().unwrap();
            assert_eq!(values.len() as u64, t["checked"].as_u64().unwrap(), "{t}");
            assert!(values
                .iter()
                .all(|x| x["analytic"].is_f64() && x["numeric"].is_f64()));
        }
    }
    // The EFA's plan is the fold; its tape holds attention, gather-sum and linear nodes, each
    // audited on its own.
    let efa = &models[1];
    assert_eq!(efa["plan"], "two-block-fold");
    let ops: Vec<&str> = efa["fused_ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["op"].as_str().unwrap())
        .collect();
    for op in ["attention", "gather_sum", "linear"] {
        assert!(ops.contains(&op), "{ops:?}");
    }
    // The FM has the single general forward.
    assert_eq!(models[0]["plan"], "general");
}

#[test]
fn a_forced_plan_is_audited_or_skipped_with_the_reason() {
    let o = efa(&[
        "audit",
        "synthetic",
        "--users",
        "40",
        "--batch",
        "3",
        "--model",
        "efa",
        "--direction",
        "bi",
        "--plan",
        "general",
        "--json",
    ]);
    let v = json(&o);
    assert_eq!(v["models"][0]["plan"], "general");
    // The query stream needs a causal model: nothing to audit is an error naming the plan.
    let o = efa(&[
        "audit",
        "synthetic",
        "--users",
        "40",
        "--model",
        "efa",
        "--plan",
        "query-stream",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("skipped: forward plan `query-stream` does not apply"),
        "{out}"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with(
            "error: --plan query-stream: the plan applies to none of the models audited ("
        ),
        "{err}"
    );
}

#[test]
fn your_own_model_is_audited_at_initial_or_trained_weights() {
    let cfg = fixture("efa_poisson.toml");
    let data = fixture("counts_train.csv");
    let (cfg, data) = (cfg.to_str().unwrap(), data.to_str().unwrap());
    let o = efa(&["audit", "--config", cfg, "--data", data, "--batch", "5"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("(initial weights)") && out.contains("poisson input 0"),
        "{out}"
    );
    assert!(
        out.contains("all gradients agree with finite differences"),
        "{out}"
    );
    // --config without --data, and no subject at all, are errors.
    let o = efa(&["audit", "--config", cfg]);
    assert_eq!(o.status.code(), Some(2));
    let o = efa(&["audit"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("needs an experiment"));
}
