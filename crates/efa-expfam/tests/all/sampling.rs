//! Sampler moments: the mean and variance of t(y) over 10⁵ seeded draws agree with ∇A(η) and
//! the diagonal of ∇²A(η) within 5 standard errors.

use efa_expfam::{ordinal, Family};
use rand::rngs::StdRng;
use rand::SeedableRng;

const N: usize = 100_000;

fn check(fam: Family, eta: &[f64], seed: u64) {
    let d = fam.eta_dim();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut y = vec![0.0; fam.obs_dim()];
    let mut t = vec![0.0; d];
    let mut draws = vec![Vec::with_capacity(N); d];
    for i in 0..N {
        fam.sample(eta, &mut rng, &mut y, i).unwrap();
        fam.suff_stat(&y, &mut t, i).unwrap();
        for j in 0..d {
            draws[j].push(t[j]);
        }
    }
    let mut mean = vec![0.0; d];
    let mut hess = vec![0.0; d * d];
    fam.mean(eta, &mut mean, 0).unwrap();
    fam.hessian(eta, &mut hess, 0).unwrap();
    for j in 0..d {
        let xs = &draws[j];
        let m = xs.iter().sum::<f64>() / N as f64;
        let var = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (N as f64 - 1.0);
        let m4 = xs.iter().map(|x| (x - m).powi(4)).sum::<f64>() / N as f64;
        let want_var = hess[j * d + j];
        let se_mean = (want_var / N as f64).sqrt();
        assert!(
            (m - mean[j]).abs() <= 5.0 * se_mean,
            "{} t[{j}] mean {m} vs {} (se {se_mean})",
            fam.name(),
            mean[j]
        );
        let se_var = ((m4 - var * var).max(0.0) / N as f64).sqrt();
        assert!(
            (var - want_var).abs() <= 5.0 * se_var + 1e-12,
            "{} t[{j}] variance {var} vs {want_var} (se {se_var})",
            fam.name()
        );
    }
}

#[test]
fn sampler_moments_match_mean_and_variance() {
    check(Family::GaussianKnownVar { s2: 2.0 }, &[0.7], 1);
    check(Family::Gaussian, &[0.4, -0.8], 2);
    check(Family::Bernoulli, &[0.3], 3);
    check(Family::Binomial { n: 12 }, &[0.5], 4);
    check(Family::Poisson, &[1.2], 5);
    check(Family::Categorical { k: 4 }, &[0.1, -0.5, 1.2, 0.3], 6);
    check(Family::Multinomial { n: 7, k: 3 }, &[0.2, -0.4, 0.9], 7);
    check(Family::Gamma, &[1.5, -2.0], 8);
    check(Family::Exponential, &[-1.7], 9);
    check(Family::Beta, &[1.2, 0.5], 10);
    check(Family::NegativeBinomial { r: 2.5 }, &[-0.7], 11);
}

#[test]
fn ordinal_sampler_frequencies_match_probs() {
    let cut = [-1.0, 0.0, 1.5];
    let eta = 0.4;
    let mut p = [0.0; 4];
    ordinal::probs(&cut, eta, &mut p);
    let mut rng = StdRng::seed_from_u64(12);
    let mut counts = [0usize; 4];
    for _ in 0..N {
        counts[ordinal::sample(&cut, eta, &mut rng) as usize] += 1;
    }
    for k in 0..4 {
        let f = counts[k] as f64 / N as f64;
        let se = (p[k] * (1.0 - p[k]) / N as f64).sqrt();
        assert!(
            (f - p[k]).abs() <= 5.0 * se,
            "category {k}: {f} vs {}",
            p[k]
        );
    }
}
