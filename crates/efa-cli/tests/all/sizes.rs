//! Sizes and degenerate settings a user can hand the binary: huge configuration dims, model
//! files whose metadata claims huge sizes, `efa bench attention` sizes, `--threads`, a long
//! sequence among short ones, `max_epochs = 0`, `reproduce --epochs 0`. Each is a clear
//! error (exit 2) naming the field or flag, never an abort, a panic or a run without end.

use std::path::Path;
use std::process::{Command, Output};

use efa_testkit::scratch;

use crate::common;
use common::{efa, fixture, s};

/// Exit status 2 and standard error starting with `error: {prefix}` and containing `part`.
pub(crate) fn fails(o: &Output, prefix: &str, part: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.starts_with(&format!("error: {prefix}")), "{err}");
    assert!(err.contains(part), "{err}");
}

pub(crate) fn max_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (4 * cores).clamp(4, 1024)
}

#[test]
fn threads_beyond_the_bound_are_errors_for_every_command() {
    let dir = scratch::scratch("efa-sizes-threads");
    let (cfg, csv) = (fixture("efa_poisson.toml"), fixture("counts_train.csv"));
    let out = dir.join("out");
    let too_many = (max_threads() + 1).to_string();
    let msg = format!(
        "--threads {too_many}: at most {} are allowed (4 × the ",
        max_threads()
    );
    let runs: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "train",
                "--config",
                s(&cfg),
                "--data",
                s(&csv),
                "--out",
                s(&out),
            ],
            "",
        ),
        (vec!["evaluate", "--model", s(&out), "--data", s(&csv)], ""),
        (vec!["predict", "--model", s(&out), "--data", s(&csv)], ""),
        (vec!["reproduce", "synthetic", "--users", "8"], ""),
        (vec!["bench", "attention"], "efa bench attention: "),
        (vec!["bench", "train", "synthetic"], "efa bench train: "),
    ];
    for (args, prefix) in runs {
        let mut a = args.clone();
        a.extend(["--threads", &too_many]);
        fails(&efa(&a), &format!("{prefix}{msg}"), "");
    }
    // 2⁶⁴ − 1 threads: the same error, not an attempt to start them.
    let o = efa(&["bench", "attention", "--threads", "18446744073709551615"]);
    fails(
        &o,
        "efa bench attention: --threads 18446744073709551615: at most",
        "",
    );
    assert!(!out.exists(), "nothing was written");
}

#[test]
fn bench_attention_sizes_are_checked_before_allocating() {
    // Overflowing B·H·N·D (it panicked with a shape overflow before).
    let o = efa(&[
        "bench",
        "attention",
        "--batch",
        "4611686018427387904",
        "--heads",
        "4",
    ]);
    fails(
        &o,
        "efa bench attention: --batch 4611686018427387904 × --heads 4 × --len 512 × --dim 64 \
         overflows the largest array",
        "",
    );
    // 8·8·10⁹·64 elements per array: terabytes (it aborted on allocation before).
    let o = efa(&["bench", "attention", "--len", "1000000000"]);
    fails(
        &o,
        "efa bench attention: --batch 8 × --heads 8 × --len 1000000000 × --dim 64 = \
         4096000000000 elements per array needs about 82.4 TB (5 arrays), but ",
        "is available (",
    );
    // Small arrays, endless work: 4·10¹² FLOPs per forward, 22 forwards.
    let o = efa(&[
        "bench",
        "attention",
        "--batch",
        "1",
        "--heads",
        "1",
        "--len",
        "1000000",
        "--dim",
        "1",
    ]);
    fails(
        &o,
        "efa bench attention: --batch 1 × --heads 1 × --len 1000000 × --dim 1 with --reps 20 \
         is about 8.80e13 FLOPs, above the limit of 1e13",
        "",
    );
    // No repetitions (silently run once before), and 10¹⁸ of them on tiny arrays (one kept
    // timing each: it aborted on allocation before).
    for reps in ["0", "1000000000000000000"] {
        let o = efa(&[
            "bench",
            "attention",
            "--batch",
            "1",
            "--heads",
            "1",
            "--len",
            "1",
            "--dim",
            "1",
            "--reps",
            reps,
        ]);
        fails(
            &o,
            &format!("efa bench attention: --reps {reps}: must be in 1..=10000"),
            "",
        );
    }
    let o = efa(&["bench", "train", "synthetic", "--sgemm-size", "100000000"]);
    fails(
        &o,
        "efa bench train: --sgemm-size 100000000: at most 8192",
        "",
    );
}

#[test]
fn huge_config_dims_and_degenerate_settings_are_errors_when_the_config_is_read() {
    let dir = scratch::scratch("efa-sizes-cfg");
    let base = std::fs::read_to_string(fixture("efa_poisson.toml")).unwrap();
    let csv = fixture("counts_train.csv");
    let out = dir.join("out");
    let run = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
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
        (p, o)
    };
    // 10¹² items: it aborted ("memory allocation failed") before.
    let (p, o) = run(
        "items.toml",
        base.replace("items = 6 ", "items = 1000000000000 "),
    );
    fails(
        &o,
        &format!("{}: ", p.display()),
        "field `model.efa.items`: 1000000000000 is beyond the limit",
    );
    // 10⁸ blocks: it ran without end before.
    let (p, o) = run(
        "layers.toml",
        base.replace("layers = 1", "layers = 100000000"),
    );
    fails(
        &o,
        &format!(
            "{}: field `model.efa.layers`: 100000000 blocks; at most 1024 are supported",
            p.display()
        ),
        "",
    );
    // Degenerate settings: errors naming the field, not a later CSV line or a model trained
    // for no epochs.
    let (p, o) = run(
        "epochs.toml",
        base.replace("max_epochs = 6", "max_epochs = 0"),
    );
    fails(
        &o,
        &format!(
            "{}: field `train.max_epochs`: 0 must be at least 1",
            p.display()
        ),
        "",
    );
    let (p, o) = run(
        "categorical.toml",
        base.replace("kind = \"poisson\"", "kind = \"categorical\"\nk = 1"),
    );
    fails(
        &o,
        &format!(
            "{}: field `family.k`: 1 classes; at least 2 are needed",
            p.display()
        ),
        "",
    );
    let (p, o) = run(
        "binomial.toml",
        base.replace("kind = \"poisson\"", "kind = \"binomial\"\nn = 0"),
    );
    fails(
        &o,
        &format!(
            "{}: field `family.n`: 0 trials; at least 1 is needed",
            p.display()
        ),
        "",
    );
    assert!(!out.exists(), "nothing was written");
}

#[test]
fn a_model_without_attention_blocks_is_refused_naming_the_field_and_range() {
    // `layers = 0` trained before: with no attention block a target's representation is its
    // own [MASK] embedding, blind to its context. Every size of the model is at least 1.
    let dir = scratch::scratch("efa-sizes-layers0");
    let base = std::fs::read_to_string(fixture("efa_poisson.toml")).unwrap();
    let csv = fixture("counts_train.csv");
    let out = dir.join("out");
    let p = dir.join("layers0.toml");
    let text = base.replace("layers = 1", "layers = 0");
    assert_ne!(text, base);
    std::fs::write(&p, text).unwrap();
    for cmd in ["train", "audit"] {
        let mut args = vec![cmd, "--config", s(&p), "--data", s(&csv)];
        if cmd == "train" {
            args.extend(["--out", s(&out), "--quiet"]);
        }
        fails(
            &efa(&args),
            &format!(
                "{}: field `model.efa.layers`: 0 blocks; must be in 1..=1024",
                p.display()
            ),
            "",
        );
    }
    // The other sizes of the model keep their refusal.
    for (from, to, field) in [
        ("heads = 2", "heads = 0", "model.efa.heads/key_dim`: must"),
        ("item_dim = 8", "item_dim = 0", "model.efa.item_dim`: must"),
        ("out_dim = 1 ", "out_dim = 0 ", "model.efa.out_dim`: must"),
        (
            "head_hidden = [8]",
            "head_hidden = [0]",
            "model.efa.head_hidden/ffn`: widths must",
        ),
        (
            "max_len = 5",
            "max_len = 0",
            "model.efa.positions.max_len`: must",
        ),
    ] {
        let text = base.replace(from, to);
        assert_ne!(text, base);
        std::fs::write(&p, text).unwrap();
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
        fails(
            &o,
            &format!("{}: field `{field} be at least 1", p.display()),
            "",
        );
    }
    assert!(!out.exists(), "nothing was written");
}

#[test]
fn an_item_count_beyond_the_limit_with_an_item_table_is_refused_before_the_table_is_built() {
    // With `--items`, the site table gets a row per item id of `model.efa.items` before the
    // configuration's sizes were checked: 10¹² items aborted on allocation (24 TB of rows).
    let dir = scratch::scratch("efa-sizes-sites");
    let base = std::fs::read_to_string(fixture("mixed_sites.toml")).unwrap();
    let (items, data) = (
        fixture("mixed_sites_items.csv"),
        fixture("mixed_sites_train.csv"),
    );
    let out = dir.join("out");
    let run = |name: &str, rows: u64, table: &Path, cmd: &str| {
        let p = dir.join(name);
        let text = base.replace("items = 25 ", &format!("items = {rows} "));
        assert_ne!(text, base);
        std::fs::write(&p, text).unwrap();
        let mut args = vec![cmd, "--config", s(&p), "--items", s(table)];
        args.extend(["--data", s(&data)]);
        if cmd == "train" {
            args.extend(["--out", s(&out), "--quiet"]);
        }
        let o = efa(&args);
        (p, o)
    };
    for cmd in ["train", "audit"] {
        let (p, o) = run("huge.toml", 1_000_000_000_000, &items, cmd);
        fails(
            &o,
            &format!(
                "{}: field `model.efa.items`: 1000000000000 is beyond the limit of 268435456",
                p.display()
            ),
            "",
        );
    }
    // Within the limit of one size, but not as a table: 2²⁷ rows × 3 feature columns.
    let wide = dir.join("wide.csv");
    std::fs::write(&wide, "item,a,b,c\n1,0.5,1.5,2.5\n").unwrap();
    let (p, o) = run("wide.toml", 1 << 27, &wide, "train");
    fails(
        &o,
        &format!(
            "{}: field `model.efa.items`: 134217728 item rows × 3 feature columns of {} = \
             402653184 site-table values, beyond the limit of 268435456",
            p.display(),
            wide.display()
        ),
        "",
    );
    assert!(!out.exists(), "nothing was written");
}

/// Rewrites the `efa.config` metadata of a safetensors file with `edit` (the header is
/// re-padded with spaces to a multiple of 8 bytes).
fn edit_config(file: &Path, edit: impl Fn(&mut serde_json::Value)) {
    let bytes = std::fs::read(file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let meta = header["__metadata__"]["efa.config"].as_str().unwrap();
    let mut cfg: serde_json::Value = serde_json::from_str(meta).unwrap();
    edit(&mut cfg);
    header["__metadata__"]["efa.config"] = serde_json::Value::String(cfg.to_string());
    // Re-seal the metadata checksum (`efa.meta_crc32`: CRC-32 over the other non-checksum
    // entries in key order, each as u64-LE length + bytes of key, then of value), so that
    // the size checks, not the integrity check, see the edited configuration.
    let meta = header["__metadata__"].as_object().unwrap().clone();
    let mut keys: Vec<&String> = meta
        .keys()
        .filter(|k| !k.starts_with("efa.crc32/") && *k != "efa.meta_crc32")
        .collect();
    keys.sort();
    let mut c = efa_train::fsio::crc32::Crc32::new();
    for k in keys {
        let v = meta[k].as_str().unwrap();
        c.update(&(k.len() as u64).to_le_bytes())
            .update(k.as_bytes());
        c.update(&(v.len() as u64).to_le_bytes())
            .update(v.as_bytes());
    }
    header["__metadata__"]["efa.meta_crc32"] =
        serde_json::Value::String(efa_train::fsio::crc32::to_hex(c.finish()));
    let mut text = header.to_string().into_bytes();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend(&bytes[8 + n..]);
    std::fs::write(file, out).unwrap();
}

#[test]
fn a_model_file_claiming_huge_sizes_is_checked_before_anything_is_built() {
    let dir = scratch::scratch("efa-sizes-model");
    let run = dir.join("run");
    let test = fixture("counts_test.csv");
    let o = efa(&[
        "train",
        "--quiet",
        "--config",
        s(&fixture("efa_poisson.toml")),
        "--data",
        s(&fixture("counts_train.csv")),
        "--out",
        s(&run),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let model = run.join("model.safetensors");
    // An untouched copy still evaluates (the rewriting itself is harmless).
    edit_config(&model, |_| {});
    assert!(efa(&["evaluate", "--model", s(&run), "--data", s(&test)])
        .status
        .success());
    let prefix = format!("{}: metadata `efa.config`: ", model.display());
    // 10¹² item rows claimed (the tensors in the file are 6 rows): the model was built from
    // the metadata first and the process aborted before.
    edit_config(&model, |c| {
        c["model"]["efa"]["items"] = 1_000_000_000_000u64.into()
    });
    // The configuration's size limit (every field ≤ 2²⁸, checked before anything is built)
    // names the field in each case.
    for cmd in ["evaluate", "predict"] {
        let o = efa(&[cmd, "--model", s(&run), "--data", s(&test)]);
        fails(
            &o,
            &prefix,
            "field `model.efa.items`: 1000000000000 is beyond the limit",
        );
    }
    // A value whose element count would overflow.
    edit_config(&model, |c| {
        c["model"]["efa"]["items"] = (1u64 << 62).into();
    });
    let o = efa(&["evaluate", "--model", s(&run), "--data", s(&test)]);
    fails(
        &o,
        &prefix,
        "field `model.efa.items`: 4611686018427387904 is beyond the limit of 268435456",
    );
    // 10⁸ layers claimed.
    edit_config(&model, |c| {
        c["model"]["efa"]["items"] = 6.into();
        c["model"]["efa"]["layers"] = 100_000_000.into();
    });
    let o = efa(&["predict", "--model", s(&run), "--data", s(&test)]);
    fails(&o, &prefix, "layers");
}

#[test]
fn reproduce_with_zero_epochs_is_an_error_naming_the_flag() {
    let dir = scratch::scratch("efa-sizes-repro");
    let out = dir.join("out");
    let o = efa(&[
        "reproduce",
        "synthetic",
        "--users",
        "8",
        "--epochs",
        "0",
        "--quiet",
        "--out",
        s(&out),
    ]);
    // The range is clap's: refused while parsing, before anything is read or written.
    fails(
        &o,
        "invalid value '0' for '--epochs <EPOCHS>': must be at least 1",
        "",
    );
    assert!(!out.exists());
    let o = efa(&[
        "reproduce",
        "synthetic",
        "--users",
        "4000000000000",
        "--quiet",
    ]);
    fails(
        &o,
        "invalid value '4000000000000' for '--users <USERS>': must be a multiple of 4, at least \
         8 and at most 1000000",
        "",
    );
}

/// `efa args…` with its address space limited to `kib` KiB (`ulimit -v`), so that a job
/// asking for far more memory than it needs fails on allocation instead of swapping.
pub(crate) fn efa_limited(kib: u64, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_efa"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_long_sequence_among_short_ones_predicts_like_the_short_ones_alone() {
    // A rating FM (its contexts are the other rows): one sequence of 30,000 rows among short
    // ones. Before, every sample was padded to the longest sequence: 30,049 samples × 29,999
    // context entries, 7.2 GB for the items and as much for the weights, which aborted under
    // the 3 GB address-space limit below; now each chunk is built at its own width and
    // memory grows with the rows. The short sequences' predictions are the same with and
    // without the long one.
    let dir = scratch::scratch("efa-sizes-long");
    let run = dir.join("run");
    let o = efa(&[
        "train",
        "--quiet",
        "--config",
        s(&fixture("fm_gaussian.toml")),
        "--data",
        s(&fixture("counts_train.csv")),
        "--out",
        s(&run),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut short = String::from("seq,order,item,value\n");
    for k in 0..20 {
        for o in 0..2 + k % 4 {
            short += &format!("s{k},{o},{},{}\n", 1 + (k + o) % 5, (k * o) % 4);
        }
    }
    let mut long = short.clone();
    for o in 0..30_000 {
        long += &format!("long,{o},{},{}\n", 1 + (o * 7) % 5, (o * 3) % 4);
    }
    let (a, b) = (dir.join("short.csv"), dir.join("long.csv"));
    std::fs::write(&a, &short).unwrap();
    std::fs::write(&b, &long).unwrap();
    let predict = |p: &Path| {
        let o = efa_limited(
            3_000_000,
            &[
                "predict",
                "--threads",
                "2",
                "--model",
                s(&run),
                "--data",
                s(p),
            ],
        );
        assert!(
            o.status.success(),
            "{:?}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    let (pa, pb) = (predict(&a), predict(&b));
    let lines: Vec<&str> = pb.lines().collect();
    // Unidirectional: every row but the first of each sequence is a target.
    assert_eq!(lines.len(), 1 + (70 - 20) + 29_999);
    assert!(
        pb.starts_with(&pa),
        "the short sequences' rows come first, unchanged"
    );
}
