//! `efa reproduce` checks the paper's data files against their fingerprints (size and
//! SHA-256): another file — MovieLens with its user and item columns swapped, say — is refused
//! with an error naming the file and what differs; `--allow-other-data` runs anyway and marks
//! the results as not the paper's.
//!
//! The tests on small files written here need no data; those on the paper's own files are
//! ignored unless asked for (`cargo test -p efa-cli -- --include-ignored`) and read them from
//! `EFA_DATA`, else `../shared/data` beside the repository.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use efa_testkit::scratch;

/// The paper's data directory: `EFA_DATA`, else `../shared/data` relative to the repository
/// root; a clear panic when neither exists.
fn paper_data() -> PathBuf {
    efa_testkit::paper_data()
}

fn efa(args: &[&str], data: &Path, out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_efa"))
        .args(args)
        .args(["--threads", "1", "--quiet", "--data"])
        .arg(data)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

/// A small MovieLens-format `u.data` (`user \t item \t rating \t timestamp`): 40 users, each
/// rating 8 of exp-2's top-50 movies 3..5 at distinct times.
fn small_u_data() -> String {
    const TOP: [u32; 12] = [172, 127, 181, 1, 50, 7, 15, 121, 28, 69, 64, 202];
    let mut s = String::new();
    for user in 1..=40u32 {
        for k in 0..8u32 {
            let item = TOP[((user * 5 + k * 7) % 12) as usize];
            let rating = 3 + (user + k) % 3;
            let _ = writeln!(
                s,
                "{user}\t{item}\t{rating}\t{}",
                880_000_000 + user * 1000 + k
            );
        }
    }
    s
}

/// `text` with the first two tab-separated columns of every line swapped.
fn swap_user_item(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let _ = writeln!(s, "{}\t{}\t{}", f[1], f[0], f[2..].join("\t"));
    }
    s
}

/// A data directory holding only `movielens/u.data` with `text`.
fn movielens_dir(root: &Path, name: &str, text: &str) -> PathBuf {
    let d = root.join(name);
    std::fs::create_dir_all(d.join("movielens")).unwrap();
    std::fs::write(d.join("movielens/u.data"), text).unwrap();
    d
}

const RATINGS: [&str; 8] = [
    "reproduce",
    "movielens-ratings",
    "--epochs",
    "1",
    "--model",
    "fm",
    "--direction",
    "uni",
];

/// The run was refused (exit 2) before anything was written, naming `file`.
fn refused_naming(o: &Output, file: &Path, out: &Path) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with(&format!("error: {}: ", file.display())),
        "{err}"
    );
    assert!(
        err.contains("not the file the paper used") && err.contains("--allow-other-data"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists(), "nothing is written");
    err
}

#[test]
fn movielens_with_user_and_item_swapped_is_refused_naming_the_file() {
    let dir = scratch::scratch("efa-paper-data-swap");
    let text = swap_user_item(&small_u_data());
    let data = movielens_dir(&dir, "data", &text);
    let out = dir.join("out");
    let o = efa(&RATINGS, &data, &out);
    let file = data.join("movielens").join("u.data");
    let err = refused_naming(&o, &file, &out);
    assert!(
        err.contains(&format!(
            "{} bytes, but the expected file has 1979173 bytes",
            text.len()
        )),
        "{err}"
    );
}

#[test]
fn allow_other_data_runs_and_marks_the_results_as_not_the_papers() {
    let dir = scratch::scratch("efa-paper-data-allow");
    let data = movielens_dir(&dir, "data", &small_u_data());
    let out = dir.join("out");
    // Refused without the flag …
    let o = efa(&RATINGS, &data, &out);
    refused_naming(&o, &data.join("movielens").join("u.data"), &out);
    // … run with it, and marked in the table and in results.json.
    let mut args = RATINGS.to_vec();
    args.push("--allow-other-data");
    let o = efa(&args, &data, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("warning: ") && err.contains("u.data"), "{err}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let first = stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("NOT THE PAPER'S DATA (--allow-other-data)") && first.contains("u.data"),
        "{stdout}"
    );
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["paper_data"], false, "{results}");
    let other = &results["other_data"][0];
    assert!(
        other["file"].as_str().unwrap().ends_with("u.data"),
        "{results}"
    );
    assert_eq!(other["differs"], "size");
    assert_eq!(other["expected"], 1_979_173);
    assert_eq!(results["config"]["allow_other_data"], true);
}

#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn the_papers_movielens_with_user_and_item_swapped_is_refused() {
    let real = paper_data().join("movielens").join("u.data");
    let text = std::fs::read_to_string(&real).unwrap();
    let dir = scratch::scratch("efa-paper-data-real-swap");
    let data = movielens_dir(&dir, "data", &swap_user_item(&text));
    let out = dir.join("out");
    let o = efa(&RATINGS, &data, &out);
    let err = refused_naming(&o, &data.join("movielens").join("u.data"), &out);
    // Swapping the columns keeps the size: the hash tells the files apart.
    assert!(
        err.contains("but the expected file (of the same size) has SHA-256"),
        "{err}"
    );
}

#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn the_papers_own_files_are_accepted_unmarked() {
    let dir = scratch::scratch("efa-paper-data-real");
    let out = dir.join("out");
    let o = efa(&RATINGS, &paper_data(), &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("warning"), "{err}");
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("NOT THE PAPER'S DATA"),
        "unmarked"
    );
    let results = std::fs::read_to_string(out.join("results.json")).unwrap();
    assert!(!results.contains("paper_data") && !results.contains("allow_other_data"));
}

#[test]
fn export_refuses_other_data_and_marks_an_allowed_export() {
    let dir = scratch::scratch("efa-paper-data-export");
    let data = movielens_dir(&dir, "data", &small_u_data());
    let out = dir.join("out");
    let export = ["export", "movielens-ratings", "--epochs", "1"];
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_efa"))
            .args(export)
            .args(extra)
            .arg("--data")
            .arg(&data)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap()
    };
    let o = run(&[]);
    refused_naming(&o, &data.join("movielens").join("u.data"), &out);
    let o = run(&["--allow-other-data"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let toml = std::fs::read_to_string(out.join("model.toml")).unwrap();
    assert!(toml.starts_with("# NOT THE PAPER'S DATA"), "{toml}");
    assert!(toml.lines().nth(1).unwrap().contains("u.data"), "{toml}");
}
