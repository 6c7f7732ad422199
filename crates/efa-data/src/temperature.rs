//! U.S. city temperatures (PAPER §6.1): `us_cities_fall.csv` + `cities.csv` → the 44-city
//! October table, year splits, and lagged previous days.

use crate::error::parse_field;
use crate::DataError;
use std::collections::HashMap;
use std::path::Path;

/// The value the archive uses for a missing day.
pub const MISSING: f64 = -99.0;
/// States the experiment removes entirely (they have −99 values in the window).
pub const EXCLUDED_STATES: [&str; 3] = ["Arizona", "Connecticut", "South Dakota"];

/// One city of `cities.csv` (`state,city,latitude,longitude`, decimal degrees).
#[derive(Clone, Debug, PartialEq)]
pub struct City {
    /// State name.
    pub state: String,
    /// City name.
    pub city: String,
    /// Latitude (degrees, raw: the paper does not normalise).
    pub latitude: f64,
    /// Longitude (degrees).
    pub longitude: f64,
}

fn open(path: &Path, want: &[&str]) -> Result<Vec<(usize, Vec<String>)>, DataError> {
    let f = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut r = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(f);
    let h = r
        .headers()
        .map_err(|e| DataError::parse(path, 1, "header", "", e.to_string()))?
        .clone();
    if h.iter().map(str::trim).collect::<Vec<_>>() != want {
        return Err(DataError::parse(
            path,
            1,
            "header",
            &h.iter().collect::<Vec<_>>().join(","),
            format!("expected {}", want.join(",")),
        ));
    }
    let mut out = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| {
            DataError::parse(
                path,
                e.position().map_or(0, |p| p.line() as usize),
                "line",
                "",
                e.to_string(),
            )
        })?;
        let line = rec.position().map_or(0, |p| p.line() as usize);
        if rec.len() != want.len() {
            let field = want.get(rec.len()).copied().unwrap_or("line");
            return Err(DataError::parse(
                path,
                line,
                field,
                &rec.iter().collect::<Vec<_>>().join(","),
                format!("expected {} fields, found {}", want.len(), rec.len()),
            ));
        }
        out.push((line, rec.iter().map(|s| s.trim().to_string()).collect()));
    }
    Ok(out)
}

/// Reads `cities.csv`; a repeated (state, city) or a coordinate outside [−90, 90] × [−180, 180]
/// is an error naming its line.
pub fn load_cities(path: &Path) -> Result<Vec<City>, DataError> {
    let names = ["state", "city", "latitude", "longitude"];
    let mut cities: Vec<City> = Vec::new();
    for (line, f) in open(path, &names)? {
        let latitude: f64 = parse_field(path, line, names[2], &f[2])?;
        let longitude: f64 = parse_field(path, line, names[3], &f[3])?;
        if latitude.is_nan() || latitude.abs() > 90.0 {
            return Err(DataError::parse(
                path,
                line,
                names[2],
                &f[2],
                "latitude outside [-90, 90]",
            ));
        }
        if longitude.is_nan() || longitude.abs() > 180.0 {
            return Err(DataError::parse(
                path,
                line,
                names[3],
                &f[3],
                "longitude outside [-180, 180]",
            ));
        }
        if cities.iter().any(|c| c.state == f[0] && c.city == f[1]) {
            return Err(DataError::parse(
                path,
                line,
                names[1],
                &f[1],
                format!("city {}, {} listed twice", f[1], f[0]),
            ));
        }
        cities.push(City {
            state: f[0].clone(),
            city: f[1].clone(),
            latitude,
            longitude,
        });
    }
    Ok(cities)
}

/// A calendar day.
pub type Date = (i32, u32, u32);

/// Daily temperatures of the known cities, as read.
#[derive(Clone, Debug)]
pub struct TemperatureTable {
    /// Cities in `cities.csv` order, minus [`EXCLUDED_STATES`].
    pub cities: Vec<City>,
    /// `(city index, (year, month, day)) → °F`, or `None` for −99.
    pub temps: HashMap<(usize, Date), Option<f64>>,
    /// Data rows read.
    pub rows: usize,
    /// Rows holding −99 (kept as `None`).
    pub missing: usize,
    /// Rows of cities not in `cities.csv` or in an excluded state (not used; counted).
    pub rows_other_city: usize,
    /// Exact duplicate rows (same city, day and value), kept once.
    pub rows_duplicate: usize,
    /// Cities of `cities.csv` removed because their state is excluded.
    pub excluded_cities: Vec<City>,
}

/// Reads `us_cities_fall.csv` (`state,city,year,month,day,avg_temp_f`) against the cities of
/// `cities.csv`. The same city and day twice with different values is an error.
pub fn load_temperature_table(temps: &Path, cities: &Path) -> Result<TemperatureTable, DataError> {
    let (excluded, cities): (Vec<City>, Vec<City>) = load_cities(cities)?
        .into_iter()
        .partition(|c| EXCLUDED_STATES.contains(&c.state.as_str()));
    let index: HashMap<(String, String), usize> = cities
        .iter()
        .enumerate()
        .map(|(i, c)| ((c.state.clone(), c.city.clone()), i))
        .collect();
    let names = ["state", "city", "year", "month", "day", "avg_temp_f"];
    let mut t = TemperatureTable {
        cities,
        temps: HashMap::new(),
        rows: 0,
        missing: 0,
        rows_other_city: 0,
        rows_duplicate: 0,
        excluded_cities: excluded,
    };
    for (line, f) in open(temps, &names)? {
        t.rows += 1;
        let year: i32 = parse_field(temps, line, names[2], &f[2])?;
        let month: u32 = parse_field(temps, line, names[3], &f[3])?;
        let day: u32 = parse_field(temps, line, names[4], &f[4])?;
        if !(1..=12).contains(&month) {
            return Err(DataError::parse(
                temps,
                line,
                names[3],
                &f[3],
                "month outside 1..=12",
            ));
        }
        if day == 0 || day > days_in_month(year, month) {
            return Err(DataError::parse(
                temps,
                line,
                names[4],
                &f[4],
                format!("no such day in {year}-{month:02}"),
            ));
        }
        let v: f64 = parse_field(temps, line, names[5], &f[5])?;
        if !v.is_finite() {
            return Err(DataError::parse(
                temps,
                line,
                names[5],
                &f[5],
                "not a finite temperature",
            ));
        }
        let value = if v == MISSING { None } else { Some(v) };
        t.missing += value.is_none() as usize;
        let Some(&ci) = index.get(&(f[0].clone(), f[1].clone())) else {
            t.rows_other_city += 1;
            continue;
        };
        match t.temps.insert((ci, (year, month, day)), value) {
            None => {}
            Some(old) if old == value => t.rows_duplicate += 1,
            Some(old) => {
                return Err(DataError::parse(
                    temps,
                    line,
                    names[5],
                    &f[5],
                    format!(
                        "{}, {} on {year}-{month:02}-{day:02} already read as {old:?}",
                        f[1], f[0]
                    ),
                ))
            }
        }
    }
    Ok(t)
}

/// Days in a month (Gregorian).
pub fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// The day before `d`.
pub fn previous_day((y, m, d): Date) -> Date {
    if d > 1 {
        (y, m, d - 1)
    } else if m > 1 {
        (y, m - 1, days_in_month(y, m - 1))
    } else {
        (y - 1, 12, 31)
    }
}

/// One October day: the 44 cities' temperatures plus `lag` previous days.
#[derive(Clone, Debug, PartialEq)]
pub struct TempDay {
    /// The day.
    pub date: Date,
    /// Temperatures in city order.
    pub temps: Vec<f64>,
    /// `lags[k]` = temperatures `k + 1` days earlier (Oct 1 uses Sep 30, …).
    pub lags: Vec<Vec<f64>>,
}

/// One masked-city sample (§6.1, §6.3).
#[derive(Clone, Debug, PartialEq)]
pub struct TempSample {
    /// Today's temperatures with the masked city set to 0, then each lag day's (all visible);
    /// length `n_cities·(1 + lag)`.
    pub temps: Vec<f64>,
    /// Masked position (= city index).
    pub masked_idx: usize,
    /// Lag indicator per position (0 = today, k = k days earlier).
    pub lag_ids: Vec<usize>,
    /// The true temperature (°F).
    pub target: f64,
}

impl TempDay {
    /// The sample masking city `i` (`i < temps.len()`, else an error).
    pub fn sample(&self, i: usize) -> Result<TempSample, DataError> {
        let n = self.temps.len();
        if i >= n {
            return Err(DataError::invalid(format!(
                "TempDay::sample: city {i} of {n}"
            )));
        }
        let mut temps = self.temps.clone();
        temps[i] = 0.0;
        let mut lag_ids = vec![0; n];
        for (k, l) in self.lags.iter().enumerate() {
            temps.extend_from_slice(l);
            lag_ids.extend(std::iter::repeat_n(k + 1, l.len()));
        }
        Ok(TempSample {
            temps,
            masked_idx: i,
            lag_ids,
            target: self.temps[i],
        })
    }
}

impl TemperatureTable {
    fn day_vector(&self, date: Date) -> Result<Vec<f64>, DataError> {
        let (y, m, d) = date;
        self.cities
            .iter()
            .enumerate()
            .map(|(ci, c)| match self.temps.get(&(ci, date)) {
                Some(Some(v)) => Ok(*v),
                Some(None) => Err(DataError::invalid(format!(
                    "{}, {}: {y}-{m:02}-{d:02} is missing (-99)",
                    c.city, c.state
                ))),
                None => Err(DataError::invalid(format!(
                    "{}, {}: no row for {y}-{m:02}-{d:02}",
                    c.city, c.state
                ))),
            })
            .collect()
    }

    /// Every October day of `years` (days 1..=31, years ascending) with `lag` previous days.
    /// A missing (−99) or absent value for any city on a needed day is an error naming the
    /// city and date: the paper's table has none, and nothing is imputed.
    pub fn october(
        &self,
        years: std::ops::RangeInclusive<i32>,
        lag: usize,
    ) -> Result<Vec<TempDay>, DataError> {
        let mut out = Vec::new();
        for y in years {
            for d in 1..=31 {
                let date = (y, 10, d);
                let temps = self.day_vector(date)?;
                let mut lags = Vec::with_capacity(lag);
                let mut p = date;
                for _ in 0..lag {
                    p = previous_day(p);
                    lags.push(self.day_vector(p)?);
                }
                out.push(TempDay { date, temps, lags });
            }
        }
        Ok(out)
    }
}

/// The temperature experiment's splits: train 2007–12, val 2013–16, test 2017–19.
#[derive(Clone, Debug)]
pub struct TemperatureData {
    /// What was read (cities, counts).
    pub table: TemperatureTable,
    /// Training days (186).
    pub train: Vec<TempDay>,
    /// Validation days (124).
    pub val: Vec<TempDay>,
    /// Test days (93).
    pub test: Vec<TempDay>,
}

impl TemperatureData {
    /// Number of samples in `days` (days × cities).
    pub fn n_samples(&self, days: &[TempDay]) -> usize {
        days.len() * self.table.cities.len()
    }
}

/// Loads `us_cities_fall.csv` and `cities.csv` from `dir` and builds the year splits with
/// `lag` previous days (0, 1 or 2 in the paper).
pub fn load_temperature(dir: &Path, lag: usize) -> Result<TemperatureData, DataError> {
    let table = load_temperature_table(&dir.join("us_cities_fall.csv"), &dir.join("cities.csv"))?;
    let train = table.october(2007..=2012, lag)?;
    let val = table.october(2013..=2016, lag)?;
    let test = table.october(2017..=2019, lag)?;
    Ok(TemperatureData {
        table,
        train,
        val,
        test,
    })
}
