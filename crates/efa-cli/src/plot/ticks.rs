//! Axis ticks a person reads at a glance: round values, just enough digits. The charts hand
//! them to plotters as the axes' key points: plotters' own choice has no tick at all on a
//! log axis over less than a decade (a loss curve's usual range) and prints its own digits.
//!
//! * Linear axes ([`linear`]): the step is the smallest `s = m·10^k`, `m ∈ {1, 2, 5}`, with
//!   `(hi − lo)/s ≤ 5` (on an integer axis, such as epochs, also `s ≥ 1`); the axis is widened
//!   to the enclosing multiples `⌊lo/s⌋·s … ⌈hi/s⌉·s`, which are the first and last ticks, so the
//!   ticks cover the data. A tick is `i·m·10^k` computed from the integer `i·m` (no running
//!   sum, so no 0.30000000000000004).
//! * Log axes ([`log`], data > 0), by the ratio `r = hi/lo` of the data: `r ≥ 100` (two decades
//!   or more): powers of ten, every `n`-th decade when there are more than 10
//!   (`n = ⌈decades/10⌉`); `3 ≤ r < 100`: the values `{1, 2, 5}·10^k`; `r < 3` (under half a
//!   decade, where 1-2-5 would leave one or two ticks): the linear ticks of `[lo, hi]`, placed
//!   on the log scale (their first tick is > 0 because `s < (hi − lo)/2 < lo`). The axis runs
//!   from the largest tick value ≤ `lo` to the smallest ≥ `hi`.
//! * Labels ([`label`]): a tick that is a multiple of `10^k` is printed with `max(0, −k)`
//!   decimals, trailing zeros dropped (`9`, `9.5`, `10`); scientific notation (`2e-6`,
//!   `1.5e6`) when `|v| ≥ 10^6` or `k < −4`, with the mantissa digits the value needs.

/// Ticks of one axis: the axis bounds (data units) and the tick values with their labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Ticks {
    /// Lower end of the axis (the first tick).
    pub lo: f64,
    /// Upper end of the axis (the last tick).
    pub hi: f64,
    /// Tick values, ascending.
    pub values: Vec<f64>,
    /// One label per value.
    pub labels: Vec<String>,
}

/// `m·10^k` as a pair: the value is exact in decimal.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Step {
    m: i64,
    k: i32,
}

impl Step {
    /// `i·m·10^k`, rounded once (division by an exact power of ten for `k < 0`; below
    /// 10^−300 in two divisions, so that 10^−k never overflows).
    fn tick(self, i: i64) -> f64 {
        let n = i.saturating_mul(self.m) as f64;
        if self.k >= 0 {
            n * 10f64.powi(self.k)
        } else if self.k >= -300 {
            n / 10f64.powi(-self.k)
        } else {
            n / 1e300 / 10f64.powi(-self.k - 300)
        }
    }

    fn value(self) -> f64 {
        self.tick(1)
    }
}

/// The smallest `m·10^k ≥ raw` with `m ∈ {1, 2, 5}` (`raw > 0`, finite).
fn step_at_least(raw: f64) -> Step {
    let mut k = raw.log10().floor() as i32;
    // log10 may land one off near powers of ten: settle 10^k ≤ raw < 10^(k+1).
    if (Step { m: 1, k }).value() > raw {
        k -= 1;
    }
    if (Step { m: 1, k: k + 1 }).value() <= raw {
        k += 1;
    }
    [1, 2, 5]
        .into_iter()
        .map(|m| Step { m, k })
        .find(|s| s.value() >= raw * (1.0 - 1e-12))
        .unwrap_or(Step { m: 1, k: k + 1 })
}

/// Linear ticks covering `[lo, hi]` (finite, `lo ≤ hi`); `integer` forces steps ≥ 1. An empty
/// or degenerate range is widened first (±1 on an integer axis, else ±10% of |lo|, or ±0.5).
pub fn linear(lo: f64, hi: f64, integer: bool) -> Ticks {
    let (mut lo, mut hi) = if lo.is_finite() && hi.is_finite() && lo <= hi {
        (lo, hi)
    } else {
        (0.0, 1.0)
    };
    // A range below ~1e-12 of the magnitude has no distinct round ticks: treat it as one value.
    if hi - lo <= 1e-12 * lo.abs().max(hi.abs()) {
        let d = if integer {
            1.0
        } else if lo == 0.0 {
            0.5
        } else {
            0.1 * lo.abs()
        };
        (lo, hi) = (lo - d, hi + d);
    }
    // (hi − lo)/5 without overflow for ranges near ±f64::MAX.
    let mut s = step_at_least(hi / 5.0 - lo / 5.0);
    if integer && s.k < 0 {
        s = Step { m: 1, k: 0 };
    }
    let w = s.value();
    // Enclosing multiples (a quotient within 1e-9 of an integer is that integer), kept
    // inside ±f64::MAX.
    let (i0, i1) = (
        ((lo / w + 1e-9).floor()).max((-f64::MAX / w).ceil()) as i64,
        ((hi / w - 1e-9).ceil()).min((f64::MAX / w).floor()) as i64,
    );
    let values: Vec<f64> = (i0..=i1.max(i0)).map(|i| s.tick(i)).collect();
    finish(values, s.k)
}

/// Log-scale ticks covering `[lo, hi]` (`0 < lo ≤ hi`, finite), by the rule in the module docs.
pub fn log(lo: f64, hi: f64) -> Ticks {
    let (mut lo, mut hi) = if lo > 0.0 && hi.is_finite() && lo <= hi {
        (lo, hi)
    } else {
        (1.0, 10.0)
    };
    if hi == lo {
        (lo, hi) = (lo / 2.0, hi * 2.0);
    }
    let ratio = hi / lo;
    if ratio < 3.0 {
        return linear(lo, hi, false);
    }
    // Decades d0 ≤ log10(lo), d1 ≥ log10(hi), settled against exact powers.
    let mut d0 = lo.log10().floor() as i32;
    if (Step { m: 1, k: d0 }).value() > lo {
        d0 -= 1;
    }
    let mut d1 = hi.log10().ceil() as i32;
    if (Step { m: 1, k: d1 }).value() < hi {
        d1 += 1;
    }
    let mut values = Vec::new();
    if ratio >= 100.0 {
        let n = ((d1 - d0) as f64 / 10.0).ceil().max(1.0) as i32;
        let (a, b) = (d0.div_euclid(n), (d1 + n - 1).div_euclid(n));
        values.extend((a..=b).map(|j| Step { m: 1, k: j * n }.value()));
    } else {
        let all: Vec<f64> = (d0..=d1)
            .flat_map(|k| [1, 2, 5].map(|m| Step { m, k }.value()))
            .collect();
        let first = all.iter().rposition(|&v| v <= lo).unwrap_or(0);
        let last = all.iter().position(|&v| v >= hi).unwrap_or(all.len() - 1);
        values.extend_from_slice(&all[first..=last]);
    }
    // Powers beyond f64 (0 or ∞) are no ticks.
    values.retain(|v| *v > 0.0 && v.is_finite());
    if values.is_empty() {
        values.push(lo);
    }
    let labels = values.iter().map(|&v| label(v, exponent(v))).collect();
    Ticks {
        lo: values[0],
        hi: values[values.len() - 1],
        values,
        labels,
    }
}

fn finish(values: Vec<f64>, k: i32) -> Ticks {
    let labels = values.iter().map(|&v| label(v, k)).collect();
    Ticks {
        lo: values[0],
        hi: values[values.len() - 1],
        values,
        labels,
    }
}

/// The decimal exponent `e` of `v ≠ 0`: `10^e ≤ |v| < 10^(e+1)` (as Rust's `{:e}` prints it).
fn exponent(v: f64) -> i32 {
    let s = format!("{v:e}");
    s.rsplit('e')
        .next()
        .and_then(|e| e.parse().ok())
        .unwrap_or(0)
}

/// The label of a tick `v` that is a multiple of `10^k` (module docs: just enough digits,
/// scientific for `|v| ≥ 10^6` or `k < −4`).
pub fn label(v: f64, k: i32) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if v.abs() >= 1e6 || k < -4 {
        let e = exponent(v);
        let s = format!("{:.*e}", (e - k).max(0) as usize, v);
        let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
        return format!("{}e{exp}", trim(mant));
    }
    trim(&format!("{:.*}", (-k).max(0) as usize, v))
}

/// Drops trailing zeros after a decimal point, and the point itself if nothing follows.
fn trim(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(t: &Ticks) -> Vec<&str> {
        t.labels.iter().map(String::as_str).collect()
    }

    /// Expected ticks derived by hand from the rule in the module docs.
    #[test]
    fn linear_ticks_table() {
        // (lo, hi, integer, labels, axis lo, axis hi)
        type Case = (f64, f64, bool, &'static [&'static str], f64, f64);
        let table: [Case; 9] = [
            // (11.24 − 9.09)/5 = 0.43 → s = 0.5 (0.1 and 0.2 are smaller); ⌊9.09/0.5⌋ = 18,
            // ⌈11.24/0.5⌉ = 23 → 9 … 11.5.
            (
                9.09,
                11.24,
                false,
                &["9", "9.5", "10", "10.5", "11", "11.5"],
                9.0,
                11.5,
            ),
            // Epochs 1..=87: 86/5 = 17.2 → s = 20; ⌊1/20⌋ = 0, ⌈87/20⌉ = 5.
            (
                1.0,
                87.0,
                true,
                &["0", "20", "40", "60", "80", "100"],
                0.0,
                100.0,
            ),
            // Epochs 1..=3: 0.4 → 0.5, raised to 1 on an integer axis.
            (1.0, 3.0, true, &["1", "2", "3"], 1.0, 3.0),
            // The same range as reals keeps s = 0.5.
            (1.0, 3.0, false, &["1", "1.5", "2", "2.5", "3"], 1.0, 3.0),
            // 1999.7/5 = 399.94 → s = 500.
            (
                0.3,
                2000.0,
                false,
                &["0", "500", "1000", "1500", "2000"],
                0.0,
                2000.0,
            ),
            // 4.9/5 = 0.98 → s = 1; ⌊−3.2⌋ = −4, ⌈1.7⌉ = 2.
            (
                -3.2,
                1.7,
                false,
                &["-4", "-3", "-2", "-1", "0", "1", "2"],
                -4.0,
                2.0,
            ),
            // 1e-5/5 = 2e-6 → s = 2e-6 (k = −6 < −4: scientific).
            (
                0.0,
                1e-5,
                false,
                &["0", "2e-6", "4e-6", "6e-6", "8e-6", "1e-5"],
                0.0,
                1e-5,
            ),
            // 2.5e6/5 = 5e5 → s = 5e5; 3 … 8 × 5e5 (≥ 1e6: scientific).
            (
                1.5e6,
                4e6,
                false,
                &["1.5e6", "2e6", "2.5e6", "3e6", "3.5e6", "4e6"],
                1.5e6,
                4e6,
            ),
            // One value 0.3: widened by ±0.03 to [0.27, 0.33]; 0.012 → s = 0.02;
            // ⌊13.5⌋ = 13, ⌈16.5⌉ = 17 → 0.26 … 0.34.
            (
                0.3,
                0.3,
                false,
                &["0.26", "0.28", "0.3", "0.32", "0.34"],
                0.26,
                0.34,
            ),
        ];
        for (lo, hi, int, want, alo, ahi) in table {
            let t = linear(lo, hi, int);
            assert_eq!(labels(&t), want, "[{lo}, {hi}] integer {int}");
            assert_eq!((t.lo, t.hi), (alo, ahi), "[{lo}, {hi}]");
            assert!(t.lo <= lo && t.hi >= hi);
            assert_eq!(t.values.len(), t.labels.len());
            // Each label reads back as its value (to the value's own rounding).
            for (v, l) in t.values.iter().zip(&t.labels) {
                let back: f64 = l.parse().unwrap();
                assert!(
                    (back - v).abs() <= 1e-12 * v.abs().max(1e-300),
                    "{l} vs {v}"
                );
            }
        }
    }

    #[test]
    fn integer_axis_ticks_are_integers_for_every_epoch_count() {
        for n in 1..=300 {
            let t = linear(1.0, n as f64, true);
            assert!(t.values.iter().all(|v| v.fract() == 0.0), "1..={n}: {t:?}");
            assert!(t.labels.iter().all(|l| !l.contains('.')), "1..={n}");
            assert!(t.values.len() >= 2 && t.values.len() <= 8, "1..={n}: {t:?}");
        }
    }

    #[test]
    fn extreme_ranges_give_few_finite_ticks() {
        for (lo, hi) in [
            (-1.7e308, 1.7e308),
            (1e15, 1e15 + 1.0),
            (-1e-300, 1e-300),
            (0.0, 1e-318),
        ] {
            let t = linear(lo, hi, false);
            assert!(t.values.iter().all(|v| v.is_finite()), "{t:?}");
            assert!((2..=8).contains(&t.values.len()), "{t:?}");
            assert!(t.values.windows(2).all(|w| w[0] < w[1]), "{t:?}");
        }
        for (lo, hi) in [(1e-320, 1e300), (f64::MIN_POSITIVE, f64::MAX)] {
            let t = log(lo, hi);
            assert!(t.values.iter().all(|v| *v > 0.0 && v.is_finite()), "{t:?}");
            assert!((2..=12).contains(&t.values.len()), "{t:?}");
        }
    }

    #[test]
    fn log_ticks_table() {
        // (lo, hi, labels), by the ratio hi/lo.
        let table: [(f64, f64, &[&str]); 5] = [
            // 2000/0.3 ≈ 6667 ≥ 100: powers, 10^⌊log10 0.3⌋ = 0.1 … 10^⌈log10 2000⌉ = 10^4.
            (0.3, 2000.0, &["0.1", "1", "10", "100", "1000", "10000"]),
            // 11.24/2.5 ≈ 4.5: 1-2-5 values from the largest ≤ 2.5 (2) to the smallest ≥ 11.24.
            (2.5, 11.24, &["2", "5", "10", "20"]),
            // Exactly 100: powers 1, 10, 100 (exact powers stay the bounds).
            (1.0, 100.0, &["1", "10", "100"]),
            // 1e-7 … 1e12: 19 decades > 10 → every 2nd: 10^-8 … 10^12.
            (
                1e-7,
                1e12,
                &[
                    "1e-8", "1e-6", "0.0001", "0.01", "1", "100", "10000", "1e6", "1e8", "1e10",
                    "1e12",
                ],
            ),
            // 11.24/9.09 < 3: the linear ticks of the range.
            (9.09, 11.24, &["9", "9.5", "10", "10.5", "11", "11.5"]),
        ];
        for (lo, hi, want) in table {
            let t = log(lo, hi);
            assert_eq!(labels(&t), want, "[{lo}, {hi}]");
            assert!(t.lo > 0.0 && t.lo <= lo && t.hi >= hi, "{t:?}");
        }
        // 0.004 … 0.3 (ratio 75): 1-2-5 from 0.002 to 0.5.
        let t = log(0.004, 0.3);
        assert_eq!(
            labels(&t),
            ["0.002", "0.005", "0.01", "0.02", "0.05", "0.1", "0.2", "0.5"]
        );
    }

    #[test]
    fn labels_use_just_enough_digits() {
        assert_eq!(label(0.30000000000000004, -1), "0.3");
        assert_eq!(label(10.0, -1), "10");
        assert_eq!(label(-2.5, -1), "-2.5");
        assert_eq!(label(1.25e-5, -7), "1.25e-5");
        assert_eq!(label(1.0e-5, -7), "1e-5");
        assert_eq!(label(2_500_000.0, 5), "2.5e6");
        assert_eq!(label(999_000.0, 3), "999000");
        assert_eq!(label(0.0001, -4), "0.0001");
    }
}
