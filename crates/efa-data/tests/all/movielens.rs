//! MovieLens check values (docs/paper.md §3–§4, Appendix B) on the shared u.data.

use efa_data::movielens::*;
use efa_data::{Direction, Split};
use std::path::PathBuf;

fn u_data() -> PathBuf {
    efa_testkit::paper_file("movielens/u.data")
}

#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn exp1_preprocessing_and_split() {
    let p = u_data();
    let raw = load_u_data(&p).unwrap();
    assert_eq!(
        (raw.rows.len(), raw.n_users, raw.n_items),
        (100_000, 943, 1682)
    );
    let prep = preprocess(&raw, MlExperiment::Exp1).unwrap();
    assert_eq!(
        (prep.users.len(), prep.movie_ids.len(), prep.n_ratings()),
        (902, 50, 13_757)
    );
    assert_eq!(prep.movie_ids, EXP1_TOP50.to_vec());
    let r = &prep.report;
    assert_eq!(raw.rows.len() - r.rows_not_top50, 17_841);
    assert_eq!(r.users_timestamp_dup, 39);
    assert_eq!(r.rows_dedup, 3_678);
    // The log line carries the same counts (§3.1: 39 users, 3,678 dedup rows).
    let line = r.summary();
    assert!(
        line.starts_with("100000 rows read; removed: 0 with rating - 2 <= 0, 82159 outside")
            && line.contains(" 39 users with count / unique timestamps")
            && line.contains("3678 duplicate (user, timestamp) rows"),
        "{line}"
    );
    let want: Vec<(usize, usize)> = vec![
        (2, 2254),
        (3, 442),
        (4, 113),
        (5, 26),
        (6, 12),
        (7, 5),
        (8, 1),
    ];
    assert_eq!(r.dedup_groups.clone().into_iter().collect::<Vec<_>>(), want);
    // User 943: 14 12 19 40 2 5 46 27 39 10 … 26 15 44 49 22 23 13 8 41 20.
    let u943: Vec<usize> = prep.user(943).unwrap().iter().map(|x| x.0).collect();
    assert_eq!(&u943[..10], &[14, 12, 19, 40, 2, 5, 46, 27, 39, 10]);
    assert_eq!(
        &u943[u943.len() - 10..],
        &[26, 15, 44, 49, 22, 23, 13, 8, 41, 20]
    );

    let split = buggy_user_split(&prep, 42);
    assert_eq!(
        (split.trainval.len(), split.test.len(), split.dropped.len()),
        (641, 219, 42)
    );
    assert!(split.dropped.iter().all(|&u| u >= 902));
    assert_eq!(
        (split.test[0], split.test[1], *split.test.last().unwrap()),
        (8, 14, 891)
    );
    let rows = |us: &[u32]| {
        us.iter()
            .map(|&u| prep.user(u).unwrap().len())
            .sum::<usize>()
    };
    assert_eq!((rows(&split.trainval), rows(&split.test)), (9_736, 3_408));

    let b = exp1_baskets(&prep, &split).unwrap();
    assert_eq!(
        (b.train.len(), b.val.len(), b.test.len(), b.max_len),
        (480, 161, 219, 44)
    );
    assert_eq!(b.test[0], (8, vec![29, 37, 2, 5, 49, 21, 18, 6, 28]));
    let n = |v: &[(u32, Vec<usize>)]| v.iter().map(|x| x.1.len()).sum::<usize>();
    assert_eq!((n(&b.train), n(&b.val)), (7_252, 2_484));
    // Appendix B val users: 161, first 3 7 9, last 900 (as a set; val is in split order).
    let mut val: Vec<u32> = b.val.iter().map(|x| x.0).collect();
    val.sort();
    assert_eq!(
        (val[0], val[1], val[2], *val.last().unwrap()),
        (3, 7, 9, 900)
    );
}

#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn exp2_preprocessing_split_and_samples() {
    let p = u_data();
    let raw = load_u_data(&p).unwrap();
    let prep = preprocess(&raw, MlExperiment::Exp2).unwrap();
    assert_eq!(raw.rows.len() - prep.report.rows_low_rating, 82_520);
    assert_eq!(
        (prep.users.len(), prep.movie_ids.len(), prep.n_ratings()),
        (893, 50, 12_465)
    );
    assert_eq!(prep.movie_ids, EXP2_TOP50.to_vec());
    assert_eq!(
        (
            prep.report.users_timestamp_dup,
            prep.report.users_single_rating,
            prep.report.rows_dedup
        ),
        (40, 8, 3_296)
    );
    let mut counts = [0usize; 4];
    prep.sequences
        .iter()
        .flatten()
        .for_each(|&(_, r)| counts[r as usize] += 1);
    assert_eq!(&counts[1..], &[2_879, 5_245, 4_341]);
    let u2 = prep.user(2).unwrap();
    assert_eq!(
        u2.iter().map(|x| x.0).collect::<Vec<_>>(),
        vec![30, 29, 31, 23, 4, 32, 33, 34, 35, 36, 37]
    );
    assert_eq!(
        u2.iter().map(|x| x.1).collect::<Vec<_>>(),
        vec![2., 1., 1., 2., 2., 3., 2., 2., 2., 3., 2.]
    );

    let split = buggy_user_split(&prep, 42);
    assert_eq!(
        (split.trainval.len(), split.test.len(), split.dropped.len()),
        (631, 211, 51)
    );
    assert_eq!(
        (split.test[0], split.test[1], *split.test.last().unwrap()),
        (6, 9, 892)
    );
    let d = exp2_rating_data(&prep, &split).unwrap();
    assert_eq!(
        (d.train.len(), d.val.len(), d.test_samples.len(), d.max_ctx),
        (6_530, 2_177, 3_038, 44)
    );
    assert_eq!((d.trainval_mask, d.test_mask), (4.0, 4.0));
    let fm = d.fm_samples(Split::Train, Direction::Bi).unwrap();
    assert_eq!((fm[0].length, fm[0].target), (27, 3.0));
    assert_eq!(fm[0].context_movies.len(), 43);
    let mut tc = [0usize; 4];
    d.test
        .iter()
        .flatten()
        .for_each(|&(_, r)| tc[r as usize] += 1);
    assert_eq!(&tc[1..], &[676, 1_287, 1_075]);
}

#[test]
fn malformed_u_data_errors_name_file_line_field() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/movielens");
    let ok = load_u_data(&dir.join("u_small.data")).unwrap();
    assert_eq!((ok.rows.len(), ok.n_users), (6, 2));
    let e = load_u_data(&dir.join("u_bad_rating.data"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("u_bad_rating.data:3: field `rating` = \"x\""),
        "{e}"
    );
    let e = load_u_data(&dir.join("u_bad_fields.data"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("u_bad_fields.data:2:") && e.contains("expected 4"),
        "{e}"
    );
    let e = load_u_data(&dir.join("missing.data"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.data"), "{e}");
}

/// Appendix B lists, verbatim.
const EXP1_TEST: [u32; 219] = [
    8, 14, 15, 16, 18, 20, 26, 27, 39, 40, 42, 43, 45, 53, 55, 59, 63, 65, 82, 85, 92, 95, 100,
    103, 105, 109, 112, 113, 116, 117, 118, 123, 125, 130, 147, 148, 152, 154, 157, 158, 160, 167,
    178, 181, 182, 185, 186, 189, 198, 210, 211, 219, 224, 228, 230, 234, 235, 236, 242, 255, 258,
    270, 283, 289, 297, 301, 303, 309, 310, 323, 324, 325, 328, 329, 330, 339, 343, 344, 351, 353,
    355, 358, 361, 362, 371, 377, 381, 383, 385, 387, 392, 393, 397, 399, 403, 406, 410, 415, 416,
    418, 423, 426, 434, 438, 443, 455, 461, 463, 464, 465, 467, 471, 480, 482, 484, 489, 492, 494,
    495, 502, 507, 509, 513, 522, 523, 524, 526, 529, 538, 542, 548, 552, 554, 563, 570, 573, 576,
    577, 578, 581, 584, 587, 593, 603, 605, 609, 612, 623, 624, 625, 629, 638, 643, 644, 648, 649,
    654, 655, 659, 663, 666, 669, 671, 674, 675, 678, 681, 683, 686, 693, 696, 697, 698, 704, 710,
    714, 721, 726, 739, 742, 743, 746, 751, 755, 763, 768, 770, 772, 773, 777, 782, 784, 786, 790,
    793, 802, 803, 807, 811, 816, 823, 825, 828, 835, 837, 838, 852, 853, 856, 860, 864, 875, 877,
    880, 881, 885, 886, 890, 891,
];
const EXP1_VAL: [u32; 161] = [
    3, 7, 9, 12, 33, 38, 41, 44, 54, 57, 61, 68, 73, 75, 76, 80, 84, 87, 91, 93, 96, 101, 102, 104,
    108, 110, 119, 124, 141, 145, 151, 155, 156, 163, 168, 187, 188, 190, 192, 197, 203, 206, 215,
    220, 226, 229, 232, 243, 245, 246, 251, 265, 273, 284, 287, 288, 290, 292, 295, 299, 308, 317,
    318, 321, 333, 337, 338, 340, 354, 356, 357, 363, 365, 372, 378, 389, 395, 400, 402, 412, 421,
    422, 429, 430, 437, 440, 449, 453, 458, 459, 460, 473, 474, 475, 477, 479, 486, 499, 503, 504,
    508, 514, 519, 528, 535, 560, 588, 594, 595, 597, 602, 607, 608, 613, 615, 616, 619, 633, 652,
    658, 661, 662, 667, 673, 679, 680, 682, 688, 690, 707, 716, 717, 723, 727, 735, 744, 745, 748,
    765, 778, 789, 796, 808, 809, 829, 831, 840, 841, 842, 845, 846, 850, 851, 862, 868, 874, 879,
    887, 897, 898, 900,
];
const EXP2_TEST: [u32; 211] = [
    6, 9, 11, 14, 16, 20, 26, 27, 29, 39, 40, 42, 43, 48, 56, 57, 59, 68, 80, 92, 93, 97, 108, 111,
    112, 115, 119, 120, 126, 127, 130, 148, 155, 156, 170, 171, 178, 183, 186, 189, 193, 195, 196,
    197, 204, 207, 211, 218, 223, 224, 230, 238, 239, 244, 253, 263, 265, 266, 270, 272, 281, 282,
    291, 294, 296, 297, 308, 309, 311, 313, 315, 318, 321, 326, 327, 330, 332, 334, 335, 339, 341,
    343, 344, 348, 350, 354, 359, 360, 367, 373, 384, 385, 387, 393, 395, 398, 399, 404, 405, 406,
    409, 411, 420, 426, 428, 430, 432, 440, 445, 448, 455, 456, 461, 471, 484, 490, 494, 499, 500,
    501, 502, 509, 511, 517, 523, 524, 528, 532, 534, 540, 542, 544, 550, 553, 555, 559, 563, 573,
    577, 579, 581, 584, 592, 594, 602, 608, 612, 617, 621, 623, 624, 625, 627, 629, 632, 635, 637,
    644, 647, 649, 651, 658, 663, 664, 666, 667, 674, 677, 681, 682, 683, 684, 694, 696, 703, 707,
    711, 714, 718, 743, 748, 750, 751, 764, 775, 777, 788, 792, 794, 795, 798, 800, 805, 807, 809,
    810, 819, 820, 829, 832, 835, 837, 851, 852, 856, 864, 867, 870, 877, 886, 892,
];

#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn appendix_b_user_lists_in_full() {
    let p = u_data();
    let raw = load_u_data(&p).unwrap();
    let prep1 = preprocess(&raw, MlExperiment::Exp1).unwrap();
    let s1 = buggy_user_split(&prep1, 42);
    assert_eq!(s1.test, EXP1_TEST.to_vec());
    let mut val: Vec<u32> = exp1_baskets(&prep1, &s1)
        .unwrap()
        .val
        .iter()
        .map(|x| x.0)
        .collect();
    val.sort();
    assert_eq!(val, EXP1_VAL.to_vec());
    let prep2 = preprocess(&raw, MlExperiment::Exp2).unwrap();
    assert_eq!(buggy_user_split(&prep2, 42).test, EXP2_TEST.to_vec());
}
