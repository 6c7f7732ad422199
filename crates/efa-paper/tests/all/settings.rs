//! Experiment options and run settings are checked before any data are read, and every
//! refusal names the option (its field) and the value given.

use efa_paper::{synthetic, temperature, DataOptions, Experiment, Models, PaperError, RunSettings};

/// The field, value and reason of a setting error (panics on any other error).
fn setting(e: PaperError) -> (&'static str, String, String) {
    match e {
        PaperError::Setting {
            field,
            value,
            reason,
        } => (field, value, reason),
        e => panic!("expected a setting error, got {e}"),
    }
}

#[test]
fn run_settings_refuse_zero_epochs_naming_the_field() {
    let s = RunSettings {
        epochs: Some(0),
        ..RunSettings::default()
    };
    let (field, value, reason) = setting(s.validate().unwrap_err());
    assert_eq!((field, value.as_str()), ("epochs", "0"));
    assert_eq!(reason, "must be at least 1 (0 epochs would train nothing)");
    assert_eq!(
        s.validate().unwrap_err().to_string(),
        "setting `epochs` = 0: must be at least 1 (0 epochs would train nothing)"
    );
    assert!(RunSettings::default().validate().is_ok());
    // The synthetic experiment's run list refuses it too (its data are generated, not read).
    let exp = synthetic::Synthetic::new(&synthetic::Options {
        users: 8,
        ..Default::default()
    })
    .unwrap();
    assert!(matches!(
        exp.runs(&s),
        Err(PaperError::Setting {
            field: "epochs",
            ..
        })
    ));
}

#[test]
fn synthetic_users_out_of_range_are_refused() {
    for users in [0, 4, 10, 4_000_000_000_000] {
        let e = synthetic::Synthetic::new(&synthetic::Options {
            users,
            ..Default::default()
        })
        .err()
        .unwrap();
        let (field, value, reason) = setting(e);
        assert_eq!((field, value), ("users", users.to_string()));
        assert_eq!(
            reason,
            "must be a multiple of 4, at least 8 and at most 1000000"
        );
    }
}

#[test]
fn temperature_options_are_named_before_the_data_directory_is_looked_at() {
    // A data directory that does not exist: the option is named first.
    let base = temperature::Options {
        data: DataOptions {
            data: Some("/nonexistent-efa-data".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let err = |o: temperature::Options| setting(temperature::Temperature::new(&o).err().unwrap());
    let cases: Vec<(temperature::Options, (&str, &str, &str))> = vec![
        (
            temperature::Options {
                layers: Some(0),
                ..base.clone()
            },
            ("layers", "0", "must be in 1..=1024"),
        ),
        (
            temperature::Options {
                layers: Some(100_000_000),
                ..base.clone()
            },
            ("layers", "100000000", "must be in 1..=1024"),
        ),
        (
            temperature::Options {
                lag: 7,
                ..base.clone()
            },
            ("lag", "7", "the paper's models use 0, 1 or 2 lag days"),
        ),
        (
            temperature::Options {
                fm_epochs: 0,
                ..base.clone()
            },
            ("fm_epochs", "0", "must be at least 1"),
        ),
        (
            temperature::Options {
                k: vec![3, 0],
                ..base.clone()
            },
            ("k", "[3, 0]", "needs neighbour counts of at least 1"),
        ),
        (
            temperature::Options {
                k: vec![],
                ..base.clone()
            },
            ("k", "[]", "needs neighbour counts of at least 1"),
        ),
        (
            temperature::Options {
                k: vec![1, 5, 2, 5],
                ..base.clone()
            },
            ("k", "5", "is given twice"),
        ),
        (
            temperature::Options {
                seeds: vec![4, 1, 4],
                ..base.clone()
            },
            ("seeds", "4", "is given twice"),
        ),
        (
            temperature::Options {
                seeds: vec![0, 1],
                model: Models::Fm,
                ..base.clone()
            },
            (
                "seeds",
                "[0, 1]",
                "sets the EFA's seeds, but model = fm runs no EFA (the FM uses the run seed)",
            ),
        ),
    ];
    for (o, (field, value, reason)) in cases {
        let (f, v, r) = err(o);
        assert_eq!((f, v.as_str(), r.as_str()), (field, value, reason));
    }
    // An EFA-only run does not need FM options; the missing directory is then the error.
    let e = temperature::Temperature::new(&temperature::Options {
        model: Models::Efa,
        k: vec![],
        ..base.clone()
    })
    .err()
    .unwrap();
    assert!(
        matches!(&e, PaperError::NoDataDir { given: Some(p) } if p.to_str() == Some("/nonexistent-efa-data")),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "data directory /nonexistent-efa-data: not a directory"
    );
}
