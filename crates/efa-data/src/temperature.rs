//! U.S. city temperatures (docs/paper.md §6.1): `us_cities_fall.csv` + `cities.csv` → the 44-city
//! October table, year splits, and lagged previous days.

use crate::csvfile::read_records;
use crate::error::{parse_field, parse_real};
use crate::DataError;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

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

/// Reads `cities.csv` (`state,city,latitude,longitude`). State and city must be non-empty, a
/// (state, city) pair listed once, and each coordinate a number finite in f32 (see
/// [`parse_real`]) inside [−90, 90] × [−180, 180]; the file must list at least one city. Every
/// error names the file, line and field.
pub fn load_cities(path: &Path) -> Result<Vec<City>, DataError> {
    let names = ["state", "city", "latitude", "longitude"];
    let mut cities: Vec<City> = Vec::new();
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    for (line, f) in read_records(path, &names)? {
        for k in 0..2 {
            if f[k].is_empty() {
                return Err(DataError::parse(path, line, names[k], "", "empty name"));
            }
        }
        let latitude = parse_real(path, line, names[2], &f[2])?;
        let longitude = parse_real(path, line, names[3], &f[3])?;
        if latitude.abs() > 90.0 {
            return Err(DataError::parse(
                path,
                line,
                names[2],
                &f[2],
                "latitude outside [-90, 90]",
            ));
        }
        if longitude.abs() > 180.0 {
            return Err(DataError::parse(
                path,
                line,
                names[3],
                &f[3],
                "longitude outside [-180, 180]",
            ));
        }
        if let Some(first) = seen.insert((f[0].clone(), f[1].clone()), line) {
            return Err(DataError::parse(
                path,
                line,
                names[1],
                &f[1],
                format!("city {}, {} already listed at line {first}", f[1], f[0]),
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
    /// The temperature file read (`us_cities_fall.csv`).
    pub file: PathBuf,
    /// The city file read (`cities.csv`).
    pub cities_file: PathBuf,
    /// Cities in `cities.csv` order, minus [`EXCLUDED_STATES`].
    pub cities: Vec<City>,
    /// `(city index, (year, month, day)) → °F`, or `None` for −99.
    pub temps: HashMap<(usize, Date), Option<f64>>,
    /// `(city index, day) →` the line of `file` it was read from (the first, for duplicates).
    pub lines: HashMap<(usize, Date), usize>,
    /// Data rows read.
    pub rows: usize,
    /// Rows holding −99 (kept as `None`).
    pub missing: usize,
    /// Rows of a city in one of [`EXCLUDED_STATES`] (the paper removes those states; counted).
    pub rows_excluded_state: usize,
    /// Exact duplicate rows (same city, day and value), kept once.
    pub rows_duplicate: usize,
    /// Cities of `cities.csv` removed because their state is excluded.
    pub excluded_cities: Vec<City>,
}

/// The lowest temperature there is: absolute zero, −459.67 °F.
pub const ABSOLUTE_ZERO_F: f64 = -459.67;

/// Reads `us_cities_fall.csv` (`state,city,year,month,day,avg_temp_f`) against the cities of
/// `cities.csv` ([`load_cities`]).
///
/// Checks, each an error naming the file, line and field: month 1..=12; a calendar day of that
/// month; `avg_temp_f` a number finite in f32 ([`parse_real`]) and not below absolute zero
/// (−99 is the archive's missing-day marker, kept as `None`); a city that is not in
/// `cities.csv` (naming both files) unless its state is one of [`EXCLUDED_STATES`], whose rows
/// are counted in [`TemperatureTable::rows_excluded_state`] (docs/paper.md §6.1 drops them);
/// the same city and day twice with different values (exact repeats are counted in
/// [`TemperatureTable::rows_duplicate`]); a file without data rows.
pub fn load_temperature_table(temps: &Path, cities: &Path) -> Result<TemperatureTable, DataError> {
    let (excluded, city_list): (Vec<City>, Vec<City>) = load_cities(cities)?
        .into_iter()
        .partition(|c| EXCLUDED_STATES.contains(&c.state.as_str()));
    let index: HashMap<(String, String), usize> = city_list
        .iter()
        .enumerate()
        .map(|(i, c)| ((c.state.clone(), c.city.clone()), i))
        .collect();
    let names = ["state", "city", "year", "month", "day", "avg_temp_f"];
    let mut t = TemperatureTable {
        file: temps.to_path_buf(),
        cities_file: cities.to_path_buf(),
        cities: city_list,
        temps: HashMap::new(),
        lines: HashMap::new(),
        rows: 0,
        missing: 0,
        rows_excluded_state: 0,
        rows_duplicate: 0,
        excluded_cities: excluded,
    };
    for (line, f) in read_records(temps, &names)? {
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
        let v = parse_real(temps, line, names[5], &f[5])?;
        if v < ABSOLUTE_ZERO_F {
            return Err(DataError::parse(
                temps,
                line,
                names[5],
                &f[5],
                "below absolute zero (-459.67 °F)",
            ));
        }
        let value = if v == MISSING { None } else { Some(v) };
        t.missing += value.is_none() as usize;
        let Some(&ci) = index.get(&(f[0].clone(), f[1].clone())) else {
            if EXCLUDED_STATES.contains(&f[0].as_str()) {
                t.rows_excluded_state += 1;
                continue;
            }
            return Err(DataError::parse(
                temps,
                line,
                names[1],
                &f[1],
                format!("{}, {} is not a city of {}", f[1], f[0], cities.display()),
            ));
        };
        let first = *t.lines.entry((ci, (year, month, day))).or_insert(line);
        match t.temps.insert((ci, (year, month, day)), value) {
            None => {}
            Some(old) if old == value => t.rows_duplicate += 1,
            Some(old) => {
                let old = old.map_or("-99 (missing)".to_string(), |o| o.to_string());
                return Err(DataError::parse(
                    temps,
                    line,
                    names[5],
                    &f[5],
                    format!(
                        "{}, {} on {year}-{month:02}-{day:02} already read as {old} at line \
                         {first}",
                        f[1], f[0]
                    ),
                ));
            }
        }
    }
    Ok(t)
}

impl TemperatureTable {
    /// One line for logs: rows read and what happened to the rows not used as values, e.g.
    /// `100100 rows read: 111 missing (-99, kept as gaps), 0 rows of excluded states, …`.
    pub fn summary(&self) -> String {
        format!(
            "{} rows read: {} missing (-99, kept as gaps), {} rows of the excluded states ({}), \
             {} exact duplicate rows kept once; {} cities ({} of {} excluded)",
            self.rows,
            self.missing,
            self.rows_excluded_state,
            EXCLUDED_STATES.join(", "),
            self.rows_duplicate,
            self.cities.len(),
            self.excluded_cities.len(),
            self.cities_file.display()
        )
    }
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
                Some(None) => Err(DataError::parse(
                    &self.file,
                    self.lines.get(&(ci, date)).copied().unwrap_or(0),
                    "avg_temp_f",
                    "-99",
                    format!(
                        "{}, {} on {y}-{m:02}-{d:02} is missing (-99), and the October table \
                         needs that day",
                        c.city, c.state
                    ),
                )),
                None => Err(DataError::in_file(
                    &self.file,
                    format!(
                        "no row for {}, {} (a city of {}) on {y}-{m:02}-{d:02}, which the \
                         October table needs",
                        c.city,
                        c.state,
                        self.cities_file.display()
                    ),
                )),
            })
            .collect()
    }

    /// Every October day of `years` (days 1..=31, years ascending) with `lag` previous days.
    /// A missing (−99) value for any city on a needed day is an error naming the file, line,
    /// city and date; an absent row names the file, city and date: the paper's table has none,
    /// and nothing is imputed.
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
