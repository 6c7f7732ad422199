//! Generates the mixed-type spatiotemporal fixture of `fixtures/train/mixed_sites.toml`: sites
//! with coordinates, each with a thermometer (Gaussian), a rain gauge (Bernoulli) and an event
//! counter (Poisson), read daily; every day is one sequence with the day's readings (lag 0,
//! the targets) and the previous day's (lag 1, context only).
//!
//! A latent field drives all three readings: on day `d` at site `s`,
//! `f = u_d + v_d·(lat_s − 45)/5 + w_d·(lon_s + 100)/5`, with `(u, v, w)` an AR(1) process
//! over days (coefficient 0.9). Temperature ~ N(15 + 4f, 1.5²), rain ~ Bernoulli(σ(1.5f)),
//! events ~ Poisson(e^{0.6 + 0.5f}). Items: thermometers `1..=S`, rain gauges `S+1..=2S`,
//! counters `2S+1..=3S`; `items.csv` gives every item its site's latitude and longitude.
//!
//! Besides the files it prints two test-split references: the mean nll of an oracle that knows
//! the latent field, and of an independent per-item baseline (each item's maximum-likelihood
//! parameters on the training days). A model that uses the context should land between them.
//!
//! ```text
//! cargo run --example mixed_sites_data -- [OUT_DIR] [SEED] [SITES] [DAYS]
//! ```
//! (defaults: `fixtures/train`, 7, 8 sites, 160 days split 100 / 30 / 30).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A standard normal draw (Box–Muller).
fn normal(rng: &mut StdRng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A Poisson draw (Knuth's product of uniforms; small means only).
fn poisson(rng: &mut StdRng, mean: f64) -> u64 {
    let limit = (-mean).exp();
    let (mut k, mut p) = (0u64, 1.0f64);
    loop {
        p *= rng.random::<f64>();
        if p <= limit {
            return k;
        }
        k += 1;
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// ln k!.
fn ln_factorial(k: u64) -> f64 {
    (2..=k).map(|i| (i as f64).ln()).sum()
}

/// The three readings' true parameters at field value `f`: (Gaussian mean, rain probability,
/// Poisson mean).
fn truth(f: f64) -> (f64, f64, f64) {
    (15.0 + 4.0 * f, sigmoid(1.5 * f), (0.6 + 0.5 * f).exp())
}

const SD: f64 = 1.5;

fn gauss_nll(y: f64, mean: f64, sd: f64) -> f64 {
    0.5 * ((y - mean) / sd).powi(2) + sd.ln() + 0.5 * std::f64::consts::TAU.ln()
}

fn bern_nll(y: f64, p: f64) -> f64 {
    -(y * p.ln() + (1.0 - y) * (1.0 - p).ln())
}

fn pois_nll(y: f64, lam: f64) -> f64 {
    lam - y * lam.ln() + ln_factorial(y as u64)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let out = PathBuf::from(args.get(1).map_or("fixtures/train", String::as_str));
    let seed: u64 = args.get(2).map_or(7, |s| s.parse().expect("SEED"));
    let sites: usize = args.get(3).map_or(8, |s| s.parse().expect("SITES"));
    let days: usize = args.get(4).map_or(160, |s| s.parse().expect("DAYS"));
    assert!(sites >= 1 && days >= 8, "at least 1 site and 8 days");
    let (oracle, base) = generate(&out, seed, sites, days);
    let n_train = days * 5 / 8;
    let n_valid = (days - n_train) / 2;
    println!(
        "wrote {sites} sites × 3 items, {n_train} / {n_valid} / {} days into {}",
        days - n_train - n_valid,
        out.display()
    );
    println!("test mean nll: oracle {oracle:.4}, per-item baseline {base:.4}");
}

/// Writes the three splits and the item table into `out`; returns the test split's oracle
/// and per-item-baseline mean nll.
fn generate(out: &Path, seed: u64, sites: usize, days: usize) -> (f64, f64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let coords: Vec<(f64, f64)> = (0..sites)
        .map(|_| {
            (
                40.0 + 10.0 * rng.random::<f64>(),
                -105.0 + 10.0 * rng.random::<f64>(),
            )
        })
        .collect();
    // Latent field per day (one extra day before the first, for its lag rows).
    let mut state = [0.0f64; 3];
    let mut field = Vec::with_capacity(days + 1);
    let mut values: Vec<Vec<f64>> = Vec::with_capacity(days + 1);
    for _ in 0..=days {
        for x in state.iter_mut() {
            *x = 0.9 * *x + 0.45 * normal(&mut rng);
        }
        let f: Vec<f64> = coords
            .iter()
            .map(|&(lat, lon)| {
                state[0] + state[1] * (lat - 45.0) / 5.0 + state[2] * (lon + 100.0) / 5.0
            })
            .collect();
        let mut day = vec![0.0; 3 * sites];
        for (s, &fs) in f.iter().enumerate() {
            let (mean, p, lam) = truth(fs);
            day[s] = ((mean + SD * normal(&mut rng)) * 100.0).round() / 100.0;
            day[sites + s] = f64::from(u8::from(rng.random::<f64>() < p));
            day[2 * sites + s] = poisson(&mut rng, lam) as f64;
        }
        field.push(f);
        values.push(day);
    }
    let n_train = days * 5 / 8;
    let n_valid = (days - n_train) / 2;
    let splits = [
        ("mixed_sites_train.csv", 1..=n_train),
        ("mixed_sites_valid.csv", n_train + 1..=n_train + n_valid),
        ("mixed_sites_test.csv", n_train + n_valid + 1..=days),
    ];
    std::fs::create_dir_all(out).expect("create the output directory");
    for (name, range) in &splits {
        let mut s = String::from("seq,order,item,value,lag\n");
        for d in range.clone() {
            for (lag, day) in [(0usize, d), (1, d - 1)] {
                for (k, v) in values[day].iter().enumerate() {
                    let _ = writeln!(s, "day{d},{},{},{v},{lag}", lag * 3 * sites + k, k + 1);
                }
            }
        }
        std::fs::write(out.join(name), s).expect("write a split");
    }
    let mut items = String::from("item,latitude,longitude\n");
    for kind in 0..3 {
        for (s, (lat, lon)) in coords.iter().enumerate() {
            let _ = writeln!(items, "{},{lat:.4},{lon:.4}", kind * sites + s + 1);
        }
    }
    std::fs::write(out.join("mixed_sites_items.csv"), items).expect("write items.csv");

    // References on the test split: the oracle and the per-item baseline (train MLE).
    let train = 1..=n_train;
    let test = n_train + n_valid + 1..=days;
    let mut oracle = 0.0;
    let mut base = 0.0;
    let mut n = 0.0;
    for s in 0..sites {
        let col = |k: usize| -> Vec<f64> { train.clone().map(|d| values[d][k]).collect() };
        let g = col(s);
        let gm = g.iter().sum::<f64>() / g.len() as f64;
        let gsd = (g.iter().map(|y| (y - gm).powi(2)).sum::<f64>() / g.len() as f64).sqrt();
        let r = col(sites + s);
        let rp = (r.iter().sum::<f64>() / r.len() as f64).clamp(1e-3, 1.0 - 1e-3);
        let c = col(2 * sites + s);
        let cl = (c.iter().sum::<f64>() / c.len() as f64).max(1e-3);
        for d in test.clone() {
            let (mean, p, lam) = truth(field[d][s]);
            let v = &values[d];
            oracle += gauss_nll(v[s], mean, SD)
                + bern_nll(v[sites + s], p)
                + pois_nll(v[2 * sites + s], lam);
            base += gauss_nll(v[s], gm, gsd)
                + bern_nll(v[sites + s], rp)
                + pois_nll(v[2 * sites + s], cl);
            n += 3.0;
        }
    }
    (oracle / n, base / n)
}

#[cfg(test)]
mod tests {
    use super::generate;
    use std::path::Path;

    /// The committed fixture is exactly this generator's output with the default settings,
    /// and the references lie where docs/user-data.md says.
    #[test]
    fn the_committed_fixture_is_this_generators_output() {
        let out = std::env::temp_dir().join(format!("efa-mixed-gen-{}", std::process::id()));
        let (oracle, base) = generate(&out, 7, 8, 160);
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/train");
        for name in [
            "mixed_sites_train.csv",
            "mixed_sites_valid.csv",
            "mixed_sites_test.csv",
            "mixed_sites_items.csv",
        ] {
            let made = std::fs::read(out.join(name)).unwrap();
            let kept = std::fs::read(fixtures.join(name)).unwrap();
            assert!(made == kept, "{name} differs from the generator's output");
        }
        assert_eq!(format!("{oracle:.3} {base:.3}"), "1.329 2.387");
        let _ = std::fs::remove_dir_all(&out);
    }
}
