//! A resume is refused, naming the field, when the checkpoint's state is inconsistent with
//! itself, or when the run differs from the checkpoint's: settings, sample counts, input
//! contents (same size, other bytes), optimizer state.

use efa_model::Samples;
use efa_train::checkpoint::{Checkpoint, CheckpointPolicy, InputDigest};
use efa_train::resume::check_resume;
use efa_train::userdata::UserConfig;
use efa_train::Evaluator;
use efa_train::{fit, Batching, FitOptions, TrainError};
use std::collections::BTreeMap;
use std::path::Path;

use efa_testkit::scratch;

use crate::poisson_fixture;
use poisson_fixture::setup;

fn digest(role: &str, crc32: u32) -> InputDigest {
    InputDigest {
        role: role.into(),
        bytes: 1000,
        crc32,
    }
}

/// Trains with a checkpoint after every epoch and `inputs`, stopping after epoch `stop`.
fn train_to(
    cfg: &UserConfig,
    train: &Samples,
    val: &Samples,
    ck: &Path,
    stop: usize,
    inputs: Vec<InputDigest>,
) {
    let mut p = cfg.model.init::<f32>(cfg.init_seed);
    let objective = cfg.objective();
    let mut hook = |log: &efa_train::EpochLog| {
        if log.epoch == stop {
            Err(TrainError::Resume("stop".into()))
        } else {
            Ok(())
        }
    };
    let opts = FitOptions {
        checkpoint: Some(CheckpointPolicy {
            path: ck.to_path_buf(),
            every: 1,
            meta: BTreeMap::new(),
        }),
        on_epoch: Some(&mut hook),
        inputs,
        ..Default::default()
    };
    let r = fit(
        &Evaluator::new(&cfg.model, &objective),
        &mut p,
        train,
        val,
        &cfg.train,
        opts,
    );
    if stop <= cfg.train.max_epochs {
        assert_eq!(r.unwrap_err().to_string(), "cannot resume: stop");
    } else {
        r.unwrap();
    }
}

#[test]
fn inconsistent_states_are_refused_naming_the_field() {
    let (cfg, train, val) = setup();
    let dir = scratch::scratch("efa-state");
    let path = dir.join("ck.safetensors");
    train_to(&cfg, &train, &val, &path, 3, vec![]);
    let template = cfg.model.init::<f32>(0);
    let ck = Checkpoint::load(&path, &template).unwrap();
    let s = &ck.state;
    assert_eq!((s.epoch, s.patience, s.train.max_epochs), (3, 3, 6));
    // The best epoch by a different formula than the replay: the first strict minimum of the
    // validation losses; the wait counter is the epochs since then.
    let vals: Vec<f64> = s
        .history
        .iter()
        .map(|h| f64::from_bits(h.val_loss))
        .collect();
    let best_epoch = 1 + (0..vals.len()).fold(0, |b, i| if vals[i] < vals[b] { i } else { b });
    assert_eq!(s.best_epoch, best_epoch);
    let wait = s.epoch - best_epoch;
    assert_eq!(s.wait, wait);
    let best = vals[best_epoch - 1];

    let bad = dir.join("bad.safetensors");
    let check = |edit: &dyn Fn(&mut Checkpoint), msg: String| {
        let mut c = ck.clone();
        edit(&mut c);
        c.save(&bad).unwrap();
        let e = Checkpoint::load(&bad, &template).unwrap_err().to_string();
        assert_eq!(e, format!("{}: metadata `efa.state`: {msg}", bad.display()));
        // The same check runs when a hand-made checkpoint is handed to fit.
        let e = check_resume(&c, &cfg.train, &train, &val, &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("cannot resume: checkpoint state: {msg}")
        );
    };
    check(
        &|c| c.state.epoch = 7,
        "field `epoch` = 7 is beyond `train.max_epochs` = 6".into(),
    );
    check(
        &|c| c.state.epoch = 0,
        "field `epoch` = 0, but a checkpoint is written after an epoch (at least 1)".into(),
    );
    check(
        &|c| {
            c.state.history.pop();
        },
        "field `history` has 2 entries but `epoch` = 3".into(),
    );
    check(
        &|c| c.state.history[1].epoch = 5,
        "field `history[1].epoch` = 5, expected 2".into(),
    );
    check(
        &|c| c.state.history[0].train_loss = f64::NAN.to_bits(),
        "field `history[0].train_loss` = NaN: training stops at a non-finite loss".into(),
    );
    check(
        &|c| c.state.shuffle.seed = 8,
        "field `shuffle.seed` = 8 differs from `train.seed` = 7".into(),
    );
    check(
        &|c| c.state.shuffle.shuffles = 2,
        "field `shuffle.shuffles` = 2 differs from `epoch` = 3".into(),
    );
    check(
        &|c| c.state.patience = 5,
        "field `patience` = 5 differs from `train.patience` = 3".into(),
    );
    check(
        &|c| c.state.best_epoch = 4,
        "field `best_epoch` = 4 is beyond `epoch` = 3".into(),
    );
    let other = if best_epoch == 1 { 2 } else { 1 };
    check(&|c| c.state.best_epoch = other, format!("field `best_epoch` = {other}, but the history's best validation loss is at epoch {best_epoch}"));
    let nudged = (best * 0.5).to_bits();
    check(
        &|c| c.state.best_bits = nudged,
        format!(
            "field `best_bits` = {nudged} ({}), but the history's best validation loss is {best}",
            best * 0.5
        ),
    );
    check(
        &|c| c.state.wait = wait + 1,
        format!(
            "field `wait` = {}, but the history gives {wait} epochs since the best",
            wait + 1
        ),
    );
    check(
        &|c| c.state.wait = 9,
        format!("field `wait` = 9, but the history gives {wait} epochs since the best"),
    );
    check(
        &|c| c.state.finished = true,
        "field `finished` = true, but after epoch 3 of 6 the run is not over".into(),
    );
    check(
        &|c| c.state.stopped_early = true,
        "field `stopped_early` = true, but the history says false".into(),
    );
    // Validation losses 1, 2, 3, … : no improvement after epoch 1, so with patience 3 the
    // run stops at epoch 1 + 3 = 4 and cannot have reached epoch 6.
    train_to(&cfg, &train, &val, &path, 7, vec![]);
    let done = Checkpoint::load(&path, &template).unwrap();
    assert!(done.state.finished && done.state.epoch == 6);
    let mut c = done.clone();
    for (i, h) in c.state.history.iter_mut().enumerate() {
        h.val_loss = (1.0 + i as f64).to_bits();
    }
    (c.state.best_bits, c.state.best_epoch, c.state.wait) = (1f64.to_bits(), 1, 5);
    c.save(&bad).unwrap();
    assert_eq!(
        Checkpoint::load(&bad, &template).unwrap_err().to_string(),
        format!("{}: metadata `efa.state`: field `history`: early stopping ends the run at epoch 4, but the history goes on to epoch 6", bad.display())
    );
}

fn resume(
    cfg: &UserConfig,
    train: &Samples,
    val: &Samples,
    tc: &efa_train::TrainConfig,
    ck: Checkpoint,
    inputs: Vec<InputDigest>,
    write_to: &Path,
) -> Result<efa_train::FitResult, TrainError> {
    let mut p = cfg.model.init::<f32>(0);
    let objective = cfg.objective();
    let opts = FitOptions {
        checkpoint: Some(CheckpointPolicy {
            path: write_to.to_path_buf(),
            every: 1,
            meta: BTreeMap::new(),
        }),
        resume: Some(ck),
        inputs,
        ..Default::default()
    };
    fit(
        &Evaluator::new(&cfg.model, &objective),
        &mut p,
        train,
        val,
        tc,
        opts,
    )
}

#[test]
fn a_run_unlike_the_checkpoints_is_refused_and_writes_nothing() {
    let (cfg, mut train, val) = setup();
    // Sequence ids (one per sample) so that both batchings are possible.
    train.group = Some((0..train.len()).collect());
    let dir = scratch::scratch("efa-resume");
    let path = dir.join("ck.safetensors");
    let inputs = vec![
        digest("--data", 0x1234_5678),
        digest("--valid", 0x9abc_def0),
    ];
    train_to(&cfg, &train, &val, &path, 2, inputs.clone());
    let ck2 = std::fs::read(&path).unwrap();
    train_to(&cfg, &train, &val, &path, 3, inputs.clone());
    let bytes = std::fs::read(&path).unwrap();
    let template = cfg.model.init::<f32>(0);
    let ck = Checkpoint::load(&path, &template).unwrap();
    assert_eq!(ck.state.inputs, inputs);
    let refused =
        |tc: &efa_train::TrainConfig, c: Checkpoint, val: &Samples, inp: Vec<InputDigest>| {
            let e = resume(&cfg, &train, val, tc, c, inp, &path)
                .unwrap_err()
                .to_string();
            assert_eq!(
                std::fs::read(&path).unwrap(),
                bytes,
                "a refused resume wrote the checkpoint"
            );
            e
        };
    let pre = "cannot resume: ";
    let mut tc = cfg.train.clone();
    tc.batching = Batching::Sequences;
    assert_eq!(
        refused(&tc, ck.clone(), &val, inputs.clone()),
        format!("{pre}checkpoint has train.batching = samples, this run has sequences")
    );
    let mut tc = cfg.train.clone();
    tc.max_epochs = 2;
    assert_eq!(
        refused(&tc, ck.clone(), &val, inputs.clone()),
        format!("{pre}checkpoint has train.max_epochs = 6, this run has 2")
    );
    // Fewer validation samples.
    let fewer = val.select(&(1..val.len()).collect::<Vec<_>>());
    assert_eq!(
        refused(&cfg.train, ck.clone(), &fewer, inputs.clone()),
        format!(
            "{pre}checkpoint has n_val = {} validation samples, this run has {}",
            val.len(),
            val.len() - 1
        )
    );
    // Other training data of the same size: same byte count, other CRC-32.
    let other = vec![digest("--data", 0x1234_5679), inputs[1].clone()];
    assert_eq!(refused(&cfg.train, ck.clone(), &val, other), format!("{pre}input `--data` differs from the one the checkpoint was trained on (1000 bytes with CRC-32 12345678 there, 1000 bytes with CRC-32 12345679 now)"));
    assert_eq!(refused(&cfg.train, ck.clone(), &val, vec![inputs[0].clone()]), format!("{pre}the checkpoint was trained with input `--valid` (1000 bytes with CRC-32 9abcdef0), this run has none"));
    let more = vec![inputs[0].clone(), inputs[1].clone(), digest("--extra", 1)];
    assert_eq!(
        refused(&cfg.train, ck.clone(), &val, more),
        format!("{pre}this run has input `--extra`, the checkpoint records none")
    );
    // The optimizer state of epoch 2 with the state of epoch 3: 174 samples in batches of 16
    // are ⌈174/16⌉ = 11 steps per epoch, so 22 steps where 3 epochs take 33.
    assert_eq!(train.len(), 174);
    let mut c = ck.clone();
    c.adam = Checkpoint::load(
        &{
            let p = dir.join("ck2.safetensors");
            std::fs::write(&p, &ck2).unwrap();
            p
        },
        &template,
    )
    .unwrap()
    .adam;
    assert_eq!(
        refused(&cfg.train, c, &val, inputs.clone()),
        format!("{pre}the checkpoint's optimizer took 22 steps, but 3 epochs of this run take 33")
    );
    // Optimizer settings: β1 (the f64 after the 8-byte magic, the dtype byte and the u64
    // step count) changed from 0.9 to 0.5.
    let mut c = ck.clone();
    assert_eq!(f64::from_le_bytes(c.adam[17..25].try_into().unwrap()), 0.9);
    c.adam[17..25].copy_from_slice(&0.5f64.to_le_bytes());
    let e = refused(&cfg.train, c, &val, inputs.clone());
    assert!(
        e.starts_with(&format!(
            "{pre}the checkpoint's optimizer settings AdamConfig {{"
        )) && e.contains("beta1: 0.5"),
        "{e}"
    );
    // An optimizer state cut short: the optimizer's own decoding error, kept whole as the
    // error's source (what was being done, the byte offset and the field).
    let mut c = ck.clone();
    c.adam.truncate(20);
    let e = resume(&cfg, &train, &val, &cfg.train, c, inputs.clone(), &path).unwrap_err();
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    match &e {
        TrainError::Optim {
            during: "checkpoint optimizer state",
            source: efa_train::OptimError::Decode { offset, .. },
        } => assert!(*offset <= 20, "{e}"),
        other => panic!("expected the optimizer's decoding error, got {other:?}"),
    }
    let source = std::error::Error::source(&e).expect("the optimizer's error as the source");
    assert!(
        e.to_string()
            .starts_with("optimizer (checkpoint optimizer state): optimizer state, byte")
            && e.to_string().ends_with(&source.to_string()),
        "{e}"
    );
    // The unchanged run resumes.
    resume(&cfg, &train, &val, &cfg.train, ck, inputs, &path).unwrap();
}
