//! The real-data experiments' builders on the real files (../shared/data, or `EFA_DATA`),
//! against the check values of docs/paper.md (§3.2, §4.2, §5.2, §6.1, Appendix B) and the
//! parameter counts the notebooks printed or that follow from their layer shapes.

use efa::data::samples::Direction::{Bi, Uni};
use efa::model::batch::{Samples, Targets};
use efa::model::ModelConfig;
use efa::paper::movielens::{self as ml, Protocol, Variant};
use efa::paper::ModelKind::{Efa, Fm};
use efa::paper::{instacart, temperature};
use efa::train::TrainConfig;
use std::path::PathBuf;

fn data_dir() -> PathBuf {
    efa_testkit::paper_data()
}

fn cfg() -> TrainConfig {
    TrainConfig::paper(1, 0)
}

fn params(m: &ModelConfig) -> usize {
    m.init::<f32>(0).count()
}

fn classes(s: &Samples) -> &[usize] {
    match &s.targets {
        Targets::Class(c) => c,
        _ => panic!("expected class targets"),
    }
}

fn reals(s: &Samples) -> &[f64] {
    match &s.targets {
        Targets::Real(r) => r,
        _ => panic!("expected real targets"),
    }
}

#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn movielens_exp1_matches_the_notebooks_split_samples_and_models() {
    let data = ml::exp1_data(&data_dir(), Protocol::Paper).unwrap();
    assert_eq!(
        (data.train.len(), data.val.len(), data.test.len()),
        (480, 161, 219)
    );
    assert_eq!(data.max_len, 44);
    // First test basket: user 8 (Appendix B).
    assert_eq!(data.test[0], vec![29, 37, 2, 5, 49, 21, 18, 6, 28]);
    let efa = ml::item_spec(&data, Bi, Efa, 3.483, cfg(), 0).unwrap();
    assert_eq!(
        (efa.train.len(), efa.val.len(), efa.test.len()),
        (7252, 2484, 3408)
    );
    assert_eq!(
        efa.test
            .tokens
            .row(0)
            .iter()
            .take(10)
            .copied()
            .collect::<Vec<_>>(),
        vec![51, 37, 2, 5, 49, 21, 18, 6, 28, 0]
    );
    assert_eq!(
        (
            efa.test.pred_idx[0],
            efa.test.lengths[0],
            classes(&efa.test)[0]
        ),
        (0, 9, 28)
    );
    assert_eq!(params(&efa.model), 13_120);
    let fm_bi = ml::item_spec(&data, Bi, Fm, 3.566, cfg(), 0).unwrap();
    assert_eq!(fm_bi.test.width(), 43);
    assert_eq!(
        fm_bi
            .test
            .tokens
            .row(0)
            .iter()
            .take(9)
            .copied()
            .collect::<Vec<_>>(),
        vec![37, 2, 5, 49, 21, 18, 6, 28, 0]
    );
    assert_eq!(params(&fm_bi.model), 3_232);
    let fm_uni = ml::item_spec(&data, Uni, Fm, 3.534, cfg(), 0).unwrap();
    assert_eq!(fm_uni.test.width(), 44);
    // Position 2 of user 8: previous items, then MASK.
    assert_eq!(
        fm_uni
            .test
            .tokens
            .row(2)
            .iter()
            .take(4)
            .copied()
            .collect::<Vec<_>>(),
        vec![29, 37, 51, 0]
    );
    assert_eq!(classes(&fm_uni.test)[2], 1);
    assert_eq!(params(&fm_uni.model), 3_264);
}

#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn movielens_clean_protocol_uses_every_user() {
    let data = ml::exp1_data(&data_dir(), Protocol::Clean).unwrap();
    // 902 users: 676 train+val (split 507 / 169 by user) and 226 test, 13,757 ratings in all.
    assert_eq!(
        (data.train.len() + data.val.len(), data.test.len()),
        (676, 226)
    );
    assert_eq!(data.val.len(), 169);
    let all = [&data.train, &data.val, &data.test]
        .iter()
        .map(|b| ml::ItemData::samples(b))
        .sum::<usize>();
    assert_eq!(all, 13_757);
}

#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn movielens_exp2_matches_the_notebooks_split_and_first_sample() {
    let data = ml::exp2_data(&data_dir(), Protocol::Paper).unwrap();
    assert_eq!(
        (data.train.len(), data.val.len(), data.test_samples.len()),
        (6530, 2177, 3038)
    );
    let fm = ml::exp2_spec(&data, Variant::V1, Bi, Fm, cfg(), 0).unwrap();
    // "The first train sample of bidir FM after the split has context length 27 and target 3."
    assert_eq!((fm.train.lengths[0], reals(&fm.train)[0]), (27, 3.0));
    assert_eq!(params(&fm.model), 3_264);
    let efa = ml::exp2_spec(&data, Variant::V2, Uni, Efa, cfg(), 0).unwrap();
    assert_eq!(params(&efa.model), 23_425);
    // Test rating counts 676 / 1,287 / 1,075.
    let y = reals(&efa.test);
    let count = |r: f64| y.iter().filter(|&&v| v == r).count();
    assert_eq!((count(1.0), count(2.0), count(3.0)), (676, 1287, 1075));
    // MASK = 4 → its own (last) row of the 5-row table.
    assert_eq!(
        efa.test.values.as_ref().unwrap()[[0, efa.test.pred_idx[0]]],
        4
    );
}

#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn instacart_matches_the_notebooks_sizes_and_third_training_sample() {
    let exp = instacart::load(&data_dir()).unwrap();
    assert_eq!(&exp.val_order_ids[..2], &[1_536_267, 585_862]);
    let efa = instacart::spec(&exp, Uni, Efa, cfg(), 0).unwrap();
    assert_eq!(
        (efa.train.len(), efa.val.len(), efa.test.len()),
        (206_450, 68_895, 16_066)
    );
    assert_eq!(efa.train.width(), 24);
    let row: Vec<usize> = efa.train.tokens.row(2).iter().copied().collect();
    let mut want = vec![55, 54, 64, 20, 4, 1, 29, 21, 11, 8, 23];
    want.resize(24, 0);
    assert_eq!(row, want);
    assert_eq!(classes(&efa.train)[2], 11);
    assert_eq!(params(&efa.model), 13_312);
    assert_eq!(
        params(&instacart::spec(&exp, Bi, Fm, cfg(), 0).unwrap().model),
        4_064
    );
    assert_eq!(
        params(&instacart::spec(&exp, Uni, Fm, cfg(), 0).unwrap().model),
        4_096
    );
    // The attention baskets are the 10-item test baskets holding test samples 15–24 and 50–59.
    let starts: Vec<usize> = exp
        .data
        .test
        .iter()
        .scan(0, |s, b| {
            let a = *s;
            *s += b.len();
            Some(a)
        })
        .collect();
    assert_eq!(
        instacart::ATTENTION_BASKETS.map(|b| (starts[b], exp.data.test[b].len())),
        [(15, 10), (50, 10)]
    );
}

#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn temperature_matches_the_notebooks_sizes_values_and_parameter_counts() {
    let dir = data_dir();
    let data = temperature::load(&dir, 0).unwrap();
    assert_eq!(data.table.cities.len(), 44);
    let spec = temperature::efa_spec(&data, 1, 0, cfg(), 0).unwrap();
    assert_eq!(
        (spec.train.len(), spec.val.len(), spec.test.len()),
        (8184, 5456, 4092)
    );
    // Sample 0: 2007-10-01 with Birmingham, AL (city 0) masked; its value in the CSV is 70.8 °F.
    assert_eq!(reals(&spec.train)[0], 70.8);
    assert_eq!(spec.train.weights.as_ref().unwrap()[[0, 0]], 0.0);
    assert_eq!(spec.train.pred_idx[0], 0);
    // First test sample: 2017-10-01, Birmingham: 71.5 °F.
    assert_eq!(reals(&spec.test)[0], 71.5);
    assert_eq!(params(&spec.model), 30_049);
    assert_eq!(
        params(&temperature::efa_spec(&data, 2, 0, cfg(), 0).unwrap().model),
        38_593
    );
    assert_eq!(
        params(&temperature::efa_spec(&data, 4, 0, cfg(), 0).unwrap().model),
        55_681
    );
    for (lag, want) in [(1, 57_793), (2, 57_825)] {
        let d = temperature::load(&dir, lag).unwrap();
        let s = temperature::efa_spec(&d, 4, lag, cfg(), 0).unwrap();
        assert_eq!(s.train.width(), 44 * (1 + lag));
        assert_eq!(params(&s.model), want, "lag {lag}");
        // Lag positions hold the previous day, all visible, with lag indicators 1..=lag.
        assert_eq!(s.train.values.as_ref().unwrap()[[0, 44]], 1);
    }
    // FM with k = 1: the nearest other city's temperature that day is the only context weight.
    let fm = temperature::fm_spec(&data, 1, cfg(), 0).unwrap();
    let nbrs = temperature::neighbours(&data.table.cities);
    let w = fm.train.weights.as_ref().unwrap();
    assert_eq!(w[[0, 0]], data.train[0].temps[nbrs[0][0]]);
    assert_eq!(fm.train.center.as_ref().unwrap()[0], 1);
}
