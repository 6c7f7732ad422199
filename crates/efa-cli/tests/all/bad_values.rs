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

/// The fixture's model for the two-parameter family `kind` (beta, gamma, gaussian: two
/// outputs, no value embedding) with `edits` applied after.
fn two_parameter_config(dir: &Path, name: &str, kind: &str, edits: &[(&str, &str)]) -> PathBuf {
    let family = format!("kind = \"{kind}\"");
    let mut all = vec![
        ("kind = \"poisson\"", family.as_str()),
        ("out_dim = 1 ", "out_dim = 2 "),
        ("values = { rows = 10, dim = 4 }", ""),
    ];
    all.extend_from_slice(edits);
    config(dir, name, &all)
}

#[test]
fn values_that_round_onto_a_support_bound_in_f32_are_errors_naming_the_line() {
    // 0.9999999999 is inside (0, 1) in f64 but 1 in f32, the dtype training uses; 1e-50 is
    // positive in f64 but 0 in f32. They passed the reader's f64 check and failed inside the
    // loss op, naming neither file nor line ("beta: observation y[0] = 1 at row 1 is outside
    // the support").
    let dir = scratch::scratch("efa-badval-f32");
    let beta = two_parameter_config(
        &dir,
        "beta.toml",
        "beta",
        &[("max_epochs = 6", "max_epochs = 1")],
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
    // The value is quoted as written: "1e-50" was quoted as parsed, "0.000…01" (50 digits).
    let cases = [
        (&beta, "0.9999999999", "1", "beta (0 < y < 1)"),
        (&beta, "1e-50", "0", "beta (0 < y < 1)"),
        (&gamma, "1e-50", "0", "gamma (a finite y > 0)"),
    ];
    for (k, (cfg, value, rounded, support)) in cases.into_iter().enumerate() {
        let bad = dir.join(format!("bad{k}.csv"));
        std::fs::write(
            &bad,
            format!("seq,order,item,value\na,1,2,0.5\na,2,3,{value}\n"),
        )
        .unwrap();
        let message = format!(
            "{}:3: field `value` = \"{value}\": rounds to {rounded} in f32 (the training dtype), \
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

#[test]
fn a_step_to_non_finite_model_outputs_names_the_epoch_batch_and_sample() {
    // lr = 1e30 is a finite positive f32: the first Adam step leaves finite but huge weights,
    // and the next batch's model output is NaN. The loss op refused that η as outside the
    // family's domain, naming neither epoch, batch nor sample ("fused:nll[poisson]: poisson:
    // natural parameter eta[0] = NaN at row 0 is outside the domain").
    let dir = scratch::scratch("efa-badval-step");
    let cfg = config(&dir, "lr.toml", &[("lr = 0.01", "lr = 1e30")]);
    let data = fixture("counts_train.csv");
    let o = efa(&[
        "train",
        "--quiet",
        "--config",
        s(&cfg),
        "--data",
        s(&data),
        "--out",
        s(&dir.join("run")),
    ]);
    let err = fails(
        &o,
        "non-finite value: epoch 1, model output NaN at batch 2 of 11; the first training \
         sample with a non-finite loss at these weights is ",
    );
    assert!(
        err.contains(&format!(
            "{}:2: seq `u0`, item 3, value 1 (family poisson): loss NaN, model output [NaN]",
            data.display()
        )),
        "{err}"
    );
    // Data that drive the weights there: a gamma target of 1e38 (finite in f32). The
    // validation pass (here the training data) meets the NaN first.
    let gamma = two_parameter_config(&dir, "gamma.toml", "gamma", &[]);
    let csv = dir.join("gamma.csv");
    std::fs::write(
        &csv,
        "seq,order,item,value\na,1,2,1\na,2,3,1e38\nb,1,2,1\nb,2,1,1\n",
    )
    .unwrap();
    let o = efa(&[
        "train",
        "--quiet",
        "--config",
        s(&gamma),
        "--data",
        s(&csv),
        "--out",
        s(&dir.join("run")),
    ]);
    let err = fails(&o, "non-finite value: epoch ");
    assert!(err.contains(", validation: model output NaN; the first training sample with a non-finite loss at these weights is "), "{err}");
    assert!(!dir.join("run").join("model.safetensors").exists());
}

#[test]
fn a_validation_test_or_evaluation_loss_that_is_not_finite_is_an_error_naming_the_sample() {
    // A Gaussian target of 1e38 is finite in f32 but its nll is not. As validation data,
    // early stopping never saw an improvement: training "succeeded" with best epoch 0 (the
    // initial weights) and `null` for every validation loss in result.json; as test data or
    // under `efa evaluate`, the mean nll was written as `null` with exit status 0.
    let dir = scratch::scratch("efa-badval-split");
    let cfg = two_parameter_config(&dir, "gaussian.toml", "gaussian", &[]);
    let (train, huge) = (dir.join("train.csv"), dir.join("huge.csv"));
    std::fs::write(
        &train,
        "seq,order,item,value\na,1,2,1\na,2,3,1\nb,1,2,1\nb,2,1,1\nc,1,2,1\nc,2,1,1\n",
    )
    .unwrap();
    std::fs::write(&huge, "seq,order,item,value\na,1,2,1\na,2,3,1e38\n").unwrap();
    // The value as written: it was quoted as parsed, "100000000000000000000000000000000000000".
    let sample = format!(
        "{}:3: seq `a`, item 3, value 1e38 (family gaussian): loss inf, model output [",
        huge.display(),
    );
    let run = |split: &str, out: &Path| {
        efa(&[
            "train",
            "--quiet",
            "--config",
            s(&cfg),
            "--data",
            s(&train),
            split,
            s(&huge),
            "--out",
            s(out),
        ])
    };
    let out = dir.join("valid");
    let err = fails(
        &run("--valid", &out),
        "non-finite value: epoch 1, validation loss inf; the first validation sample with a \
         non-finite loss at these weights is ",
    );
    assert!(err.contains(&sample), "{err}");
    assert!(!out.join("model.safetensors").exists() && !out.join("result.json").exists());
    let out = dir.join("test");
    let err = fails(
        &run("--test", &out),
        &format!(
            "non-finite value: test loss inf over {}; the first test sample with a non-finite \
             loss at these weights is ",
            huge.display()
        ),
    );
    assert!(err.contains(&sample), "{err}");
    assert!(!out.join("result.json").exists());
    // The model trained (and saved before the test split) evaluates finitely elsewhere.
    let o = efa(&["evaluate", "--model", s(&out), "--data", s(&train)]);
    ok(&o);
    let o = efa(&["evaluate", "--model", s(&out), "--data", s(&huge)]);
    let err = fails(
        &o,
        &format!(
            "non-finite value: evaluation loss inf over {}; the first evaluation sample with a \
             non-finite loss at these weights is ",
            huge.display()
        ),
    );
    assert!(err.contains(&sample), "{err}");
}

#[test]
fn an_item_table_unlike_the_training_one_at_item_0_or_lacking_an_item_is_an_error() {
    // Continuous inputs have no padding row, so item 0 is an item like any other: a table
    // giving it other features than training did was accepted (the comparison skipped row
    // 0), and an item the table lacks was reported at line 0 as field `item` = "0". A table
    // with a blank line was read as if the line were not there. A feature is quoted as
    // written: `4.05e1` was quoted as parsed, "40.5".
    let dir = scratch::scratch("efa-badval-items");
    let text = std::fs::read_to_string(fixture("mixed_sites.toml"))
        .unwrap()
        .replace("max_epochs = 150", "max_epochs = 1");
    let cfg = dir.join("sites.toml");
    std::fs::write(&cfg, text).unwrap();
    let (items, run) = (fixture("mixed_sites_items.csv"), dir.join("run"));
    let test = fixture("mixed_sites_test.csv");
    ok(&efa(&[
        "train",
        "--quiet",
        "--config",
        s(&cfg),
        "--items",
        s(&items),
        "--data",
        s(&fixture("mixed_sites_train.csv")),
        "--out",
        s(&run),
    ]));
    let table = std::fs::read_to_string(&items).unwrap();
    assert!(
        !table.lines().any(|l| l.starts_with("0,")),
        "item 0 unlisted"
    );
    let lines = table.lines().count();
    let with0 = dir.join("with0.csv");
    std::fs::write(&with0, format!("{table}0,4.05e1,-100.25\n")).unwrap();
    // A blank line: skipped without a word before, as the data CSV refuses it.
    let blank = dir.join("blank.csv");
    let mut with_blank: Vec<&str> = table.lines().collect();
    with_blank.insert(3, "");
    std::fs::write(&blank, with_blank.join("\n") + "\n").unwrap();
    let without3 = dir.join("without3.csv");
    let kept: Vec<&str> = table.lines().filter(|l| !l.starts_with("3,")).collect();
    std::fs::write(&without3, kept.join("\n") + "\n").unwrap();
    let row3 = table.lines().find(|l| l.starts_with("3,")).unwrap();
    let trained3 = row3
        .split(',')
        .skip(1)
        .map(|x| x.parse::<f64>().unwrap().to_string());
    for cmd in ["evaluate", "predict"] {
        let o = efa(&[
            cmd,
            "--model",
            s(&run),
            "--items",
            s(&with0),
            "--data",
            s(&test),
        ]);
        let err = fails(&o, "");
        assert_eq!(
            err.trim_end(),
            format!(
                "error: {}:{}: field `latitude` = \"4.05e1\": item 0: the model was trained \
                 with 0 here (the item-feature table must be the training one)",
                with0.display(),
                lines + 1
            )
        );
        let o = efa(&[
            cmd,
            "--model",
            s(&run),
            "--items",
            s(&without3),
            "--data",
            s(&test),
        ]);
        let err = fails(&o, "");
        assert_eq!(
            err.trim_end(),
            format!(
                "error: {}: item 3 is not listed, but the model was trained with the features \
                 latitude,longitude = {} for it (the item-feature table must be the training \
                 one)",
                without3.display(),
                trained3.clone().collect::<Vec<_>>().join(",")
            )
        );
        let o = efa(&[
            cmd,
            "--model",
            s(&run),
            "--items",
            s(&blank),
            "--data",
            s(&test),
        ]);
        let err = fails(&o, "");
        assert_eq!(
            err.trim_end(),
            format!("error: {}:4: field ``: empty line", blank.display())
        );
    }
    // The training table itself still matches.
    ok(&efa(&[
        "evaluate",
        "--model",
        s(&run),
        "--items",
        s(&items),
        "--data",
        s(&test),
    ]));
}

#[test]
fn reproduce_refuses_an_output_directory_it_cannot_create_before_the_runs() {
    // The directory was created after every run had trained, so a mistyped --out cost the
    // whole experiment (hours for the paper's data) before the error.
    let dir = scratch::scratch("efa-badval-out");
    let file = dir.join("file");
    std::fs::write(&file, "x").unwrap();
    let out = file.join("sub");
    let o = efa(&[
        "reproduce",
        "synthetic",
        "--users",
        "8",
        "--epochs",
        "1",
        "--quiet",
        "--out",
        s(&out),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.trim_end().ends_with(&format!(
            "error: cannot create output directory {}: Not a directory (os error 20)",
            out.display()
        )),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "no run was trained or reported");
}

#[test]
fn errors_quote_the_fields_of_a_file_as_written() {
    // Fields were quoted as parsed: an item `+0099` as "99", a value `1.0e1` as "10", a lag
    // `01` as "1", an item-table id `0099` as "99".
    let dir = scratch::scratch("efa-badval-written");
    let cfg = config(&dir, "poisson.toml", &[]);
    let out = dir.join("run");
    let train = |csv: &Path, items: Option<&Path>, cfg: &Path| {
        let mut args = vec!["train", "--quiet", "--config", s(cfg), "--data", s(csv)];
        if let Some(t) = items {
            args.extend(["--items", s(t)]);
        }
        args.extend(["--out", s(&out)]);
        efa(&args)
    };
    for (k, (rows, field, written, why)) in [
        (
            "a,1,+0099,1,0\na,2,2,1,0",
            "item",
            "+0099",
            "item id out of range 1..=5",
        ),
        (
            "a,1,2,1.0e1,0\na,2,2,1,0",
            "value",
            "1.0e1",
            "the value table",
        ),
        (
            "a,1,2,1,01\na,2,2,1,0",
            "lag",
            "01",
            "a lag row needs a lag embedding",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let csv = dir.join(format!("bad{k}.csv"));
        std::fs::write(&csv, format!("seq,order,item,value,lag\n{rows}\n")).unwrap();
        fails(
            &train(&csv, None, &cfg),
            &format!(
                "{}:2: field `{field}` = \"{written}\": {why}",
                csv.display()
            ),
        );
    }
    // An item-feature table's id beyond the model's items.
    let sites = std::fs::read_to_string(fixture("mixed_sites.toml"))
        .unwrap()
        .replace("max_epochs = 150", "max_epochs = 1");
    let sites_cfg = dir.join("sites.toml");
    std::fs::write(&sites_cfg, sites).unwrap();
    let table = dir.join("items.csv");
    let text = std::fs::read_to_string(fixture("mixed_sites_items.csv")).unwrap();
    std::fs::write(&table, format!("{text}0099,40.5,-100.25\n")).unwrap();
    let line = text.lines().count() + 1;
    fails(
        &train(&fixture("mixed_sites_train.csv"), Some(&table), &sites_cfg),
        &format!(
            "{}:{line}: field `item` = \"0099\": item id outside 0..=24",
            table.display()
        ),
    );
    assert!(!out.exists(), "nothing was written");
}
