//! A training process killed with SIGKILL at an arbitrary moment (possibly while writing a
//! checkpoint) resumes from its last complete checkpoint to the same bits as an uninterrupted
//! run with the same seed and thread count. While it runs, a second process on the same
//! directory is refused; the lock it leaves when killed does not block the resume.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/train")
        .join(name)
}

fn cmd(config: &Path, out_flag: &str, dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_efa"));
    c.args(["train", "--config"]).arg(config);
    c.arg("--data").arg(fixture("counts_train.csv"));
    c.arg("--valid").arg(fixture("counts_valid.csv"));
    c.args([out_flag])
        .arg(dir)
        .args(["--quiet", "--threads", "1"]);
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    c
}

use efa_testkit::scratch;

#[test]
fn sigkilled_run_resumes_bit_identically() {
    let root = scratch::scratch("efa-kill");
    // A longer run of the fixture model, so the kill lands mid-training.
    let text = std::fs::read_to_string(fixture("efa_poisson.toml")).unwrap();
    let text = text
        .replace("max_epochs = 6", "max_epochs = 120")
        .replace("patience = 3", "patience = 120")
        .replace("lr = 0.01", "lr = 0.002");
    let config = root.join("long.toml");
    std::fs::write(&config, text).unwrap();
    let (full, killed) = (root.join("full"), root.join("killed"));

    let mut child = cmd(&config, "--out", &killed).spawn().unwrap();
    let ck = killed.join("checkpoint.safetensors");
    let t0 = Instant::now();
    while !ck.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no checkpoint appeared"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(150));
    // A second process on the same directory is refused at once, naming the lock and the
    // holder; it writes nothing.
    let o = cmd(&config, "--out", &killed).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim_end(),
        format!(
            "error: {}: the output directory is in use by process {} (another training run); \
             wait for it to end or choose another output directory",
            killed.join("train.lock").display(),
            child.id()
        )
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run finished before it could be killed"
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(!killed.join("model.safetensors").exists());
    // The killed process leaves its lock file; the lock itself died with it, so the resume
    // below is not blocked.
    assert!(killed.join("train.lock").exists());

    let o = cmd(&config, "--resume", &killed).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!killed.join("train.lock").exists());
    let o = cmd(&config, "--out", &full).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let read = |d: &Path, f: &str| std::fs::read(d.join(f)).unwrap();
    assert_eq!(
        read(&full, "model.safetensors"),
        read(&killed, "model.safetensors")
    );
    let losses = |d: &Path| -> Vec<(u64, u64)> {
        let v: serde_json::Value = serde_json::from_slice(&read(d, "result.json")).unwrap();
        v["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h["train_loss"].as_f64().unwrap().to_bits(),
                    h["val_loss"].as_f64().unwrap().to_bits(),
                )
            })
            .collect()
    };
    let l = losses(&full);
    assert_eq!(l.len(), 120);
    assert_eq!(losses(&killed), l);
}
