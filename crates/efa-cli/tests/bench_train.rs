//! `efa bench train`: JSON lines with the documented keys and positive rates on a small
//! synthetic run, a clear error (exit 2, no panic) for missing Instacart data, and the
//! attention op's FLOP count under masks (in process, through the tape's global counter: so
//! this file is its own test binary, not a module of `tests/all`, where other tests' tapes
//! would add to the counter).

use std::process::{Command, Output};

fn efa(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_efa"))
        .args(args)
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn synthetic_json_lines_have_the_documented_keys_and_positive_rates() {
    let o = efa(&[
        "bench",
        "train",
        "synthetic",
        "--users",
        "200",
        "--epochs",
        "1",
        "--json",
        "--threads",
        "1",
        "--sgemm-size",
        "128",
    ]);
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "one line per direction: {out}");
    let mut dirs = Vec::new();
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line).expect(line);
        assert_eq!(v["experiment"], "synthetic");
        assert_eq!(v["model"], "efa");
        assert_eq!(v["threads"], 1);
        assert_eq!(v["batch"], 256);
        assert_eq!(v["batching"], "samples");
        for key in ["samples_per_s", "gflops", "sgemm_gflops", "epoch_s"] {
            let x = v[key].as_f64().unwrap_or(f64::NAN);
            assert!(x > 0.0 && x.is_finite(), "{key} = {x} in {line}");
        }
        assert!(v["train_samples"].as_u64().unwrap() > 0);
        dirs.push(v["direction"].as_str().unwrap().to_string());
    }
    assert_eq!(dirs, ["uni", "bi"]);
}

#[test]
fn no_baselines_gives_a_null_ceiling_and_one_direction() {
    let o = efa(&[
        "bench",
        "train",
        "synthetic",
        "--users",
        "200",
        "--epochs",
        "1",
        "--json",
        "--threads",
        "1",
        "--direction",
        "bi",
        "--batching",
        "sequences",
        "--no-baselines",
    ]);
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    assert_eq!(v["direction"], "bi");
    // Sequence batches apply only where the query stream does (a causal EFA with sequence
    // ids); the synthetic bidirectional model keeps the paper's sample batches, and the
    // output says both what was asked and what ran.
    assert_eq!(v["batching_requested"], "sequences");
    assert_eq!(v["batching"], "samples");
    assert!(v["sgemm_gflops"].is_null());
}

#[test]
fn missing_instacart_data_is_a_clear_error_not_a_panic() {
    // A --data path that does not exist.
    let missing = std::env::temp_dir().join(format!("efa-bench-nodata-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&missing);
    let o = efa(&[
        "bench",
        "train",
        "instacart",
        "--data",
        missing.to_str().unwrap(),
        "--no-baselines",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains(missing.to_str().unwrap()), "{e}");
    assert!(!e.contains("panicked") && !e.contains("bug"), "{e}");

    // An existing directory without the Instacart files: the error names the missing file.
    std::fs::create_dir_all(&missing).unwrap();
    let o = efa(&[
        "bench",
        "train",
        "instacart",
        "--data",
        missing.to_str().unwrap(),
        "--no-baselines",
    ]);
    let _ = std::fs::remove_dir_all(&missing);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("items.csv") && e.contains("instacart"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn attention_flops_count_visible_pairs_under_the_mask() {
    use efa_nn::ops::attention::{Attention, Mask};
    use efa_nn::TapeNn;
    use ndarray::{ArrayD, IxDyn};
    // B = 2, N = 3, H = 2, K = 4: 2·(K + K)·H = 32 FLOPs per visible (b, i, j) pair.
    let run = |mask: Mask| -> (u64, u64) {
        let mut t = efa_tape::Tape::<f64>::new();
        let x = |t: &mut efa_tape::Tape<f64>, name: &str| {
            t.param(name, ArrayD::from_elem(IxDyn(&[2, 3, 2, 4]), 0.1))
                .unwrap()
        };
        let (q, k, v) = (x(&mut t, "q"), x(&mut t, "k"), x(&mut t, "v"));
        let f0 = efa_tape::flops();
        let o = t
            .attention(Attention::new(q, k, v).mask(mask).scale(0.5))
            .unwrap()
            .o;
        let f1 = efa_tape::flops();
        let s = t.sum_all(o).unwrap();
        t.backward(s).unwrap();
        (f1 - f0, efa_tape::flops() - f1)
    };
    // dense: 2·3·3 = 18 pairs
    assert_eq!(run(Mask::none()), (18 * 32, 18 * 80));
    // key lengths [3, 1]: 9 + 3 pairs
    assert_eq!(run(Mask::none().key_lengths([3, 1])), (12 * 32, 12 * 80));
    // causal: 2·(1 + 2 + 3) pairs
    assert_eq!(run(Mask::causal()), (12 * 32, 12 * 80));
    // causal and lengths [3, 1]: (1 + 2 + 3) + (1 + 1 + 1)
    assert_eq!(run(Mask::causal().key_lengths([3, 1])), (9 * 32, 9 * 80));
}

#[test]
fn an_epoch_count_out_of_range_is_refused_before_any_training() {
    for (epochs, expect) in [
        ("0", "--epochs 0: must be in 1..=1000"),
        ("1001", "--epochs 1001: must be in 1..=1000"),
        (
            "1000000000000",
            "--epochs 1000000000000: must be in 1..=1000",
        ),
    ] {
        let start = std::time::Instant::now();
        let o = efa(&[
            "bench",
            "train",
            "synthetic",
            "--epochs",
            epochs,
            "--threads",
            "1",
        ]);
        assert!(
            !o.status.success() && o.status.code() != Some(101),
            "{:?}",
            o.status
        );
        let err = stderr(&o);
        assert!(err.contains(expect), "{err}");
        assert!(
            o.stdout.is_empty(),
            "nothing trained: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        assert!(start.elapsed().as_secs() < 30, "refused at once");
    }
}
