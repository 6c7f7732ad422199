//! One long sequence among short ones: user samples stored as sequences (memory grows with
//! the rows), each minibatch built at its own width, micro-batches and evaluation chunks cut
//! by a position budget as well as by count, with results equal to the per-sample mean and
//! bitwise independent of the thread count; the budget never binds for the paper's
//! experiments.

use efa_model::batch::{length_order, micro_batches};
use efa_model::{Samples, Targets};
use efa_train::evaluator::{
    eval_positions, EVAL_POSITIONS_PER_SAMPLE, MICRO_BATCH, MICRO_POSITIONS,
};
use efa_train::userdata::{build, read_csv, UserConfig, UserSet};
use efa_train::{Evaluator, Threads};
use std::path::{Path, PathBuf};

use efa_testkit::scratch;

const CONFIG: &str = "direction = \"bi\"\n[family]\nkind = \"poisson\"\n[model.efa]\nitems = 6\nitem_dim = 3\nlayers = 1\nheads = 1\nkey_dim = 2\nout_dim = 1\nout_bias = true\nvalues = { rows = 6, dim = 2 }\n[train]\nlr = 0.01\nbatch_size = 4096\nmax_epochs = 1\npatience = 1\nseed = 0\neval_batch = 4096\n";

/// A CSV with one sequence `long` of `n` rows after 20 short sequences of 2–5 rows; items
/// and values follow fixed patterns.
fn write_csv(dir: &Path, n: usize) -> PathBuf {
    let mut s = String::from("seq,order,item,value\n");
    for k in 0..20 {
        for o in 0..2 + k % 4 {
            s += &format!("s{k},{o},{},{}\n", 1 + (k + o) % 5, (k * o) % 4);
        }
    }
    for o in 0..n {
        s += &format!("long,{o},{},{}\n", 1 + (o * 7) % 5, (o * 3) % 4);
    }
    let p = dir.join("long.csv");
    std::fs::write(&p, s).unwrap();
    p
}

fn config(text: &str) -> UserConfig {
    UserConfig::from_toml(text, Path::new("c.toml")).unwrap().0
}

#[test]
fn user_samples_are_stored_once_and_built_at_each_minibatch_width() {
    let dir = scratch::scratch("efa-long-set");
    let cfg = config(CONFIG);
    let data = read_csv(&write_csv(&dir, 3000), &cfg).unwrap();
    let u = build(&data, &cfg);
    let set: &UserSet = &u.samples;
    // 70 short rows (20 sequences of 2, 3, 4, 5 rows, five times over) and 3000 long ones;
    // bidirectional: one sample per row.
    assert_eq!(set.rows(), 70 + 3000);
    assert_eq!(set.len(), 3070);
    assert_eq!(u.targets.len(), 3070);
    assert_eq!(set.longest(), 3000);
    // The samples of sequence s3 (rows 9..14 of the file: 5 rows) alone: width 5, not the
    // 3000 a dense layout of every sample has. s3: items 1 + (3 + o) % 5 = 4, 5, 1, 2, 3 and
    // values (3·o) % 4 = 0, 3, 2, 1, 0 → value rows 1, 4, 3, 2, 1; [MASK] = row 5.
    let first = 2 + 3 + 4; // s0, s1, s2
    let b = set.select(&[first, first + 2]);
    assert_eq!(b.width(), 5);
    assert_eq!(b.tokens, ndarray::array![[4, 5, 1, 2, 3], [4, 5, 1, 2, 3]]);
    assert_eq!(
        b.values.unwrap(),
        ndarray::array![[5, 4, 3, 2, 1], [1, 4, 5, 2, 1]]
    );
    assert_eq!((b.lengths, b.pred_idx), (vec![5, 5], vec![0, 2]));
    assert_eq!(b.targets, Targets::Real(vec![0.0, 2.0]));
    // Any selection equals the dense layout's rows on its own width (zeros beyond).
    let dense = set.dense();
    assert_eq!(dense.width(), 3000);
    let idx = [3069, 5, 0, 70, 12];
    let sel = set.select(&idx);
    let full = dense.select(&idx);
    let w = sel.width();
    assert_eq!(w, 3000);
    assert_eq!(sel.tokens, full.tokens.slice(ndarray::s![.., ..w]));
    let short = set.select(&idx[1..3]);
    assert_eq!(short.width(), 4);
    let full = dense.select(&idx[1..3]);
    assert_eq!(short.tokens, full.tokens.slice(ndarray::s![.., ..4]));
    assert_eq!(
        short.values.unwrap(),
        full.values.as_ref().unwrap().slice(ndarray::s![.., ..4])
    );
    assert!(full
        .tokens
        .slice(ndarray::s![.., 4..])
        .iter()
        .all(|&t| t == 0));
}

#[test]
fn micro_batches_respect_the_sample_count_and_the_position_budget() {
    // 300 samples of length 10, 70 of length 1000 and one of 100,000, in length order.
    let lengths: Vec<usize> = std::iter::repeat_n(10, 300)
        .chain(std::iter::repeat_n(1000, 70))
        .chain([100_000])
        .collect();
    let n = lengths.len();
    let set = Samples {
        tokens: ndarray::Array2::zeros((n, 1)),
        values: None,
        weights: None,
        center: None,
        lengths,
        pred_idx: vec![0; n],
        targets: Targets::Real(vec![0.0; n]),
        group: None,
    };
    let order: Vec<usize> = (0..n).collect();
    let pieces = micro_batches(&set, &order, 128, 65_536);
    // By hand: 128 and 128 short ones; then the last 44 short ones take up to 65,536 / 1000
    // = 65 samples once a long one joins (44 + 21); the other 49 long ones (49,000
    // positions) cannot take the 100,000 one (50 × 100,000), which is a piece of its own.
    let sizes: Vec<usize> = pieces.iter().map(|r| r.len()).collect();
    assert_eq!(sizes, vec![128, 128, 65, 49, 1]);
    assert_eq!(pieces.last().unwrap().start, n - 1);
    // Without a binding budget the pieces are the plain chunks of 128.
    let pieces = micro_batches(&set, &order[..300], 128, 65_536);
    let chunks: Vec<usize> = order[..300].chunks(128).map(<[usize]>::len).collect();
    assert_eq!(pieces.iter().map(|r| r.len()).collect::<Vec<_>>(), chunks);
    // The constants: 128 samples of the paper's widest samples (132) stay under the budget.
    assert_eq!((MICRO_BATCH, MICRO_POSITIONS), (128, 65_536));
    const { assert!(128 * 132 <= MICRO_POSITIONS) };
    assert_eq!(EVAL_POSITIONS_PER_SAMPLE, 512);
    assert_eq!(eval_positions(1024), 1024 * 512);
}

/// The mean nll and gradients of `set` computed one sample at a time (batches of one,
/// summed in f64 in index order): a reference independent of any micro-batch split.
fn per_sample_mean(
    eval: &Evaluator<'_>,
    params: &efa_model::Params<f64>,
    set: &UserSet,
) -> (f64, Vec<ndarray::ArrayD<f64>>) {
    let n = set.len() as f64;
    let mut loss = 0.0;
    let mut grads: Vec<ndarray::ArrayD<f64>> = params
        .iter()
        .map(|(_, p)| ndarray::ArrayD::zeros(p.raw_dim()))
        .collect();
    for i in 0..set.len() {
        let g = eval.micro(params, &set.select(&[i])).unwrap();
        loss += g.loss / n;
        for (acc, gi) in grads.iter_mut().zip(g.grads) {
            acc.scaled_add(1.0 / n, &gi);
        }
    }
    (loss, grads)
}

fn pool(threads: usize) -> Threads {
    Threads::new(threads).unwrap()
}

#[test]
fn a_binding_budget_gives_the_per_sample_mean_with_the_same_bits_on_any_thread_count() {
    let dir = scratch::scratch("efa-long-grads");
    let cfg = config(CONFIG);
    // 600 rows: 128 samples × 600 positions = 76,800 > 65,536, so the budget binds and the
    // long sequence's 600 samples are cut into pieces of at most 109.
    let data = read_csv(&write_csv(&dir, 600), &cfg).unwrap();
    let set = build(&data, &cfg).samples;
    let order = length_order(&set, &(0..set.len()).collect::<Vec<_>>());
    let pieces = micro_batches(&set, &order, MICRO_BATCH, MICRO_POSITIONS);
    let longest_piece = pieces
        .iter()
        .filter(|r| set.length(order[r.start]) == 600)
        .map(|r| r.len())
        .max()
        .unwrap();
    assert_eq!(longest_piece, 65_536 / 600);
    let objective = cfg.objective();
    let eval = Evaluator::new(&cfg.model, &objective);
    let params = cfg.model.init::<f64>(3);
    let (ref_loss, ref_grads) = per_sample_mean(&eval, &params, &set);
    // One minibatch of every sample (batch_size 4096 ≥ 670): training's gradient.
    let dense = set.dense();
    let runs: Vec<(f64, Vec<ndarray::ArrayD<f64>>, f64)> = [1, 2]
        .iter()
        .map(|&t| {
            let threads = pool(t);
            let eval = eval.with_threads(&threads);
            let (l, g) = eval.loss_and_grads(&params, &dense).unwrap();
            // Evaluation chunks of 8 samples: budget 8 × 512 = 4096 positions, so the long
            // sequence's samples go 6 to a chunk.
            let e = eval.evaluate(&params, &set, 8).unwrap();
            (l, g, e)
        })
        .collect();
    let scale = ref_grads
        .iter()
        .flat_map(|g| g.iter())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    for (l, g, e) in &runs {
        assert!(
            (l - ref_loss).abs() <= 1e-12 * ref_loss.abs(),
            "{l} vs {ref_loss}"
        );
        assert!(
            (e - ref_loss).abs() <= 1e-12 * ref_loss.abs(),
            "{e} vs {ref_loss}"
        );
        for (a, b) in g.iter().zip(&ref_grads) {
            for (x, y) in a.iter().zip(b.iter()) {
                assert!((x - y).abs() <= 1e-12 * scale, "{x} vs {y}");
            }
        }
    }
    // Bitwise equal across thread counts.
    let bits = |r: &(f64, Vec<ndarray::ArrayD<f64>>, f64)| {
        (
            r.0.to_bits(),
            r.2.to_bits(),
            r.1.iter()
                .flat_map(|g| g.iter().map(|v| v.to_bits()))
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(bits(&runs[0]), bits(&runs[1]));
    // Predictions in chunks of 8 (positions budget 4096) equal one sample at a time.
    let two = pool(2);
    let eta = eval.with_threads(&two).predict(&params, &set, 8).unwrap();
    for i in [0, 69, 70, 400, 669] {
        let one = eval.predict(&params, &set.select(&[i]), 1).unwrap();
        assert!((eta[[i, 0]] - one[[0, 0]]).abs() <= 1e-12 * one[[0, 0]].abs().max(1.0));
    }
}
