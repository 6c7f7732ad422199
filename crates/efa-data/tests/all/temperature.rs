//! Temperature table check values (docs/paper.md §6.1, SOURCE.md) and malformed-input errors.

use efa_data::temperature::*;
use std::path::PathBuf;

use efa_testkit::scratch;

#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn october_table_and_splits() {
    let dir = efa_testkit::paper_file("temperature");
    let d = load_temperature(&dir, 2).unwrap();
    let t = &d.table;
    assert_eq!(t.cities.len(), 44);
    assert!(t
        .cities
        .iter()
        .all(|c| !EXCLUDED_STATES.contains(&c.state.as_str())));
    // SOURCE.md: 100,100 rows, 111 values of -99, all cities known, no duplicates.
    assert_eq!(
        (t.rows, t.missing, t.rows_excluded_state, t.rows_duplicate),
        (100_100, 111, 0, 0)
    );
    assert!(
        t.summary().starts_with("100100 rows read: 111 missing"),
        "{}",
        t.summary()
    );
    assert_eq!(
        (
            d.n_samples(&d.train),
            d.n_samples(&d.val),
            d.n_samples(&d.test)
        ),
        (8_184, 5_456, 4_092)
    );
    // Oct 1: lag 1 = Sep 30, lag 2 = Sep 29; Oct 2: Oct 1 and Sep 30.
    let (d0, d1) = (&d.train[0], &d.train[1]);
    assert_eq!(d0.date, (2007, 10, 1));
    let b = t
        .cities
        .iter()
        .position(|c| c.city == "Birmingham")
        .unwrap();
    assert_eq!(d0.lags[0][b], t.temps[&(b, (2007, 9, 30))].unwrap());
    assert_eq!(d0.lags[1][b], t.temps[&(b, (2007, 9, 29))].unwrap());
    assert_eq!(d1.lags[0], d0.temps);
    assert_eq!(d1.lags[1], d0.lags[0]);
    assert_eq!(d.test.last().unwrap().date, (2019, 10, 31));
    let s = d0.sample(3).unwrap();
    assert_eq!(
        (s.temps.len(), s.masked_idx, s.target),
        (132, 3, d0.temps[3])
    );
    assert_eq!(s.temps[3], 0.0);
    assert_eq!(s.temps[44 + 3], d0.lags[0][3]);
    assert_eq!((s.lag_ids[0], s.lag_ids[44], s.lag_ids[131]), (0, 1, 2));
    assert!(d0.sample(44).is_err());
    // Sep 24, 2008 is -99 in every city: kept as missing, and fatal only when a day needs it.
    assert_eq!(t.temps[&(b, (2008, 9, 24))], None);
    assert_eq!(t.october(2008..=2008, 2).unwrap().len(), 31);
}

#[test]
fn fixtures_and_errors() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/temperature");
    let cities = dir.join("cities.csv");
    // The shared fixture's last line is a city of no excluded state that cities.csv lacks:
    // an error naming both files (it used to be counted and dropped).
    let e = load_temperature_table(&dir.join("temps.csv"), &cities)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("temps.csv:10: field `city` = \"Akron Canton\"") && e.contains("cities.csv"),
        "{e}"
    );
    // The same rows without it: 2 cities (+ Arizona, excluded), rows for Oct 1-2 2010 and
    // Sep 30; one -99 row, one row of the excluded state, one exact duplicate.
    let scratch = scratch::scratch("efa-data-temperature-fixture");
    let text = std::fs::read_to_string(dir.join("temps.csv")).unwrap();
    let kept: Vec<&str> = text.lines().filter(|l| !l.contains("Akron")).collect();
    let temps = scratch.join("temps.csv");
    std::fs::write(&temps, kept.join("\n") + "\n").unwrap();
    let t = load_temperature_table(&temps, &cities).unwrap();
    assert_eq!(t.cities.len(), 2);
    assert_eq!(t.excluded_cities.len(), 1);
    assert_eq!(
        (t.rows, t.missing, t.rows_excluded_state, t.rows_duplicate),
        (8, 1, 1, 1)
    );
    // Oct 2 of Birmingham is -99 (line 4): the table names the file and that line.
    let e = t.october(2010..=2010, 1).unwrap_err().to_string();
    assert!(
        e.contains("temps.csv:4: field `avg_temp_f` = \"-99\"") && e.contains("missing (-99)"),
        "{e}"
    );
    let err = |f: &str| {
        load_temperature_table(&dir.join(f), &cities)
            .unwrap_err()
            .to_string()
    };
    let e = err("temps_bad_value.csv");
    assert!(
        e.contains("temps_bad_value.csv:3: field `avg_temp_f` = \"warm\""),
        "{e}"
    );
    let e = err("temps_bad_day.csv");
    assert!(
        e.contains("temps_bad_day.csv:2: field `day` = \"31\""),
        "{e}"
    );
    let e = err("temps_conflict.csv");
    assert!(
        e.contains("temps_conflict.csv:3: field `avg_temp_f`") && e.contains("already read"),
        "{e}"
    );
    let e = load_cities(&dir.join("cities_bad.csv"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cities_bad.csv:3: field `latitude` = \"95.0\""),
        "{e}"
    );
}
