//! The clean temperature protocol: the standardiser's moments against hand-computed values,
//! the standardised MSE against the raw-scale MSE of the back-transformed prediction (value
//! and gradient), and the runs the experiment builds from the shared data.

use efa_data::temperature::{City, TempDay, TemperatureData, TemperatureTable};
use efa_model::prelude::*;
use efa_paper::temperature::clean::{Standardiser, CLEAN_PATIENCE};
use efa_paper::temperature::{Options, Temperature};
use efa_paper::{DataOptions, Experiment, Models, Protocol, RunSettings};
use efa_train::Batching;

use efa_tape::Tape;
use ndarray::{ArrayD, IxDyn};
use std::collections::HashMap;
use std::path::PathBuf;

fn city(lat: f64, lon: f64) -> City {
    City {
        state: "S".into(),
        city: "C".into(),
        latitude: lat,
        longitude: lon,
    }
}

fn day(d: u32, temps: &[f64], lag: &[f64]) -> TempDay {
    TempDay {
        date: (2010, 10, d),
        temps: temps.to_vec(),
        lags: if lag.is_empty() {
            vec![]
        } else {
            vec![lag.to_vec()]
        },
    }
}

/// Two cities, two training days: temperatures 50, 60, 70, 80 (μ = 65, σ² = 125 by hand:
/// deviations ±15, ±5 → (225 + 25 + 25 + 225)/4); latitudes 30, 40 (μ 35, σ 5); longitudes
/// −100, −80 (μ −90, σ 10).
fn tiny() -> TemperatureData {
    let table = TemperatureTable {
        file: PathBuf::from("t.csv"),
        cities_file: PathBuf::from("c.csv"),
        cities: vec![city(30.0, -100.0), city(40.0, -80.0)],
        temps: HashMap::new(),
        lines: HashMap::new(),
        rows: 0,
        missing: 0,
        rows_excluded_state: 0,
        rows_duplicate: 0,
        excluded_cities: vec![],
    };
    TemperatureData {
        table,
        train: vec![
            day(1, &[50.0, 60.0], &[40.0, 41.0]),
            day(2, &[70.0, 80.0], &[]),
        ],
        val: vec![day(3, &[65.0, 90.0], &[])],
        test: vec![],
    }
}

#[test]
fn standardiser_moments_and_maps_match_hand_values() {
    let st = Standardiser::fit(&tiny()).unwrap();
    let sigma = 125f64.sqrt();
    assert!((st.temp_mean - 65.0).abs() < 1e-12);
    assert!((st.temp_std - sigma).abs() < 1e-12);
    assert_eq!(st.latitude, (35.0, 5.0));
    assert_eq!(st.longitude, (-90.0, 10.0));
    let z = st.data(&tiny());
    // Lag days use the training μ, σ; validation too (fitted on training only).
    assert!((z.train[0].lags[0][0] - (40.0 - 65.0) / sigma).abs() < 1e-12);
    assert!((z.val[0].temps[1] - (90.0 - 65.0) / sigma).abs() < 1e-12);
    // The raw city table is kept (the FM's neighbours use degrees).
    assert_eq!(z.table.cities[0].latitude, 30.0);
}

#[test]
fn standardiser_refuses_a_constant_split() {
    let mut d = tiny();
    for t in &mut d.train {
        t.temps = vec![5.0, 5.0];
    }
    let e = Standardiser::fit(&d).unwrap_err().to_string();
    assert!(e.contains("training temperatures"), "{e}");
}

#[test]
fn standardised_mse_is_the_raw_mse_of_the_back_transformed_prediction() {
    let (mu, sigma) = (56.0, 10.5);
    let y = [48.0, 61.5, 70.25];
    let eta = [-0.7, 0.3, 1.1];
    let z: Vec<f64> = y.iter().map(|v| (v - mu) / sigma).collect();
    // Raw scale, by hand: mean (y − (μ + σ·η))² and its derivative −2σ(y − μ − ση)/n.
    let raw: Vec<f64> = y
        .iter()
        .zip(&eta)
        .map(|(v, e)| v - (mu + sigma * e))
        .collect();
    let want = raw.iter().map(|r| r * r).sum::<f64>() / 3.0;
    let mut tape = Tape::<f64>::new();
    let x = tape.input(ArrayD::from_shape_vec(IxDyn(&[3, 1]), eta.to_vec()).unwrap());
    let loss = Objective::StandardisedMse { std: sigma }
        .loss(&mut tape, x, &Targets::Real(z))
        .unwrap();
    let got = tape.value(loss).iter().next().copied().unwrap();
    assert!((got - want).abs() < 1e-12 * want, "{got} vs {want}");
    let g = tape.backward(loss).unwrap();
    let gx = g.wrt(x).unwrap();
    for (i, r) in raw.iter().enumerate() {
        let want = -2.0 * sigma * r / 3.0;
        assert!((gx[[i, 0]] - want).abs() < 1e-12 * want.abs(), "η{i}");
    }
    // σ = 0 is an error naming σ; a Var of another tape is an error, not a panic.
    let mut other = Tape::<f64>::new();
    let x2 = other.input(ArrayD::zeros(IxDyn(&[3, 1])));
    let e = Objective::StandardisedMse { std: 0.0 }
        .loss(&mut other, x2, &Targets::Real(vec![0.0; 3]))
        .unwrap_err();
    assert!(e.to_string().contains("σ"), "{e}");
    let e = Objective::Mse
        .loss(&mut other, x, &Targets::Real(vec![0.0; 3]))
        .unwrap_err();
    assert!(e.to_string().contains("belongs to tape"), "{e}");
}

#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn clean_runs_are_standardised_day_batched_and_early_stopped() {
    let dir = efa_testkit::paper_data();
    let options = Options {
        layers: Some(1),
        k: vec![3],
        data: DataOptions {
            data: Some(dir),
            protocol: Protocol::Clean,
            ..DataOptions::default()
        },
        model: Models::Both,
        ..Options::default()
    };
    let exp = Temperature::new(&options).unwrap();
    let settings = RunSettings {
        epochs: None,
        seed: 0,
        plan: None,
        batching: Batching::Samples,
    };
    let runs = exp.runs(&settings).unwrap();
    assert_eq!(runs.len(), 2);
    let (efa, fm) = (&runs[0], &runs[1]);
    let Objective::StandardisedMse { std } = efa.objective else {
        panic!("EFA objective {:?}", efa.objective)
    };
    assert_eq!(fm.objective, efa.objective);
    // The training targets are standardised over the training split: mean 0, variance 1.
    let Targets::Real(y) = &efa.train.targets else {
        panic!("real targets")
    };
    let n = y.len() as f64;
    let mean = y.iter().sum::<f64>() / n;
    let var = y.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    assert!(
        mean.abs() < 1e-9 && (var - 1.0).abs() < 1e-9,
        "{mean} {var}"
    );
    assert!(std > 5.0 && std < 20.0, "σ = {std} °F");
    // Sites standardised per coordinate over the 44 cities.
    let ModelConfig::Efa(cfg) = &efa.model else {
        panic!("EFA model")
    };
    let sites = &cfg.continuous.as_ref().unwrap().sites;
    for c in 0..2 {
        let m = sites.iter().map(|s| s[c]).sum::<f64>() / sites.len() as f64;
        assert!(m.abs() < 1e-9, "coordinate {c} mean {m}");
    }
    // Whole days per minibatch, early stopping.
    let group = efa.train.group.as_ref().unwrap();
    assert_eq!(group[0], group[43]);
    assert_ne!(group[43], group[44]);
    assert_eq!(efa.train_config.batching, Batching::Sequences);
    assert_eq!(efa.train_config.patience, CLEAN_PATIENCE);
    assert!(efa.train_config.batch_size < efa.train.len());
    let _: &Samples = &fm.train;
}
