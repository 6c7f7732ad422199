//! Synthetic split and per-position samples (docs/paper.md §2.1–§2.3).

use efa_data::*;

fn synthetic_data() -> RatingData {
    let rows = generate_synthetic(&SyntheticConfig::default());
    let (users, seqs) = sequences_by_user(&rows).unwrap();
    assert_eq!(users.len(), 10_000);
    let trainval = seqs[..7500].to_vec();
    let test = seqs[7500..].to_vec();
    RatingData::new(trainval, test, None, 42).unwrap()
}

#[test]
fn synthetic_split_sizes_and_masks() {
    let d = synthetic_data();
    assert_eq!(
        (d.train.len(), d.val.len(), d.test_samples.len()),
        (28_125, 9_375, 12_500)
    );
    assert_eq!(d.max_ctx, 5);
    // §2.2: train max 8.3766 → MASK 9.3766; test max 8.6808 → MASK 9.6808.
    assert_eq!(
        format!("{:.4} {:.4}", d.trainval_mask, d.test_mask),
        "9.3766 9.6808"
    );
    // Appendix A: first val sample index 24985 = user 4998 (index 4997), position 0;
    // first train index 28966 = user 5794 (index 5793), position 1.
    assert_eq!(
        d.val[0],
        SampleRef {
            seq: 24985 / 5,
            pos: 24985 % 5
        }
    );
    assert_eq!(
        d.train[0],
        SampleRef {
            seq: 28966 / 5,
            pos: 28966 % 5
        }
    );
    // Test samples: users ascending, then positions.
    assert_eq!(d.test_samples[7], SampleRef { seq: 1, pos: 2 });
}

#[test]
fn efa_and_fm_samples_for_test_user_7501() {
    let d = synthetic_data();
    let s = &d.test[0];
    let (m, r): (Vec<usize>, Vec<f64>) = s.iter().cloned().unzip();
    let mask = d.test_mask;
    // Target position 2 of the first test user (sample index 2).
    let bi = &d.efa_samples(Split::Test, Direction::Bi).unwrap()[2];
    assert_eq!(bi.movies, m);
    assert_eq!(bi.ratings, vec![r[0], r[1], mask, r[3], r[4]]);
    assert_eq!((bi.length, bi.pred_idx, bi.target), (5, 2, r[2]));
    let uni = &d.efa_samples(Split::Test, Direction::Uni).unwrap()[2];
    assert_eq!(uni.movies, vec![m[0], m[1], m[2], 0, 0]);
    assert_eq!(uni.ratings, vec![r[0], r[1], mask, 0.0, 0.0]);
    assert_eq!((uni.length, uni.pred_idx), (3, 2));
    let fb = &d.fm_samples(Split::Test, Direction::Bi).unwrap()[2];
    assert_eq!(fb.center, m[2]);
    assert_eq!(fb.context_movies, vec![m[0], m[1], m[3], m[4]]);
    assert_eq!(fb.context_ratings, vec![r[0], r[1], r[3], r[4]]);
    assert_eq!(fb.length, 4);
    let fu = d.fm_samples(Split::Test, Direction::Uni).unwrap();
    assert_eq!(fu[2].context_movies, vec![m[0], m[1], 0, 0]);
    assert_eq!(fu[2].length, 2);
    // idx = 0: empty context, length 1.
    assert_eq!(fu[0].context_movies, vec![0, 0, 0, 0]);
    assert_eq!(fu[0].context_ratings, vec![0.0; 4]);
    assert_eq!(fu[0].length, 1);
    // Train samples use the train+val MASK.
    let tr = &d.efa_samples(Split::Train, Direction::Bi).unwrap()[0];
    assert_eq!(tr.ratings[tr.pred_idx], d.trainval_mask);
}

#[test]
fn rating_rows_match_keras_truncation_table() {
    // §2.3 table with 50,002 rows.
    let n = 50_002;
    assert_eq!(rating_row(-2.5, n).unwrap(), 50_000);
    assert_eq!(rating_row(-2.0, n).unwrap(), 50_000);
    assert_eq!(rating_row(-1.999, n).unwrap(), 50_001);
    assert_eq!(rating_row(-0.3, n).unwrap(), 0);
    assert_eq!(rating_row(0.99, n).unwrap(), 0);
    assert_eq!(rating_row(1.0, n).unwrap(), 1);
    assert_eq!(rating_row(8.68, n).unwrap(), 8);
    assert_eq!(rating_row(9.3766, n).unwrap(), 9);
    assert!(rating_row(5.0, 5).is_err());
    assert!(rating_row(f64::NAN, 5).is_err());

    let d = synthetic_data();
    let all = d
        .trainval
        .iter()
        .chain(d.test.iter())
        .flatten()
        .map(|&(_, r)| r);
    let t = CompactRatingTable::new(all.chain([d.trainval_mask, d.test_mask])).unwrap();
    // Keys 0, −2, −1, 1..=8, 9 (MASK): 12 rows, ~12 used rows of the paper's table.
    assert_eq!(t.keys, vec![0, -2, -1, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(t.row(0.4).unwrap(), 0);
    assert_eq!(t.row(-2.7).unwrap(), 1);
    assert_eq!(t.row(d.test_mask).unwrap(), 11);
    assert!(t.row(12.0).is_err());
    // Equivalence: two ratings share a compact row iff they share a paper row.
    let probe = [-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 7.9, 8.1, 9.38, 9.68];
    for a in probe {
        for b in probe {
            let same_paper = rating_row(a, n).unwrap() == rating_row(b, n).unwrap();
            assert_eq!(
                t.row(a).unwrap() == t.row(b).unwrap(),
                same_paper,
                "{a} {b}"
            );
        }
    }
}

#[test]
fn bad_sample_requests_are_errors() {
    let seq = vec![(1usize, 2.0), (2, 3.0)];
    assert!(samples::efa_sample(&seq, 2, 5, 4.0, Direction::Bi).is_err());
    assert!(samples::fm_sample(&seq, 0, 0, Direction::Bi).is_err());
    assert!(RatingData::new(vec![seq.clone(); 4], vec![seq.clone()], Some(1), 42).is_err());
    assert!(RatingData::new(vec![vec![(0, 1.0)]; 4], vec![seq], None, 42).is_err());
}
