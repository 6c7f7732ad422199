//! `efa train/evaluate/predict` on fixtures and on malformed copies in a temp dir: results,
//! a crashed run resumed bit for bit, thread-count determinism, and clear errors (exit 2,
//! never a panic) naming file, line and field.

use std::path::Path;
use std::process::{Command, Output};

use efa_testkit::scratch;

use crate::common;
use common::{efa, fixture, s};

fn tmpdir(tag: &str) -> scratch::Scratch {
    scratch::scratch(&format!("efa-rel-{tag}"))
}

fn train(config: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut a = vec![
        "train",
        "--config",
        s(config),
        "--data",
        "",
        "--valid",
        "",
        "--out",
        s(out),
        "--quiet",
    ];
    let (tr, va) = (fixture("counts_train.csv"), fixture("counts_valid.csv"));
    a[4] = s(&tr);
    a[6] = s(&va);
    a.extend_from_slice(extra);
    efa(&a)
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "status {:?}, stderr {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Losses of result.json's history.
fn history(dir: &Path) -> Vec<(u64, u64, u64)> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("result.json")).unwrap()).unwrap();
    v["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["epoch"].as_u64().unwrap(),
                h["train_loss"].as_f64().unwrap().to_bits(),
                h["val_loss"].as_f64().unwrap().to_bits(),
            )
        })
        .collect()
}

#[test]
fn train_evaluate_predict_round_trip() {
    let dir = tmpdir("rt");
    let out = dir.join("m");
    let mut a = vec![];
    let test = fixture("counts_test.csv");
    a.extend(["--test", s(&test)]);
    ok(&train(&fixture("efa_poisson.toml"), &out, &a));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    assert_eq!(r["epochs"], 6);
    assert_eq!(r["train_samples"], 175 - 1);
    let e = efa(&["evaluate", "--model", s(&out), "--data", s(&test)]);
    ok(&e);
    let v: serde_json::Value = serde_json::from_slice(&e.stdout).unwrap();
    assert_eq!(v["samples"], 43);
    assert_eq!(v["family"], "poisson");
    // evaluate reproduces train's test nll bit for bit.
    assert_eq!(
        v["mean_nll"].as_f64().unwrap().to_bits(),
        r["test_nll"].as_f64().unwrap().to_bits()
    );
    let p = efa(&[
        "predict",
        "--model",
        s(&out.join("model.safetensors")),
        "--data",
        s(&test),
    ]);
    ok(&p);
    let text = String::from_utf8(p.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "seq,order,item,value,eta,mean,variance");
    assert_eq!(lines.len(), 44);
    for l in &lines[1..] {
        let f: Vec<f64> = l.split(',').skip(4).map(|x| x.parse().unwrap()).collect();
        // Poisson: mean = variance = e^η.
        assert_eq!(f[1], f[0].exp(), "{l}");
        assert_eq!(f[2], f[1], "{l}");
    }
    // Bidirectional: every row of t0 is a target, in order.
    assert!(lines[1].starts_with("t0,10,"), "{}", lines[1]);
}

/// pred.csv of `efa predict` on the data CSV `csv`, with a model trained on
/// `efa_gaussian_uni.toml` (in a scratch directory named for `tag`).
fn predicted(tag: &str, csv: &str) -> String {
    let dir = tmpdir(tag);
    let out = dir.join("m");
    ok(&train(&fixture("efa_gaussian_uni.toml"), &out, &[]));
    let data = dir.join("data.csv");
    std::fs::write(&data, csv).unwrap();
    let p = efa(&["predict", "--model", s(&out), "--data", s(&data)]);
    ok(&p);
    String::from_utf8(p.stdout).unwrap()
}

#[test]
fn predict_writes_each_value_in_its_shortest_form() {
    // pred.csv wrote the value column as parsed in Rust's positional form: `1e-50` came out
    // as a 52-character decimal and `1E20` as 21 digits. Every number is now the shortest
    // text that reads back as it (the form errors quote a number in when they do not quote
    // the file): exponent form where the decimal is long.
    // No value table: the values are not inputs, only echoed back.
    let text = predicted(
        "shortest",
        "seq,order,item,value\na,1,1,0.5\na,2,2,1e-50\na,3,3,2.50\na,4,4,+3\na,5,5,1E20\n\
         b,1,1,1\nb,2,2,-0.000001\nb,3,3,123456789012345678901234567890\nb,4,4, 0.1 \n",
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "seq,order,item,value,eta,mean,variance");
    // Unidirectional: every row but a sequence's first is a target.
    let heads: Vec<String> = lines[1..]
        .iter()
        .map(|l| l.split(',').take(4).collect::<Vec<_>>().join(","))
        .collect();
    assert_eq!(
        heads,
        [
            "a,2,2,1e-50",
            "a,3,3,2.5",
            "a,4,4,3",
            "a,5,5,1e20",
            "b,2,2,-0.000001",
            "b,3,3,1.2345678901234568e29",
            "b,4,4,0.1",
        ]
    );
    // The predictions: numbers that read back, no longer than an f64's shortest form can be
    // (`-1.2345678901234567e-308`); gaussian_known_var with s2 = 2: mean = 2η, variance 2.
    for l in &lines[1..] {
        let f: Vec<&str> = l.split(',').skip(4).collect();
        assert!(f.iter().all(|x| x.len() <= 24), "{l}");
        let x: Vec<f64> = f.iter().map(|x| x.parse().unwrap()).collect();
        assert_eq!((x[1], f[2]), (2.0 * x[0], "2"), "{l}");
    }
}

#[test]
fn predict_quotes_sequence_ids_that_csv_needs_quoted() {
    // The reader takes any quoted field as a sequence id (RFC 4180); pred.csv wrote it bare,
    // so an id holding a comma, a quote or a line break broke the output's columns and rows.
    let ids = ["a,b", "say \"hi\"", "two\nlines", "plain"];
    let mut csv = String::from("seq,order,item,value\n");
    for (k, id) in ids.iter().enumerate() {
        let field = if k < 3 {
            format!("\"{}\"", id.replace('"', "\"\""))
        } else {
            id.to_string()
        };
        for t in 1..=2 {
            csv.push_str(&format!("{field},{t},{t},{}.5\n", k + t));
        }
    }
    let text = predicted("quoted", &csv);
    // One target per sequence (its second row), each record starting with its id as CSV
    // writes it, followed by the row's order, item and value.
    let want = [
        "\"a,b\",2,2,2.5,",
        "\"say \"\"hi\"\"\",2,2,3.5,",
        "\"two\nlines\",2,2,4.5,",
        "plain,2,2,5.5,",
    ];
    let body = text
        .strip_prefix("seq,order,item,value,eta,mean,variance\n")
        .unwrap_or_else(|| panic!("header: {text}"));
    let mut rest = body;
    for w in want {
        assert!(rest.starts_with(w), "want {w:?} at {rest:?}");
        let tail = &rest[w.len()..];
        let end = tail
            .find('\n')
            .unwrap_or_else(|| panic!("no end of record: {rest:?}"));
        // Then exactly η, mean and variance: nothing of the id spilled into them.
        let nums: Vec<f64> = tail[..end].split(',').map(|x| x.parse().unwrap()).collect();
        assert_eq!(nums.len(), 3, "{rest:?}");
        rest = &tail[end + 1..];
    }
    assert!(rest.is_empty(), "extra records: {rest:?}");
}

#[test]
fn crashed_run_resumes_bit_identically_and_threads_do_not_matter() {
    let dir = tmpdir("crash");
    let cfg = fixture("efa_poisson.toml");
    let (a, b, c) = (dir.join("a"), dir.join("b"), dir.join("c"));
    ok(&train(&cfg, &a, &["--threads", "1"]));
    // The process aborts (SIGABRT, no cleanup) right after epoch 3; the last checkpoint is epoch 2.
    let o = train(
        &cfg,
        &b,
        &[
            "--threads",
            "1",
            "--checkpoint-every",
            "2",
            "--crash-after-epoch",
            "3",
        ],
    );
    assert!(
        !o.status.success() && o.status.code().is_none(),
        "{:?}",
        o.status
    );
    assert!(b.join("checkpoint.safetensors").exists() && !b.join("model.safetensors").exists());
    let o = efa(&[
        "train",
        "--config",
        s(&cfg),
        "--data",
        s(&fixture("counts_train.csv")),
        "--valid",
        s(&fixture("counts_valid.csv")),
        "--resume",
        s(&b),
        "--quiet",
        "--threads",
        "1",
        "--checkpoint-every",
        "2",
    ]);
    ok(&o);
    let model = |d: &Path| std::fs::read(d.join("model.safetensors")).unwrap();
    assert_eq!(model(&a), model(&b));
    assert_eq!(history(&a), history(&b));
    // Two threads and anomaly mode give the same bits as one thread.
    ok(&train(&cfg, &c, &["--threads", "2", "--detect-anomaly"]));
    assert_eq!(model(&a), model(&c));
    assert_eq!(history(&a), history(&c));
    // result.json holds no wall-clock times (they are in timings.json): the same bytes.
    let result = |d: &Path| std::fs::read(d.join("result.json")).unwrap();
    assert_eq!(result(&a), result(&b));
    assert_eq!(result(&a), result(&c));
    let t: serde_json::Value =
        serde_json::from_slice(&std::fs::read(c.join("timings.json")).unwrap()).unwrap();
    assert_eq!(
        (t["ranks"].as_u64(), t["threads_per_rank"].as_u64()),
        (Some(1), Some(2))
    );
    assert!(
        t["runs"][0]["epochs"][0]["seconds"].as_f64().unwrap() > 0.0,
        "{t}"
    );
    // A truncated checkpoint cannot be resumed from.
    let ck = b.join("checkpoint.safetensors");
    let bytes = std::fs::read(&ck).unwrap();
    std::fs::write(&ck, &bytes[..bytes.len() - 100]).unwrap();
    let o = train(&cfg, &dir.join("d"), &["--resume", s(&b)]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(
        err.starts_with(&format!(
            "error: {}: not a valid safetensors file (truncated or corrupt?): ",
            ck.display()
        )),
        "{err}"
    );
}

/// Runs `efa train` on `csv` (training data) with `config` and expects exit 2 and `message`.
fn expect_error(config: &Path, csv: &Path, out: &Path, message: &str) {
    let o = efa(&[
        "train",
        "--config",
        s(config),
        "--data",
        s(csv),
        "--out",
        s(out),
        "--quiet",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "stderr {err}");
    assert_eq!(err.trim_end(), format!("error: {message}"));
}

#[test]
fn malformed_data_is_a_clear_error() {
    let dir = tmpdir("bad");
    let cfg = fixture("efa_poisson.toml");
    let out = dir.join("out");
    let head = "seq,order,item,value\n";
    let cases: &[(&str, String, &str)] = &[
        ("empty", String::new(), "1: field `header`: empty file: expected the header `seq,order,item,value`"),
        ("header_only", head.into(), "1: field ``: no data rows after the header"),
        ("missing_col", "seq,order,item\na,1,2\n".into(), "1: field `value`: missing column (expected exactly seq,order,item,value)"),
        ("extra_col", "seq,order,item,value,x\n".into(), "1: field `x` = \"x\": unknown column (expected exactly seq,order,item,value, and optionally lag,target)"),
        ("fields", format!("{head}a,1,2,3\na,2,2\n"), "3: field `` = \"a,2,2\": 3 fields, the header has 4"),
        ("non_numeric", format!("{head}a,1,2,3\na,2,2,abc\n"), "3: field `value` = \"abc\": not a number"),
        ("nan", format!("{head}a,1,2,NaN\na,2,2,1\n"), "2: field `value` = \"NaN\": NaN and infinite values are not allowed"),
        ("inf", format!("{head}a,1,2,1\na,2,2,inf\n"), "3: field `value` = \"inf\": NaN and infinite values are not allowed"),
        ("order", format!("{head}a,x,2,1\n"), "2: field `order` = \"x\": not an integer"),
        ("item_range", format!("{head}a,1,2,1\na,2,6,1\n"), "3: field `item` = \"6\": item id out of range 1..=5 (the model has 6 item rows, row 0 is padding)"),
        ("item_zero", format!("{head}a,1,0,1\n"), "2: field `item` = \"0\": item id out of range 1..=5 (the model has 6 item rows, row 0 is padding)"),
        ("item_neg", format!("{head}a,1,-3,1\n"), "2: field `item` = \"-3\": not a non-negative integer"),
        ("support", format!("{head}a,1,2,1\na,2,3,-1\n"), "3: field `value` = \"-1\": outside the support of poisson (a non-negative integer count)"),
        ("table", format!("{head}a,1,2,1\na,2,3,8\n"), "3: field `value` = \"8\": the value table (model.efa.values.rows = 10) needs an integer in 0..=7"),
        ("dup", format!("{head}a,1,2,1\nb,1,2,1\na,1,3,1\n"), "4: field `order` = \"1\": duplicate key (seq `a`, order 1), first at line 2"),
        ("len1", format!("{head}a,1,2,1\nb,1,2,1\na,2,3,1\n"), "3: field `seq` = \"b\": sequence `b` has 1 row; at least 2 are needed (a target and its context), or a `target` column marking the row (an EFA target whose context is its own item)"),
        ("too_long", format!("{head}a,1,1,1\na,2,2,1\na,3,3,1\na,4,4,1\na,5,5,1\na,6,1,1\n"), "2: field `seq` = \"a\": sequence `a` has 6 rows but model.efa.positions.max_len is 5"),
        ("blank", format!("{head}a,1,2,1\n\na,2,3,1\n"), "3: field ``: empty line"),
        ("empty_seq", format!("{head},1,2,1\n"), "2: field `seq`: empty sequence id"),
    ];
    for (name, text, msg) in cases {
        let csv = dir.join(format!("{name}.csv"));
        std::fs::write(&csv, text).unwrap();
        expect_error(&cfg, &csv, &out, &format!("{}:{msg}", csv.display()));
    }
    let missing = dir.join("missing.csv");
    expect_error(
        &cfg,
        &missing,
        &out,
        &format!(
            "{}: No such file or directory (os error 2)",
            missing.display()
        ),
    );
}

#[test]
fn bad_configs_and_outputs_are_clear_errors() {
    let dir = tmpdir("cfg");
    let base = std::fs::read_to_string(fixture("efa_poisson.toml")).unwrap();
    let csv = fixture("counts_train.csv");
    let out = dir.join("out");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let p = write(
        "unknown.toml",
        &base.replace("init_seed = 1", "init_seed = 1\nlearning_rate = 3"),
    );
    let o = efa(&[
        "train",
        "--config",
        s(&p),
        "--data",
        s(&csv),
        "--out",
        s(&out),
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(
        err.starts_with(&format!(
            "error: {}: TOML parse error at line 4, column 1",
            p.display()
        )),
        "{err}"
    );
    assert!(err.contains("unknown field `learning_rate`"), "{err}");
    let p = write("shape.toml", &base.replace("out_dim = 1 ", "out_dim = 2 "));
    expect_error(
        &p,
        &csv,
        &out,
        &format!(
            "{}: field `model.efa.out_dim`: 2 but family `poisson` needs 1 natural parameter(s)",
            p.display()
        ),
    );
    let p = write("zero.toml", &base.replace("key_dim = 4", "key_dim = 0"));
    expect_error(
        &p,
        &csv,
        &out,
        &format!(
            "{}: field `model.efa.heads/key_dim`: must be at least 1",
            p.display()
        ),
    );
    let p = write(
        "family.toml",
        &base.replace("kind = \"poisson\"", "kind = \"poisson\"\nn = 3"),
    );
    let o = efa(&[
        "train",
        "--config",
        s(&p),
        "--data",
        s(&csv),
        "--out",
        s(&out),
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8(o.stderr)
        .unwrap()
        .contains("unknown field `n`"));
    // An output "directory" below a regular file cannot be created.
    let file = write("file", "x");
    let bad_out = file.join("sub");
    expect_error(
        &fixture("efa_poisson.toml"),
        &csv,
        &bad_out,
        &format!(
            "{}: cannot create the output directory: Not a directory (os error 20)",
            bad_out.display()
        ),
    );
    // A model file that is not one.
    let o = efa(&["evaluate", "--model", s(&file), "--data", s(&csv)]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(
        err.starts_with(&format!(
            "error: {}: not a valid safetensors file",
            file.display()
        )),
        "{err}"
    );
}

#[test]
fn started_as_several_ranks_without_mpi_it_refuses_at_once() {
    // The launchers' size variables: Open MPI, PMI (MPICH, Slurm's PMI2), Slurm's step.
    let dir = tmpdir("ranks");
    let out = dir.join("out");
    for (var, rank_var) in [
        ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
        ("PMI_SIZE", "PMI_RANK"),
        ("SLURM_STEP_NUM_TASKS", "SLURM_PROCID"),
    ] {
        for rank in ["0", "1"] {
            let o = Command::new(env!("CARGO_BIN_EXE_efa"))
                .args(["train", "--config", s(&fixture("efa_poisson.toml"))])
                .args(["--data", s(&fixture("counts_train.csv")), "--out", s(&out)])
                .env(var, "2")
                .env(rank_var, rank)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{var}: {err}");
            if rank == "0" {
                assert!(
                    err.contains(&format!("started as one of 2 processes ({var}=2)"))
                        && err.contains("--features mpi"),
                    "{var}: {err}"
                );
            } else {
                assert!(err.is_empty(), "rank {rank} stays quiet: {err}");
            }
            assert!(!out.exists(), "nothing written");
        }
    }
    // One process announced as one: it trains.
    let o = Command::new(env!("CARGO_BIN_EXE_efa"))
        .args([
            "train",
            "--config",
            s(&fixture("efa_poisson.toml")),
            "--quiet",
        ])
        .args(["--data", s(&fixture("counts_train.csv")), "--out", s(&out)])
        .env("OMPI_COMM_WORLD_SIZE", "1")
        .output()
        .unwrap();
    ok(&o);
    assert!(out.join("model.safetensors").exists());
}
