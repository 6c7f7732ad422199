//! Malformed temperature files: every error names the file and, where there is one, the line
//! and field; values that overflow f32 are rejected at load.

use crate::common;

use common::{assert_at, scratch::scratch, write};
use efa_data::temperature::*;
use std::path::{Path, PathBuf};

const CITIES: &str = "state,city,latitude,longitude\n\
                      Alabama,Birmingham,33.5,-86.8\n\
                      Arizona,Phoenix,33.4,-112.0\n\
                      Iowa,Des Moines,41.6,-93.6\n";
const HEADER: &str = "state,city,year,month,day,avg_temp_f\n";

/// `cities.csv` of the fixture and a temperature file of `HEADER` + `rows`.
fn files(d: &Path, name: &str, rows: &str) -> (PathBuf, PathBuf) {
    let c = write(d, "cities.csv", CITIES);
    let t = write(d, name, format!("{HEADER}{rows}"));
    (t, c)
}

#[test]
fn temperatures_overflowing_f32_or_below_absolute_zero_are_rejected() {
    let d = scratch("efa-data-temp-values");
    let good = "Alabama,Birmingham,2010,10,1,71.0\n";
    // (value, message fragment); each row is line 3.
    let cases = [
        ("1e39", "overflows f32"),
        ("-1e39", "overflows f32"),
        // f32 overflows above (2 − 2⁻²⁴)·2¹²⁷ ≈ 3.4028235678e38 (f32::MAX plus half an ulp)
        ("3.40282357e38", "overflows f32"),
        ("1e300", "overflows f32"),
        ("inf", "not a finite number"),
        ("NaN", "not a finite number"),
        ("-459.68", "absolute zero"),
        ("warm", "cannot parse"),
        ("", "cannot parse"),
    ];
    for (k, (v, needle)) in cases.iter().enumerate() {
        let (t, c) = files(
            &d,
            &format!("t{k}.csv"),
            &format!("{good}Iowa,Des Moines,2010,10,1,{v}\n"),
        );
        assert_at(load_temperature_table(&t, &c), &t, 3, "avg_temp_f", needle);
    }
    // Just inside f32 (rounds to f32::MAX), absolute zero itself and a tiny value are kept.
    let (t, c) = files(
        &d,
        "ok.csv",
        "Iowa,Des Moines,2010,10,1,3.40282356e38\nIowa,Des Moines,2010,10,2,-459.67\n\
         Iowa,Des Moines,2010,10,3,1e-50\n",
    );
    let tab = load_temperature_table(&t, &c).unwrap();
    assert_eq!(tab.temps[&(1, (2010, 10, 2))], Some(-459.67));
    assert_eq!(tab.rows, 3);
}

#[test]
fn coordinates_overflowing_f32_or_out_of_range_are_rejected() {
    let d = scratch("efa-data-temp-coords");
    let head = "state,city,latitude,longitude\nAlabama,Birmingham,33.5,-86.8\n";
    let cases = [
        ("Iowa,Des Moines,1e300,-93.6", "latitude", "overflows f32"),
        ("Iowa,Des Moines,41.6,-1e39", "longitude", "overflows f32"),
        (
            "Iowa,Des Moines,NaN,-93.6",
            "latitude",
            "not a finite number",
        ),
        ("Iowa,Des Moines,41.6,180.5", "longitude", "[-180, 180]"),
        ("Iowa,Des Moines,-90.5,1", "latitude", "[-90, 90]"),
        ("Iowa,,41.6,-93.6", "city", "empty name"),
        (",Des Moines,41.6,-93.6", "state", "empty name"),
        (
            "Alabama,Birmingham,33.5,-86.8",
            "city",
            "already listed at line 2",
        ),
        ("Iowa,Des Moines,41.6", "longitude", "found 3"),
        ("Iowa,Des Moines,41.6,-93.6,7", "longitude", "found 5"),
    ];
    for (k, (row, field, needle)) in cases.iter().enumerate() {
        let c = write(&d, &format!("c{k}.csv"), format!("{head}{row}\n"));
        assert_at(load_cities(&c), &c, 3, field, needle);
    }
    let c = write(&d, "empty.csv", "state,city,latitude,longitude\n");
    assert_at(load_cities(&c), &c, 0, "", "no data rows");
    let c = write(&d, "header.csv", "state,city,lat,lon\n");
    assert_at(load_cities(&c), &c, 1, "header", "expected the header");
}

#[test]
fn cross_file_and_calendar_errors_name_both_files() {
    let d = scratch("efa-data-temp-cross");
    // A city of no excluded state that cities.csv lacks: an error naming both files.
    let (t, c) = files(
        &d,
        "unknown.csv",
        "Alabama,Birmingham,2010,10,1,71.0\nOhio,Akron Canton,2010,10,1,60.0\n",
    );
    let r = load_temperature_table(&t, &c);
    let msg = r.as_ref().map(|_| ()).unwrap_err().to_string();
    assert!(msg.contains(&c.display().to_string()), "{msg}");
    assert_at(r, &t, 3, "city", "is not a city of");
    // Rows of an excluded state are the paper's filter: counted, not an error.
    let (t, c) = files(
        &d,
        "excluded.csv",
        "Alabama,Birmingham,2010,10,1,71.0\nArizona,Tucson,2010,10,1,90.0\n",
    );
    let tab = load_temperature_table(&t, &c).unwrap();
    assert_eq!((tab.rows, tab.rows_excluded_state), (2, 1));
    assert!(tab.summary().contains("1 rows of the excluded states"));
    // Calendar and conflicts.
    let cases = [
        ("Iowa,Des Moines,2010,13,1,50.0", "month", "1..=12"),
        ("Iowa,Des Moines,2011,2,29,50.0", "day", "no such day"),
        ("Iowa,Des Moines,2010,10,x,50.0", "day", "cannot parse"),
        (
            "Alabama,Birmingham,2010,10,1,70.0",
            "avg_temp_f",
            "at line 2",
        ),
        (
            "Alabama,Birmingham,2010,10,1,-99",
            "avg_temp_f",
            "at line 2",
        ),
        ("Alabama,Birmingham,2010,10", "day", "found 4"),
    ];
    for (k, (row, field, needle)) in cases.iter().enumerate() {
        let (t, c) = files(
            &d,
            &format!("k{k}.csv"),
            &format!("Alabama,Birmingham,2010,10,1,71.0\n{row}\n"),
        );
        assert_at(load_temperature_table(&t, &c), &t, 3, field, needle);
    }
    let (t, c) = files(&d, "none.csv", "");
    assert_at(load_temperature_table(&t, &c), &t, 0, "", "no data rows");
    let (t, c) = files(&d, "bytes.csv", "");
    let mut bytes = std::fs::read(&t).unwrap();
    bytes.extend_from_slice(b"Iowa,Des Moines,2010,10,1,5\nIowa,Des \xffMoines,2010,10,2,5\n");
    std::fs::write(&t, bytes).unwrap();
    assert_at(load_temperature_table(&t, &c), &t, 3, "city", "utf-8");
}

#[test]
fn october_gaps_name_the_file_and_the_missing_line() {
    let d = scratch("efa-data-temp-october");
    let mut rows = String::new();
    for day in 1..=31 {
        rows += &format!("Alabama,Birmingham,2010,10,{day},70\n");
        let v = if day == 5 {
            "-99".into()
        } else {
            format!("{}", 50 + day)
        };
        if day != 9 {
            rows += &format!("Iowa,Des Moines,2010,10,{day},{v}\n");
        }
    }
    let (t, c) = files(&d, "oct.csv", &rows);
    let tab = load_temperature_table(&t, &c).unwrap();
    // Oct 5 of Des Moines is -99: header + 4 days × 2 rows + Birmingham's Oct 5 → line 11.
    assert_at(
        tab.october(2010..=2010, 0),
        &t,
        11,
        "avg_temp_f",
        "2010-10-05",
    );
    // Without a line to point at, the absent day names the file, the city and cities.csv.
    let mut fixed = tab.clone();
    fixed.temps.insert((1, (2010, 10, 5)), Some(55.0));
    let r = fixed.october(2010..=2010, 0);
    let msg = r.as_ref().map(|_| ()).unwrap_err().to_string();
    assert!(
        msg.contains("Des Moines, Iowa") && msg.contains("cities.csv"),
        "{msg}"
    );
    assert_at(r, &t, 0, "", "no row for Des Moines, Iowa (a city of");
}
