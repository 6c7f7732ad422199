//! What `efa audit` is asked to audit: `--config` with `--model` must name one model, and
//! the audit's own settings are bounded. Each refusal is an error (exit 2) naming the file,
//! field or flag, before any work; a forced `--plan` that audits nothing is an error too.

use std::path::{Path, PathBuf};

use efa_testkit::scratch;

use crate::common;
use crate::sizes::fails;
use common::{efa, fixture, s};

/// `efa_poisson.toml` with `from` replaced by `to`, written to `dir/name`.
fn edited(dir: &Path, name: &str, from: &str, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(fixture("efa_poisson.toml")).unwrap();
    assert!(text.contains(from), "{from}");
    let p = dir.join(name);
    std::fs::write(&p, text.replace(from, to)).unwrap();
    p
}

/// Runs `efa train --config cfg --data data --out out --quiet` with `extra` and checks it
/// succeeded.
pub(crate) fn trained(cfg: &Path, data: &Path, out: &Path, extra: &[&str]) {
    let args = [
        "train",
        "--config",
        s(cfg),
        "--data",
        s(data),
        "--out",
        s(out),
        "--quiet",
    ];
    let o = efa(&[&args[..], extra].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn an_audit_at_trained_weights_needs_the_models_own_config() {
    // With --model, --config was not read at all: a missing file, or the configuration of
    // another model, audited the model file's own configuration with exit 0, titled with
    // the --config path.
    let dir = scratch::scratch("efa-audit-config");
    let (cfg, data) = (fixture("efa_poisson.toml"), fixture("counts_train.csv"));
    let run = dir.join("run");
    trained(&cfg, &data, &run, &[]);
    let model = run.join("model.safetensors");
    let audit = |config: &Path| {
        efa(&[
            "audit",
            "--config",
            s(config),
            "--data",
            s(&data),
            "--model",
            s(&run),
        ])
    };
    let missing = dir.join("missing.toml");
    fails(
        &audit(&missing),
        &format!(
            "{}: cannot read: No such file or directory",
            missing.display()
        ),
        "",
    );
    let fm = fixture("fm_gaussian.toml");
    fails(
        &audit(&fm),
        &format!(
            "{}: metadata `efa.config`: field `model.efa`: the model's and {}'s differ; \
             --model must hold a model trained with --config",
            model.display(),
            fm.display()
        ),
        "",
    );
    let heads = edited(&dir, "heads.toml", "heads = 2", "heads = 1");
    fails(
        &audit(&heads),
        &format!(
            "{}: metadata `efa.config`: field `model.efa.heads`: 2 in the model, 1 in {}",
            model.display(),
            heads.display()
        ),
        "",
    );
    let family = edited(
        &dir,
        "family.toml",
        "kind = \"poisson\"",
        "kind = \"negative_binomial\"\nr = 2.0",
    );
    fails(
        &audit(&family),
        &format!(
            "{}: metadata `efa.config`: field `family.kind`: \"poisson\" in the model, \
             \"negative_binomial\" in {}",
            model.display(),
            family.display()
        ),
        "",
    );
    // Training settings do not change what is audited.
    let lr = edited(&dir, "lr.toml", "lr = 0.01", "lr = 0.02");
    let o = audit(&lr);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("efa (trained weights)") && out.contains("all gradients agree"),
        "{out}"
    );
}

#[test]
fn audit_settings_out_of_range_are_errors_naming_the_flag() {
    let (cfg, data) = (fixture("efa_poisson.toml"), fixture("counts_train.csv"));
    let too_many = (crate::sizes::max_threads() + 1).to_string();
    let threads = format!("--threads {too_many}: at most");
    let cases: [(&[&str], &str); 5] = [
        // No random direction: the parameters above --max-full were reported as passed with
        // nothing compared.
        (
            &["--directions", "0"],
            "--directions 0: must be in 1..=10000",
        ),
        // 10¹² directions were drawn at once: it aborted on allocation.
        (
            &["--directions", "1000000000000", "--max-full", "0"],
            "--directions 1000000000000: must be in 1..=10000",
        ),
        // Any thread count was accepted (and unused) without --precision, and refused with
        // it as "field `threads`".
        (&["--threads", &too_many], &threads),
        (&["--precision", "--threads", &too_many], &threads),
        (&["--threads", "0"], "--threads must be at least 1"),
    ];
    for (extra, msg) in cases {
        let mut args = vec!["audit", "--config", s(&cfg), "--data", s(&data)];
        args.extend(extra);
        fails(&efa(&args), msg, "");
    }
    // Training the weights for 10¹² epochs (with as much patience) ran without end.
    let o = efa(&[
        "audit",
        "synthetic",
        "--users",
        "8",
        "--precision",
        "--weights",
        "trained",
        "--train-epochs",
        "1000000000000",
    ]);
    fails(&o, "--train-epochs 1000000000000: must be in 1..=1000", "");
}

#[test]
fn a_forced_plan_that_audits_nothing_is_an_error() {
    // `--plan` on a factor model (one forward) was dropped without a word, with `--config` or
    // an experiment's factor models alone; and a precision audit whose forced plan applied to
    // no model listed it as skipped and exited 0: the plan asked about was never audited.
    let data = fixture("counts_train.csv");
    let fm = fixture("fm_gaussian.toml");
    for extra in [&[][..], &["--precision"][..]] {
        let mut args = vec!["audit", "--config", s(&fm), "--data", s(&data)];
        args.extend(["--plan", "tabled"]);
        args.extend_from_slice(extra);
        fails(
            &efa(&args),
            &format!(
                "--plan tabled: forward plans are the EFA model's; {} is a factor model (FM)",
                fm.display()
            ),
            "",
        );
    }
    // The one-block model with padding takes neither query-stream (causal only) nor
    // two-block-fold (two blocks).
    let cfg = fixture("efa_poisson.toml");
    for (plan, why) in [
        ("query-stream", "it needs direction = causal"),
        ("two-block-fold", "it needs layers = 2, the model has 1"),
    ] {
        let args = ["audit", "--config", s(&cfg), "--data", s(&data)];
        let o = efa(&[&args[..], &["--precision", "--plan", plan]].concat());
        fails(
            &o,
            &format!("--plan {plan}: the plan applies to none of the models audited ("),
            why,
        );
    }
    // An experiment's factor models alone (`--model fm`) run their one forward, not the plan.
    let args = ["audit", "synthetic", "--users", "40", "--model", "fm"];
    fails(
        &efa(&[&args[..], &["--plan", "tabled"]].concat()),
        "--plan tabled: the plan applies to none of the models audited (",
        "a factor model has a single forward (plan `general`)",
    );
    // A plan that applies still audits (and passes).
    let args = ["audit", "--config", s(&cfg), "--data", s(&data)];
    let o = efa(&[&args[..], &["--precision", "--plan", "tabled"]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_trained_model_with_continuous_inputs_is_audited_without_its_item_table() {
    // Once --config was read with --model, a configuration whose site table comes from an
    // item-feature table needed --items again, where `efa evaluate` takes the model's stored
    // table: "field `model.efa.continuous.sites`: the item-feature table is missing".
    let dir = scratch::scratch("efa-audit-sites");
    let text = std::fs::read_to_string(fixture("mixed_sites.toml")).unwrap();
    assert!(text.contains("max_epochs = 150"));
    let cfg = dir.join("sites.toml");
    std::fs::write(&cfg, text.replace("max_epochs = 150", "max_epochs = 1")).unwrap();
    let (items, data) = (
        fixture("mixed_sites_items.csv"),
        fixture("mixed_sites_train.csv"),
    );
    let run = dir.join("run");
    trained(&cfg, &data, &run, &["--items", s(&items)]);
    let audit = [
        "audit",
        "--config",
        s(&cfg),
        "--data",
        s(&data),
        "--model",
        s(&run),
    ];
    for extra in [&[][..], &["--items", s(&items)][..]] {
        let o = efa(&[&audit[..], &["--batch", "2"], extra].concat());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}
