//! The paper's run queue shared by the members of a multi-process job (simulated in one
//! process): data-parallel (every member trains every run, each computing its share of the
//! micro-batches) and task-parallel (whole runs per member, results gathered). Every member
//! must end with the results and parameters of one process, to the bit, at every group size.

use efa_paper::runner::{
    assign, pays_data_parallel, run_all, run_all_in, Distribute, Quiet, Trained,
};
use efa_paper::{synthetic, Experiment, RunSettings};
use efa_train::collective::SimGroup;

fn on_group<R: Send>(size: usize, f: impl Fn(&SimGroup) -> R + Sync) -> Vec<R> {
    let group = SimGroup::new(size);
    std::thread::scope(|s| {
        let handles: Vec<_> = group.iter().map(|m| s.spawn(|| f(m))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Everything of a trained run that must reproduce: the results row as written to
/// results.json, the loss history's bits and the parameters' bits.
fn fingerprint((result, params): &Trained) -> (String, Vec<u64>, Vec<u32>) {
    let row = serde_json::to_string(result).unwrap();
    let losses = result
        .history
        .iter()
        .flat_map(|h| [h.epoch as u64, h.train_loss.to_bits(), h.val_loss.to_bits()])
        .collect();
    let bits = params
        .iter()
        .flat_map(|(_, v)| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
        .collect();
    (row, losses, bits)
}

/// The runs of a small synthetic experiment (`users` users) with `epochs`.
fn synthetic_runs(users: usize, epochs: Option<usize>) -> Vec<efa_paper::RunSpec> {
    let exp = synthetic::Synthetic::new(&synthetic::Options {
        users,
        ..Default::default()
    })
    .unwrap();
    exp.runs(&RunSettings {
        epochs,
        ..RunSettings::default()
    })
    .unwrap()
}

#[test]
fn shared_runs_are_bit_identical_to_one_process_at_every_group_size() {
    let mut specs = synthetic_runs(192, Some(2));
    assert!(specs.len() >= 3, "{} runs", specs.len());
    // Run 1 full-batch and the longest (the others one epoch): `Auto` trains it on all
    // members at every group size from 2 on, and spreads the others.
    let n = specs[1].train.len();
    assert!(n >= 4 * efa_train::evaluator::MICRO_BATCH, "{n} samples");
    for (i, s) in specs.iter_mut().enumerate() {
        if i == 1 {
            s.train_config.batch_size = n;
        } else {
            s.train_config.max_epochs = 1;
        }
    }
    for members in 2..=4 {
        let wide: Vec<usize> = (0..specs.len())
            .filter(|&i| pays_data_parallel(&specs, i, members))
            .collect();
        assert_eq!(wide, [1], "{members} members");
    }
    let solo: Vec<_> = run_all(&specs, 1, &Quiet)
        .unwrap()
        .iter()
        .map(fingerprint)
        .collect();
    for size in 1..=4 {
        for how in [Distribute::Batches, Distribute::Runs, Distribute::Auto] {
            let members = on_group(size, |m| run_all_in(&specs, 1, m, how, &Quiet).unwrap());
            for (rank, got) in members.iter().enumerate() {
                let got: Vec<_> = got.iter().map(fingerprint).collect();
                assert_eq!(got, solo, "{how:?}, {size} members, rank {rank}");
            }
        }
    }
}

#[test]
fn runs_go_longest_first_to_the_least_loaded_member() {
    let specs = synthetic_runs(48, None);
    let cost: Vec<f64> = specs.iter().map(efa_paper::runner::cost).collect();
    for members in 1..=5 {
        let owner = assign(&specs, members);
        assert_eq!(owner.len(), specs.len());
        assert!(owner.iter().all(|&m| m < members));
        // Replaying the rule by hand gives the same owners.
        let mut order: Vec<usize> = (0..specs.len()).collect();
        order.sort_by(|&a, &b| cost[b].total_cmp(&cost[a]).then(a.cmp(&b)));
        let mut load = vec![0.0f64; members];
        for i in order {
            let least = (0..members)
                .min_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b)))
                .unwrap();
            assert_eq!(owner[i], least, "run {i} with {members} members");
            load[least] += cost[i];
        }
    }
    // With as many members as runs, each member gets one run.
    let owner = assign(&specs, specs.len());
    let mut seen = owner.clone();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), specs.len());
}

#[test]
fn a_run_failing_on_its_member_fails_the_queue_on_every_member_naming_it() {
    // Run 2's recipe is invalid: whichever member trains it reports the error; the others,
    // which finished their runs, get it through the results exchange instead of waiting.
    let mut specs = synthetic_runs(48, Some(1));
    specs[2].train_config.batch_size = 0;
    for members in 2..=3 {
        let owner = assign(&specs, members)[2];
        let errors = on_group(members, |m| {
            run_all_in(&specs, 1, m, Distribute::Runs, &Quiet)
                .map(|done| done.len())
                .expect_err("the queue fails")
                .to_string()
        });
        for (rank, e) in errors.iter().enumerate() {
            assert!(e.contains("train.batch_size"), "rank {rank}: {e}");
            if rank != owner {
                assert!(e.contains(&format!("rank {owner}")), "rank {rank}: {e}");
            }
        }
    }
}
