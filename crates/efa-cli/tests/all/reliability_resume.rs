//! `efa train --resume` refuses what it should, before writing anything: another
//! configuration, other training or validation data of the same size, a damaged checkpoint.
//! Damaged or non-finite model files are errors for `efa evaluate` (exit 2, never a panic);
//! a failed output write leaves no temporary file.

use efa_train::fsio::crc32::crc32;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/train")
        .join(name)
}

use efa_testkit::scratch;

fn efa(args: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_efa"))
        .args(args)
        .output()
        .unwrap()
}

fn p(s: &str) -> &Path {
    Path::new(s)
}

/// `efa train` on the fixture with `data`, `valid` and `extra` arguments.
fn train(config: &Path, data: &Path, valid: &Path, extra: &[&Path]) -> Output {
    let mut a = vec![p("train"), p("--config"), config, p("--data"), data];
    a.extend([p("--valid"), valid, p("--quiet"), p("--threads"), p("1")]);
    a.extend_from_slice(extra);
    efa(&a)
}

/// Every file of a directory with its size and CRC-32, except a lock file left by a killed
/// process (which the next process removes after taking the lock).
fn snapshot(dir: &Path) -> BTreeMap<String, (usize, u32)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            let b = std::fs::read(e.path()).unwrap();
            (name, (b.len(), crc32(&b)))
        })
        .filter(|(n, _)| n != "train.lock")
        .collect()
}

/// Expects exit 2 with exactly `message` on standard error.
fn refused(o: &Output, message: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "stderr {err}");
    assert_eq!(err.trim_end(), format!("error: {message}"));
}

#[test]
fn refused_resumes_change_nothing_in_the_run_directory() {
    let dir = scratch::scratch("efa-refuse");
    let cfg = fixture("efa_poisson.toml");
    let (data, valid) = (fixture("counts_train.csv"), fixture("counts_valid.csv"));
    let run = dir.join("run");
    // A run killed (SIGABRT) after epoch 3: checkpoint of epoch 3, no model yet.
    let o = train(
        &cfg,
        &data,
        &valid,
        &[p("--out"), &run, p("--crash-after-epoch"), p("3")],
    );
    assert!(o.status.code().is_none(), "{:?}", o.status);
    // The lock file of the aborted process stays behind; the operating system released the
    // lock.
    assert!(run.join("train.lock").exists());
    let before = snapshot(&run);
    let names: Vec<&str> = before.keys().map(String::as_str).collect();
    assert_eq!(names, ["checkpoint.safetensors", "config.toml"]);
    let ck = run.join("checkpoint.safetensors");
    let ck_bytes = std::fs::read(&ck).unwrap();

    // Another configuration (the learning rate): refused, config.toml is not replaced.
    let text = std::fs::read_to_string(&cfg).unwrap();
    let other_cfg = dir.join("other.toml");
    std::fs::write(&other_cfg, text.replace("lr = 0.01", "lr = 0.02")).unwrap();
    let o = train(&other_cfg, &data, &valid, &[p("--resume"), &run]);
    refused(
        &o,
        &format!(
            "{}: the checkpoint was written with a different configuration than {}",
            ck.display(),
            other_cfg.display()
        ),
    );
    assert_eq!(snapshot(&run), before);

    // Other training data of the same size: one count changed from 0 to 1.
    let bytes = std::fs::read(&data).unwrap();
    let changed =
        String::from_utf8(bytes.clone())
            .unwrap()
            .replacen("u0,20,2,0\n", "u0,20,2,1\n", 1);
    assert_eq!(changed.len(), bytes.len());
    let other_data = dir.join("train2.csv");
    std::fs::write(&other_data, &changed).unwrap();
    let o = train(&cfg, &other_data, &valid, &[p("--resume"), &run]);
    let n = bytes.len();
    refused(&o, &format!(
        "{}: cannot resume: input `--data` differs from the one the checkpoint was trained on ({n} bytes with CRC-32 {:08x} there, {n} bytes with CRC-32 {:08x} now)",
        ck.display(), crc32(&bytes), crc32(changed.as_bytes())
    ));
    assert_eq!(snapshot(&run), before);
    // ... and other validation data of the same size.
    let v = std::fs::read(&valid).unwrap();
    let text = String::from_utf8(v.clone()).unwrap();
    let line = text.lines().nth(1).unwrap();
    let flipped = match line.strip_suffix('0') {
        Some(head) => format!("{head}1"),
        None => format!("{}0", &line[..line.len() - 1]),
    };
    let changed = text.replacen(line, &flipped, 1);
    assert_eq!(changed.len(), v.len());
    let other_valid = dir.join("valid2.csv");
    std::fs::write(&other_valid, &changed).unwrap();
    let o = train(&cfg, &data, &other_valid, &[p("--resume"), &run]);
    let m = v.len();
    refused(&o, &format!(
        "{}: cannot resume: input `--valid` differs from the one the checkpoint was trained on ({m} bytes with CRC-32 {:08x} there, {m} bytes with CRC-32 {:08x} now)",
        ck.display(), crc32(&v), crc32(changed.as_bytes())
    ));
    assert_eq!(snapshot(&run), before);

    // A damaged checkpoint (one bit of one weight) is refused naming the tensor, and a
    // resume into another --out does not create files there.
    let mut damaged = ck_bytes.clone();
    let last = damaged.len() - 200;
    damaged[last] ^= 0x04;
    std::fs::write(&ck, &damaged).unwrap();
    let elsewhere = dir.join("elsewhere");
    let o = train(
        &cfg,
        &data,
        &valid,
        &[p("--resume"), &run, p("--out"), &elsewhere],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with(&format!("error: {}: tensor `", ck.display()))
            && err.contains("`: checksum mismatch (stored CRC-32"),
        "{err}"
    );
    assert!(snapshot(&elsewhere).is_empty());
    std::fs::write(&ck, &ck_bytes).unwrap();

    // The right inputs resume and finish; the lock file is gone afterwards.
    let o = train(&cfg, &data, &valid, &[p("--resume"), &run]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(run.join("model.safetensors").exists() && !run.join("train.lock").exists());
}

#[test]
fn a_resume_from_a_directory_without_a_checkpoint_creates_nothing() {
    // `--resume missing/` created `missing/` (the run directory defaults to the resumed one)
    // and then failed on the checkpoint it could not read, leaving an empty run directory.
    let dir = scratch::scratch("efa-resume-missing");
    let cfg = fixture("efa_poisson.toml");
    let (data, valid) = (fixture("counts_train.csv"), fixture("counts_valid.csv"));
    let missing = dir.join("missing");
    let o = train(&cfg, &data, &valid, &[p("--resume"), &missing]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let ck = missing.join("checkpoint.safetensors");
    assert!(
        err.starts_with(&format!("error: {}: cannot read: ", ck.display())),
        "{err}"
    );
    assert!(!missing.exists(), "{} was created", missing.display());
}

#[test]
fn damaged_or_non_finite_model_files_are_errors() {
    let dir = scratch::scratch("efa-badmodel");
    let cfg = fixture("efa_poisson.toml");
    let (data, valid) = (fixture("counts_train.csv"), fixture("counts_valid.csv"));
    let run = dir.join("run");
    let o = train(&cfg, &data, &valid, &[p("--out"), &run]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let model = run.join("model.safetensors");
    let good = std::fs::read(&model).unwrap();
    let bad = dir.join("bad.safetensors");
    // Offsets spread over the whole file: the header (length, JSON, metadata) and the weights.
    for k in 0..24 {
        let at = k * (good.len() - 1) / 23;
        let mut b = good.clone();
        b[at] ^= 1 << (k % 8);
        std::fs::write(&bad, &b).unwrap();
        let o = efa(&[p("evaluate"), p("--model"), &bad, p("--data"), &data]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "byte {at}: {err}");
        assert!(
            err.starts_with(&format!("error: {}: ", bad.display())),
            "byte {at}: {err}"
        );
        assert!(o.stdout.is_empty());
    }
    // A NaN weight written with valid checksums.
    let meta = efa_train::checkpoint::read_meta(&model).unwrap();
    let ucfg: efa_train::userdata::UserConfig = serde_json::from_str(&meta["efa.config"]).unwrap();
    let (mut params, _) =
        efa_train::checkpoint::load_model(&model, &ucfg.model.init::<f32>(0)).unwrap();
    params.get_mut("head0.w").unwrap().as_slice_mut().unwrap()[9] = f32::NAN;
    let shape = params.get("head0.w").unwrap().shape().to_vec();
    efa_train::checkpoint::save_model(&bad, &params, &meta).unwrap();
    let o = efa(&[p("evaluate"), p("--model"), &bad, p("--data"), &data]);
    let idx = [9 / shape[1], 9 % shape[1]];
    refused(&o, &format!("{}: tensor `head0.w` holds NaN at flat index 9 = {idx:?} (shape {shape:?}); model values must be finite", bad.display()));
    let o = efa(&[p("predict"), p("--model"), &bad, p("--data"), &data]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn a_failed_output_write_leaves_no_temporary_file() {
    let dir = scratch::scratch("efa-tmpout");
    let run = dir.join("run");
    let (data, cfg) = (fixture("counts_train.csv"), fixture("efa_poisson.toml"));
    let o = train(&cfg, &data, &data, &[p("--out"), &run]);
    assert!(o.status.success());
    // --out names a non-empty directory: the temporary file is written, the rename fails.
    let target = dir.join("pred.csv");
    std::fs::create_dir_all(target.join("x")).unwrap();
    let o = efa(&[
        p("predict"),
        p("--model"),
        &run,
        p("--data"),
        &data,
        p("--out"),
        &target,
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with(&format!(
            "error: {}: cannot rename the temporary file over it: ",
            target.display()
        )),
        "{err}"
    );
    assert!(
        !dir.join("pred.csv.tmp").exists(),
        "temporary file left behind"
    );
}

#[test]
fn huge_sizes_in_a_config_or_model_file_are_refused_before_building() {
    let dir = scratch::scratch("efa-huge");
    let cfg = fixture("efa_poisson.toml");
    let data = fixture("counts_train.csv");
    // A configuration file claiming 2^40 items.
    let text = std::fs::read_to_string(&cfg).unwrap();
    let huge = dir.join("huge.toml");
    std::fs::write(
        &huge,
        text.replacen("items = 6 ", "items = 1099511627776 ", 1),
    )
    .unwrap();
    let out = dir.join("out");
    let o = train(&huge, &data, &data, &[p("--out"), &out]);
    let limit = "is beyond the limit of 268435456 (the most parameter values a model may have)";
    refused(
        &o,
        &format!(
            "{}: field `model.efa.items`: 1099511627776 {limit}",
            huge.display()
        ),
    );
    // A model file (with valid checksums) whose configuration claims the same.
    let run = dir.join("run");
    let o = train(&cfg, &data, &data, &[p("--out"), &run]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let model = run.join("model.safetensors");
    let meta = efa_train::checkpoint::read_meta(&model).unwrap();
    let (params, _) = efa_train::checkpoint::load_model_layout(&model, &{
        let ucfg: efa_train::userdata::UserConfig =
            serde_json::from_str(&meta["efa.config"]).unwrap();
        ucfg.model.layout()
    })
    .unwrap();
    let bad = dir.join("bad.safetensors");
    let with_items = |items: &str| {
        let mut m = meta.clone();
        let c = m.get_mut("efa.config").unwrap();
        assert_eq!(c.matches("\"items\":6,").count(), 1, "{c}");
        *c = c.replacen("\"items\":6,", &format!("\"items\":{items},"), 1);
        efa_train::checkpoint::save_model(&bad, &params, &m).unwrap();
    };
    with_items("1099511627776");
    for cmd in ["evaluate", "predict"] {
        let o = efa(&[p(cmd), p("--model"), &bad, p("--data"), &data]);
        refused(
            &o,
            &format!(
                "{}: metadata `efa.config`: field `model.efa.items`: 1099511627776 {limit}",
                bad.display()
            ),
        );
    }
    // Sizes within the limit that disagree with the tensors: the tensor and both shapes.
    with_items("7");
    let o = efa(&[p("evaluate"), p("--model"), &bad, p("--data"), &data]);
    refused(
        &o,
        &format!(
            "{}: tensor `item_emb` is F32 [6, 8], the model needs F32 [7, 8]",
            bad.display()
        ),
    );
}
