//! The run directory (`efa_train::run`): a run trained from files writes the layout `efa
//! train` writes, and a library caller reads it back — the model with its configuration,
//! typed errors naming the file, key or field for what cannot be used, and every resume check
//! before anything in the directory is written.

use efa_model::Params;
use efa_train::checkpoint::{read_meta, save_model};
use efa_train::run::{
    load_saved, Run, RunDir, RunInputs, RunOptions, Trained, CONFIG_KEY, LOCK_FILE,
};
use efa_train::{Threads, TrainError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use efa_testkit::scratch;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/train")
        .join(name)
}

fn inputs(config: PathBuf) -> RunInputs {
    RunInputs {
        valid: Some(fixture("counts_valid.csv")),
        test: Some(fixture("counts_test.csv")),
        ..RunInputs::new(config, fixture("counts_train.csv"))
    }
}

fn bits(p: &Params<f32>) -> Vec<(String, Vec<u32>)> {
    p.iter()
        .map(|(n, v)| (n.to_string(), v.iter().map(|x| x.to_bits()).collect()))
        .collect()
}

/// Trains the Poisson fixture into `out` (optionally resuming from `resume`).
fn train(config: PathBuf, out: &Path, resume: Option<&Path>) -> Result<Trained, TrainError> {
    let threads = Threads::new(2).unwrap();
    let run = Run::load(&inputs(config), &threads)?;
    let mut opts = RunOptions::new(RunDir::new(out), &threads);
    opts.resume = resume.map(RunDir::new);
    run.train(opts)
}

/// Every file of a directory with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

#[test]
fn a_run_writes_the_layout_and_a_library_caller_reads_it_back() {
    let dir = scratch::scratch("efa-rundir-layout");
    let out = dir.join("run");
    let config = fixture("efa_poisson.toml");
    let t = train(config.clone(), &out, None).unwrap();
    let names: Vec<String> = snapshot(&out).into_keys().collect();
    assert_eq!(
        names,
        [
            "checkpoint.safetensors",
            "config.toml",
            "model.safetensors",
            "result.json",
            "timings.json"
        ]
    );
    assert!(!out.join(LOCK_FILE).exists(), "the lock is released");
    assert_eq!(
        std::fs::read(out.join("config.toml")).unwrap(),
        std::fs::read(&config).unwrap()
    );
    let d = RunDir::new(&out);
    assert_eq!(d.model_file(), out.join("model.safetensors"));
    // The model, from the directory or its file, is the run's kept parameters.
    for path in [out.clone(), d.model_file()] {
        let saved = load_saved(&path, None).unwrap();
        assert_eq!(saved.config, t.config);
        assert_eq!(bits(&saved.params), bits(&t.params));
    }
    let meta = read_meta(&d.model_file()).unwrap();
    assert_eq!(meta[CONFIG_KEY], serde_json::to_string(&t.config).unwrap());
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.result_file()).unwrap()).unwrap();
    assert_eq!(result["best_epoch"], t.fit.best_epoch);
    assert_eq!(result["epochs"], t.fit.epochs);
    assert_eq!(
        result["test_nll"].as_f64().unwrap().to_bits(),
        t.test_nll.unwrap().to_bits()
    );
    let timings: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.timings_file()).unwrap()).unwrap();
    assert_eq!(timings["threads_per_rank"], 2);
    assert_eq!(timings["runs"][0]["run"], "train");
}

#[test]
fn a_finished_run_resumed_in_place_gives_the_same_model() {
    let dir = scratch::scratch("efa-rundir-resume");
    let out = dir.join("run");
    let config = fixture("efa_poisson.toml");
    let first = train(config.clone(), &out, None).unwrap();
    let again = train(config, &out, Some(&out)).unwrap();
    assert_eq!(bits(&first.params), bits(&again.params));
    assert_eq!(first.fit.best_epoch, again.fit.best_epoch);
}

#[test]
fn a_resume_with_another_configuration_is_refused_before_anything_is_written() {
    let dir = scratch::scratch("efa-rundir-other-config");
    let out = dir.join("run");
    train(fixture("efa_poisson.toml"), &out, None).unwrap();
    let before = snapshot(&out);
    let text = std::fs::read_to_string(fixture("efa_poisson.toml")).unwrap();
    let other = dir.join("other.toml");
    std::fs::write(&other, text.replace("lr = 0.01", "lr = 0.02")).unwrap();
    let e = train(other.clone(), &out, Some(&out)).unwrap_err();
    match &e {
        TrainError::ConfigDiffers { checkpoint, config } => {
            assert_eq!(checkpoint, &out.join("checkpoint.safetensors"));
            assert_eq!(config.as_deref(), Some(other.as_path()));
        }
        e => panic!("{e}"),
    }
    assert_eq!(
        e.to_string(),
        format!(
            "{}: the checkpoint was written with a different configuration than {}",
            out.join("checkpoint.safetensors").display(),
            other.display()
        )
    );
    assert_eq!(snapshot(&out), before);
}

#[test]
fn a_resume_on_other_data_names_the_checkpoint_and_the_input() {
    let dir = scratch::scratch("efa-rundir-other-data");
    let out = dir.join("run");
    let config = fixture("efa_poisson.toml");
    train(config.clone(), &out, None).unwrap();
    let before = snapshot(&out);
    // The same rows with a changed count: the same size, another CRC-32.
    let text = std::fs::read_to_string(fixture("counts_train.csv")).unwrap();
    let changed = text.replacen("u0,20,2,0\n", "u0,20,2,1\n", 1);
    assert_ne!(changed, text);
    let data = dir.join("train.csv");
    std::fs::write(&data, changed).unwrap();
    let threads = Threads::new(1).unwrap();
    let files = RunInputs {
        data,
        ..inputs(config)
    };
    let mut opts = RunOptions::new(RunDir::new(&out), &threads);
    opts.resume = Some(RunDir::new(&out));
    let e = Run::load(&files, &threads)
        .unwrap()
        .train(opts)
        .unwrap_err();
    match &e {
        TrainError::ResumeFrom { checkpoint, source } => {
            assert_eq!(checkpoint, &out.join("checkpoint.safetensors"));
            assert!(matches!(**source, TrainError::Resume(_)), "{source}");
        }
        e => panic!("{e}"),
    }
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!(
            "{}: cannot resume: input `--data` differs from the one the checkpoint was trained on",
            out.join("checkpoint.safetensors").display()
        )),
        "{msg}"
    );
    assert_eq!(snapshot(&out), before);
}

#[test]
fn a_model_file_without_its_configuration_is_a_typed_error_naming_file_and_key() {
    let dir = scratch::scratch("efa-rundir-no-config");
    let out = dir.join("run");
    let t = train(fixture("efa_poisson.toml"), &out, None).unwrap();
    let bare = dir.join("bare.safetensors");
    save_model(&bare, &t.params, &BTreeMap::new()).unwrap();
    match load_saved(&bare, None).unwrap_err() {
        TrainError::MissingMetadata { file, key } => {
            assert_eq!(file, bare);
            assert_eq!(key, "efa.config");
        }
        e => panic!("{e}"),
    }
    // A configuration whose field cannot be used: the file, the key and the field.
    let meta = read_meta(&RunDir::new(&out).model_file()).unwrap();
    let bad = dir.join("bad.safetensors");
    let mut m = meta.clone();
    let c = m.get_mut(CONFIG_KEY).unwrap();
    assert!(c.contains("\"lr\":0.01"), "{c}");
    *c = c.replacen("\"lr\":0.01", "\"lr\":-1.0", 1);
    save_model(&bad, &t.params, &m).unwrap();
    let e = load_saved(&bad, None).unwrap_err();
    match &e {
        TrainError::Metadata {
            file, key, field, ..
        } => {
            assert_eq!((file, key.as_str()), (&bad, "efa.config"));
            assert_eq!(field.as_deref(), Some("train.lr"));
        }
        e => panic!("{e}"),
    }
    assert!(
        e.to_string().starts_with(&format!(
            "{}: metadata `efa.config`: field `train.lr`: ",
            bad.display()
        )),
        "{e}"
    );
    // Not JSON at all: the key and the parser's message, no field.
    let mut m = meta;
    m.insert(CONFIG_KEY.into(), "{".into());
    save_model(&bad, &t.params, &m).unwrap();
    assert!(matches!(
        load_saved(&bad, None).unwrap_err(),
        TrainError::Metadata { field: None, .. }
    ));
}

#[test]
fn zero_checkpoint_interval_is_refused_naming_the_field() {
    let dir = scratch::scratch("efa-rundir-every");
    let out = dir.join("run");
    let threads = Threads::new(1).unwrap();
    let run = Run::load(&inputs(fixture("efa_poisson.toml")), &threads).unwrap();
    let mut opts = RunOptions::new(RunDir::new(&out), &threads);
    opts.checkpoint_every = 0;
    match run.train(opts).unwrap_err() {
        TrainError::Config { field, file, .. } => {
            assert_eq!(field, "checkpoint_every");
            assert_eq!(file, None);
        }
        e => panic!("{e}"),
    }
    assert!(!out.exists(), "nothing is created");
}

#[test]
fn unreadable_inputs_are_errors_naming_the_file() {
    let threads = Threads::new(1).unwrap();
    let missing = PathBuf::from("/nonexistent-efa/model.toml");
    match Run::load(&inputs(missing.clone()), &threads).unwrap_err() {
        TrainError::Io { path, what, .. } => {
            assert_eq!(path, missing);
            assert_eq!(what, "cannot read");
        }
        e => panic!("{e}"),
    }
}

#[test]
fn a_site_table_round_trips_through_the_model_file_to_the_bit() {
    // Coordinates with 17 significant digits: the model file's JSON keeps each f64's shortest
    // representation, and reading it back must give the same f64 (a 1-ulp drift made the
    // training items.csv "differ" from the model's table, and the predictions differ).
    let dir = scratch::scratch("efa-rundir-sites");
    let items = std::fs::read_to_string(fixture("mixed_sites_items.csv")).unwrap();
    let items = items.replace("-101.9291", "-101.92913716625759");
    assert!(items.contains("-101.92913716625759"));
    let items_file = dir.join("items.csv");
    std::fs::write(&items_file, items).unwrap();
    let toml = std::fs::read_to_string(fixture("mixed_sites.toml")).unwrap();
    let config = dir.join("sites.toml");
    std::fs::write(&config, toml.replace("max_epochs = 150", "max_epochs = 1")).unwrap();
    let threads = Threads::new(2).unwrap();
    let files = RunInputs {
        items: Some(items_file.clone()),
        ..RunInputs::new(&config, fixture("mixed_sites_valid.csv"))
    };
    let out = dir.join("run");
    let run = Run::load(&files, &threads).unwrap();
    let t = run
        .train(RunOptions::new(RunDir::new(&out), &threads))
        .unwrap();
    let table = efa_train::run::read_items(Some(&items_file))
        .unwrap()
        .unwrap();
    let saved = load_saved(&out, Some(&table)).unwrap();
    assert_eq!(saved.config, t.config);
    assert_eq!(bits(&saved.params), bits(&t.params));
}
