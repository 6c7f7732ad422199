//! Standard output that cannot be written: a reader that goes away (`efa predict … | head -1`)
//! ends the output quietly with exit status 0, and a full device is a normal error (exit 2)
//! naming standard output, never an internal error.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use efa_testkit::scratch;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/train")
        .join(name)
}

/// A trained model and a CSV whose predictions fill far more than a pipe buffer.
fn setup(dir: &Path) -> (PathBuf, PathBuf) {
    let run = dir.join("run");
    let o = Command::new(env!("CARGO_BIN_EXE_efa"))
        .args(["train", "--quiet", "--config"])
        .arg(fixture("efa_poisson.toml"))
        .arg("--data")
        .arg(fixture("counts_train.csv"))
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut csv = String::from("seq,order,item,value\n");
    for s in 0..6000 {
        for (k, item) in [1, 3, 5].iter().enumerate() {
            let _ = writeln!(csv, "s{s},{k},{item},{}", (s + k) % 4);
        }
    }
    let big = dir.join("big.csv");
    std::fs::write(&big, csv).unwrap();
    (run, big)
}

#[test]
fn a_closed_pipe_ends_quietly_and_a_full_device_is_an_error_naming_stdout() {
    let dir = scratch::scratch("efa-stdout");
    let (run, big) = setup(&dir);
    // Read one line, then close the pipe (18,000 rows of output are far from written).
    let mut child = Command::new(env!("CARGO_BIN_EXE_efa"))
        .args(["predict", "--threads", "1", "--model"])
        .arg(&run)
        .arg("--data")
        .arg(&big)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("seq,order,item,value,eta"), "{first}");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    assert!(err.is_empty(), "{err}");

    // A full device.
    if Path::new("/dev/full").exists() {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_efa"))
            .args(["predict", "--threads", "1", "--model"])
            .arg(&run)
            .arg("--data")
            .arg(&big)
            .stdout(full)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "stderr: {err}");
        assert!(
            err.starts_with("error: cannot write to standard output:")
                && err.contains("No space left on device"),
            "{err}"
        );
    }
}
