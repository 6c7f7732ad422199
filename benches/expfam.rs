//! Exponential-family nll + gradient throughput on 10⁶ observations per family (f64):
//! * `stable/seq`: `efa_expfam::nll_batch` on blocks below the parallel threshold (one thread);
//! * `textbook/seq`: A(η) − ⟨t(y), η⟩ − log h(y) and ∇A − t written directly (one thread);
//! * `stable/par`: one `nll_batch` call over all rows (rayon, chunked).
//!
//! Run: `cargo bench --bench expfam -- --warm-up-time 1 --measurement-time 2`.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use efa_expfam::{nll_batch, ordinal_nll_batch, Family, PAR_MIN_ROWS};
use efa_num::scalar::digamma;
use ndarray::{Array2, ArrayView2, ArrayViewMut2, Axis};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ROWS: usize = 1_000_000;
const CUT: [f64; 4] = [-2.0, -0.5, 0.5, 2.0];

fn lgamma(x: f64) -> f64 {
    efa_num::Real::lgamma(x)
}

/// Random natural parameters in a typical range and observations drawn from the family.
fn data(fam: Family, seed: u64) -> (Array2<f64>, Array2<f64>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let d = fam.eta_dim();
    let mut eta = Array2::zeros((ROWS, d));
    let mut y = Array2::zeros((ROWS, fam.obs_dim()));
    for i in 0..ROWS {
        let mut e = vec![0.0; d];
        for v in e.iter_mut() {
            *v = rng.random_range(-2.0..2.0);
        }
        match fam {
            Family::Gaussian => e[1] = -rng.random_range(0.2..2.0),
            Family::Gamma => e = vec![rng.random_range(-0.5..5.0), -rng.random_range(0.2..3.0)],
            Family::Beta => e = vec![rng.random_range(-0.5..5.0), rng.random_range(-0.5..5.0)],
            Family::Exponential | Family::NegativeBinomial { .. } => {
                e[0] = -rng.random_range(0.05..3.0)
            }
            _ => {}
        }
        let mut yi = vec![0.0; fam.obs_dim()];
        if let Family::OrdinalLogit { .. } = fam {
            yi[0] = efa_expfam::ordinal::sample(&CUT, e[0], &mut rng);
        } else {
            fam.sample(&e, &mut rng, &mut yi, i).unwrap();
        }
        eta.row_mut(i).assign(&ndarray::arr1(&e));
        y.row_mut(i).assign(&ndarray::arr1(&yi));
    }
    (y, eta)
}

fn sigmoid_naive(x: f64) -> f64 {
    x.exp() / (1.0 + x.exp())
}

/// Textbook nll = A − ⟨t, η⟩ − log h and gradient ∇A − t for one row.
fn textbook(fam: Family, y: &[f64], e: &[f64], g: &mut [f64]) -> f64 {
    match fam {
        Family::GaussianKnownVar { s2 } => {
            g[0] = s2 * e[0] - y[0];
            s2 * e[0] * e[0] / 2.0 - y[0] * e[0]
                + (y[0] * y[0] / (2.0 * s2) + 0.5 * (2.0 * std::f64::consts::PI * s2).ln())
        }
        Family::Gaussian => {
            let a = -e[0] * e[0] / (4.0 * e[1]) - 0.5 * (-2.0 * e[1]).ln();
            g[0] = -e[0] / (2.0 * e[1]) - y[0];
            g[1] = e[0] * e[0] / (4.0 * e[1] * e[1]) - 1.0 / (2.0 * e[1]) - y[0] * y[0];
            a - y[0] * e[0] - y[0] * y[0] * e[1] + 0.5 * (2.0 * std::f64::consts::PI).ln()
        }
        Family::Bernoulli => {
            g[0] = sigmoid_naive(e[0]) - y[0];
            (1.0 + e[0].exp()).ln() - y[0] * e[0]
        }
        Family::Binomial { n } => {
            let n = n as f64;
            g[0] = n * sigmoid_naive(e[0]) - y[0];
            let logh = lgamma(n + 1.0) - lgamma(y[0] + 1.0) - lgamma(n - y[0] + 1.0);
            n * (1.0 + e[0].exp()).ln() - y[0] * e[0] - logh
        }
        Family::Poisson => {
            g[0] = e[0].exp() - y[0];
            e[0].exp() - y[0] * e[0] + lgamma(y[0] + 1.0)
        }
        Family::Categorical { .. } => {
            let z: f64 = e.iter().map(|v| v.exp()).sum();
            let k = y[0] as usize;
            for (i, gi) in g.iter_mut().enumerate() {
                *gi = e[i].exp() / z - if i == k { 1.0 } else { 0.0 };
            }
            z.ln() - e[k]
        }
        Family::Multinomial { n, .. } => {
            let n = n as f64;
            let z: f64 = e.iter().map(|v| v.exp()).sum();
            let mut logh = lgamma(n + 1.0);
            let mut dot = 0.0;
            for i in 0..e.len() {
                g[i] = n * e[i].exp() / z - y[i];
                logh -= lgamma(y[i] + 1.0);
                dot += y[i] * e[i];
            }
            n * z.ln() - dot - logh
        }
        Family::Gamma => {
            let (a, b) = (e[0] + 1.0, -e[1]);
            g[0] = digamma(a) - b.ln() - y[0].ln();
            g[1] = a / b - y[0];
            lgamma(a) - a * b.ln() - e[0] * y[0].ln() - e[1] * y[0]
        }
        Family::Exponential => {
            g[0] = -1.0 / e[0] - y[0];
            -(-e[0]).ln() - e[0] * y[0]
        }
        Family::Beta => {
            let (a, b) = (e[0] + 1.0, e[1] + 1.0);
            let dab = digamma(a + b);
            g[0] = digamma(a) - dab - y[0].ln();
            g[1] = digamma(b) - dab - (1.0 - y[0]).ln();
            lgamma(a) + lgamma(b) - lgamma(a + b) - e[0] * y[0].ln() - e[1] * (1.0 - y[0]).ln()
        }
        Family::NegativeBinomial { r } => {
            let p = e[0].exp();
            g[0] = r * p / (1.0 - p) - y[0];
            let logh = lgamma(y[0] + r) - lgamma(r) - lgamma(y[0] + 1.0);
            -r * (1.0 - p).ln() - y[0] * e[0] - logh
        }
        Family::OrdinalLogit { k } => {
            let c = |j: usize| {
                if j == 0 {
                    f64::NEG_INFINITY
                } else if j == k {
                    f64::INFINITY
                } else {
                    CUT[j - 1]
                }
            };
            let yk = y[0] as usize;
            let (hi, lo) = (sigmoid_naive(c(yk + 1) - e[0]), sigmoid_naive(c(yk) - e[0]));
            let hi = if c(yk + 1).is_infinite() { 1.0 } else { hi };
            let lo = if c(yk).is_infinite() { 0.0 } else { lo };
            g[0] = (hi * (1.0 - hi) - lo * (1.0 - lo)) / (hi - lo);
            -(hi - lo).ln()
        }
    }
}

fn textbook_all(
    fam: Family,
    y: ArrayView2<f64>,
    eta: ArrayView2<f64>,
    nll: &mut [f64],
    mut g: ArrayViewMut2<f64>,
) {
    let (d, od) = (fam.eta_dim(), fam.obs_dim());
    let (ys, es) = (y.as_slice().unwrap(), eta.as_slice().unwrap());
    let gs = g.as_slice_mut().unwrap();
    for (i, (n, gr)) in nll.iter_mut().zip(gs.chunks_exact_mut(d)).enumerate() {
        *n = textbook(fam, &ys[i * od..(i + 1) * od], &es[i * d..(i + 1) * d], gr);
    }
}

fn stable_seq(
    fam: Family,
    y: ArrayView2<f64>,
    eta: ArrayView2<f64>,
    nll: &mut [f64],
    mut g: ArrayViewMut2<f64>,
) {
    let block = PAR_MIN_ROWS / 2;
    for (((yb, eb), nb), gb) in y
        .axis_chunks_iter(Axis(0), block)
        .zip(eta.axis_chunks_iter(Axis(0), block))
        .zip(nll.chunks_mut(block))
        .zip(g.axis_chunks_iter_mut(Axis(0), block))
    {
        run_stable(fam, yb, eb, nb, gb);
    }
}

fn run_stable(
    fam: Family,
    y: ArrayView2<f64>,
    eta: ArrayView2<f64>,
    nll: &mut [f64],
    g: ArrayViewMut2<f64>,
) {
    if let Family::OrdinalLogit { .. } = fam {
        let mut gc = [0.0; 4];
        ordinal_nll_batch(&CUT, y, eta, None, nll, g, &mut gc).unwrap();
    } else {
        nll_batch(&fam, y, eta, None, nll, g).unwrap();
    }
}

fn bench(c: &mut Criterion) {
    let families = [
        Family::GaussianKnownVar { s2: 1.5 },
        Family::Gaussian,
        Family::Bernoulli,
        Family::Binomial { n: 10 },
        Family::Poisson,
        Family::Categorical { k: 8 },
        Family::Multinomial { n: 20, k: 4 },
        Family::Gamma,
        Family::Exponential,
        Family::Beta,
        Family::NegativeBinomial { r: 5.0 },
        Family::OrdinalLogit { k: 5 },
    ];
    let mut group = c.benchmark_group("expfam_nll_grad");
    group.throughput(Throughput::Elements(ROWS as u64));
    group.sample_size(10);
    for (s, fam) in families.into_iter().enumerate() {
        let (y, eta) = data(fam, s as u64);
        let mut nll = vec![0.0; ROWS];
        let mut g = Array2::zeros((ROWS, fam.eta_dim()));
        group.bench_function(BenchmarkId::new("stable/seq", fam.name()), |b| {
            b.iter(|| stable_seq(fam, y.view(), eta.view(), &mut nll, g.view_mut()))
        });
        group.bench_function(BenchmarkId::new("textbook/seq", fam.name()), |b| {
            b.iter(|| textbook_all(fam, y.view(), eta.view(), &mut nll, g.view_mut()))
        });
        group.bench_function(BenchmarkId::new("stable/par", fam.name()), |b| {
            b.iter(|| run_stable(fam, y.view(), eta.view(), &mut nll, g.view_mut()))
        });
        black_box(&nll);
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
