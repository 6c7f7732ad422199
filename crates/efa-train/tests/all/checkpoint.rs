//! Checkpoints: a run killed after epoch k and resumed is bit-identical to an uninterrupted
//! run; training options (hooks, checkpoints) do not change results; truncated files and mismatched resumes are errors;
//! anomaly mode names the op, node, parameter and batch.

use efa_model::Objective;
use efa_model::{Params, Samples};
use efa_train::checkpoint::{load_model, save_model, Checkpoint, CheckpointPolicy};
use efa_train::userdata::UserConfig;
use efa_train::Evaluator;
use efa_train::TrainError;
use efa_train::{fit, FitOptions, FitResult};
use std::collections::BTreeMap;
use std::path::Path;

use crate::poisson_fixture;
use poisson_fixture::setup;

use efa_testkit::scratch;

fn tmpdir(tag: &str) -> scratch::Scratch {
    scratch::scratch(&format!("efa-ckpt-{tag}"))
}

fn bits(p: &Params<f32>) -> Vec<(String, Vec<u32>)> {
    p.iter()
        .map(|(n, v)| (n.to_string(), v.iter().map(|x| x.to_bits()).collect()))
        .collect()
}

fn losses(r: &FitResult) -> Vec<(usize, u64, u64)> {
    r.history
        .iter()
        .map(|h| (h.epoch, h.train_loss.to_bits(), h.val_loss.to_bits()))
        .collect()
}

fn run(
    cfg: &UserConfig,
    train: &Samples,
    val: &Samples,
    opts: FitOptions<'_>,
) -> (Params<f32>, Result<FitResult, TrainError>) {
    let mut p = cfg.model.init::<f32>(cfg.init_seed);
    let objective = cfg.objective();
    let r = fit(
        &Evaluator::new(&cfg.model, &objective),
        &mut p,
        train,
        val,
        &cfg.train,
        opts,
    );
    (p, r)
}

fn policy(path: &Path, every: usize) -> Option<CheckpointPolicy> {
    Some(CheckpointPolicy {
        path: path.to_path_buf(),
        every,
        meta: BTreeMap::from([("efa.note".into(), "test".into())]),
    })
}

#[test]
fn killed_run_resumes_bit_identically() {
    let (cfg, train, val) = setup();
    let dir = tmpdir("resume");
    let (full, r) = run(
        &cfg,
        &train,
        &val,
        FitOptions {
            checkpoint: policy(&dir.join("a.safetensors"), 1),
            ..Default::default()
        },
    );
    let full_r = r.unwrap();
    assert_eq!(full_r.epochs, 6, "the fixture runs all 6 epochs");
    // Checkpointing does not change the result: same as a plain run.
    let (plain, _) = run(&cfg, &train, &val, FitOptions::default());
    assert_eq!(bits(&plain), bits(&full));

    for (every, crash_after, resumed_from) in [(2, 3, 2), (1, 4, 4), (5, 1, 0)] {
        let path = dir.join(format!("b{every}.safetensors"));
        let _ = std::fs::remove_file(&path);
        let mut hook = |log: &efa_train::EpochLog| {
            if log.epoch == crash_after {
                Err(TrainError::Resume(format!(
                    "simulated crash after epoch {crash_after}"
                )))
            } else {
                Ok(())
            }
        };
        let opts = FitOptions {
            checkpoint: policy(&path, every),
            on_epoch: Some(&mut hook),
            ..Default::default()
        };
        let (_, r) = run(&cfg, &train, &val, opts);
        assert_eq!(
            r.unwrap_err().to_string(),
            format!("cannot resume: simulated crash after epoch {crash_after}")
        );
        if resumed_from == 0 {
            assert!(!path.exists(), "no checkpoint before epoch {every}");
            continue;
        }
        let template = cfg.model.init::<f32>(0);
        let ck = Checkpoint::load(&path, &template).unwrap();
        assert_eq!(ck.state.epoch, resumed_from);
        assert_eq!(ck.meta.get("efa.note").map(String::as_str), Some("test"));
        let opts = FitOptions {
            checkpoint: policy(&path, every),
            resume: Some(ck),
            ..Default::default()
        };
        let (resumed, r) = run(&cfg, &train, &val, opts);
        let r = r.unwrap();
        assert_eq!(
            bits(&resumed),
            bits(&full),
            "every {every}, crash after {crash_after}"
        );
        assert_eq!(losses(&r), losses(&full_r));
        assert_eq!(
            (r.best_epoch, r.best_val.to_bits(), r.stopped_early),
            (
                full_r.best_epoch,
                full_r.best_val.to_bits(),
                full_r.stopped_early
            )
        );
        // Resuming from the final checkpoint is a no-op that returns the same result.
        let ck = Checkpoint::load(&path, &template).unwrap();
        assert!(ck.state.finished);
        let (again, r2) = run(
            &cfg,
            &train,
            &val,
            FitOptions {
                resume: Some(ck),
                ..Default::default()
            },
        );
        assert_eq!(bits(&again), bits(&full));
        assert_eq!(losses(&r2.unwrap()), losses(&full_r));
    }
}

#[test]
fn an_epoch_hook_sees_every_epoch_and_changes_nothing_for_paper_objectives() {
    let (cfg, train, val) = setup();
    let obj = Objective::PoissonOnePlus;
    let eval = Evaluator::new(&cfg.model, &obj);
    let mut a = cfg.model.init::<f32>(4);
    let ra = fit(
        &eval,
        &mut a,
        &train,
        &val,
        &cfg.train,
        FitOptions::default(),
    )
    .unwrap();
    let mut b = cfg.model.init::<f32>(4);
    let mut seen = Vec::new();
    let mut hook = |log: &efa_train::EpochLog| {
        seen.push(log.epoch);
        Ok(())
    };
    let opts = FitOptions {
        on_epoch: Some(&mut hook),
        ..Default::default()
    };
    let rb = fit(&eval, &mut b, &train, &val, &cfg.train, opts).unwrap();
    assert_eq!(bits(&a), bits(&b));
    assert_eq!(losses(&ra), losses(&rb));
    assert_eq!(seen, (1..=rb.epochs).collect::<Vec<_>>());
}

#[test]
fn mismatched_or_truncated_checkpoints_are_errors() {
    let (cfg, train, val) = setup();
    let dir = tmpdir("bad");
    let path = dir.join("c.safetensors");
    run(
        &cfg,
        &train,
        &val,
        FitOptions {
            checkpoint: policy(&path, 1),
            ..Default::default()
        },
    )
    .1
    .unwrap();
    let template = cfg.model.init::<f32>(0);
    let ck = Checkpoint::load(&path, &template).unwrap();
    let mut other = cfg.clone();
    other.train.seed = 8;
    let mut p = cfg.model.init::<f32>(0);
    let objective = cfg.objective();
    let e = fit(
        &Evaluator::new(&cfg.model, &objective),
        &mut p,
        &train,
        &val,
        &other.train,
        FitOptions {
            resume: Some(ck),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot resume: checkpoint has train.seed = 7, this run has 8"
    );

    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.join("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let e = Checkpoint::load(&cut, &template).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "{}: not a valid safetensors file (truncated or corrupt?)",
            cut.display()
        )),
        "{e}"
    );
    std::fs::write(&cut, &bytes[..5]).unwrap();
    let e = Checkpoint::load(&cut, &template).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}: not a valid safetensors file", cut.display())),
        "{e}"
    );
    // A model file is not a checkpoint.
    let model = dir.join("model.safetensors");
    save_model(&model, &template, &BTreeMap::new()).unwrap();
    let e = Checkpoint::load(&model, &template).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: tensor `params/item_emb` is missing (the model needs shape [6, 8])",
            model.display()
        )
    );
    // Model files round-trip bit for bit, and no temporary file is left behind.
    let (back, _) = load_model(&model, &template).unwrap();
    assert_eq!(bits(&back), bits(&template));
    assert!(!dir.join("model.safetensors.tmp").exists());
}

#[test]
fn anomaly_mode_names_op_node_param_and_batch() {
    let (cfg, train, val) = setup();
    let mut p = cfg.model.init::<f32>(cfg.init_seed);
    // exp(η) overflows f32 inside the Poisson nll for a huge output bias.
    p.get_mut("out.b").unwrap().fill(200.0);
    let objective = cfg.objective();
    let eval = Evaluator::new(&cfg.model, &objective).with_detect_anomaly(true);
    let e = fit(
        &eval,
        &mut p.clone(),
        &train,
        &val,
        &cfg.train,
        FitOptions::default(),
    )
    .unwrap_err()
    .to_string();
    // The node number depends on how the model is recorded; everything else is fixed.
    let (head, tail) = e
        .split_once(" (shape [16], inputs [")
        .unwrap_or_else(|| panic!("{e}"));
    assert!(
        head.starts_with(
            "non-finite value: epoch 1, batch 1 of 11: fused:poisson: anomaly in forward: node "
        ),
        "{e}"
    );
    assert!(
        tail.ends_with(
            "]) produced inf at flat index 0; parameters involved: item_emb, value_emb, pos_emb, \
             block0.attn.q.w, block0.attn.q.b, block0.attn.k.w, block0.attn.k.b, block0.attn.v.w, \
             block0.attn.v.b, block0.attn.o.w, block0.attn.o.b, head0.w, head0.b, out.w, out.b"
        ),
        "{e}"
    );
    // Without the mode the same run fails later, on the loss value only.
    let e = fit(
        &Evaluator::new(&cfg.model, &objective),
        &mut p,
        &train,
        &val,
        &cfg.train,
        FitOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        "non-finite value: epoch 1, training loss inf at batch 1 of 11"
    );
}
