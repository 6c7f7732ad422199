//! The mixed-family objective: its loss equals the mean over rows of each row's own family's
//! nll from efa-expfam (the family's link of the leading η columns), summed independently in
//! f64 here; its gradient equals central differences of that independent sum.

use efa_expfam::{link, Family};
use efa_model::{Objective, Targets};
use efa_tape::Tape;
use ndarray::{ArrayD, IxDyn};

/// η rows `[B, 2]`, observations and families of a tiny mixed batch.
fn case() -> (Vec<[f64; 2]>, Vec<f64>, Vec<Family>) {
    let z = vec![
        [0.3, -0.8],
        [-1.2, 0.4],
        [0.7, 0.0],
        [1.5, -0.3],
        [-0.2, 0.9],
        [0.1, -2.0],
    ];
    let y = vec![1.7, 1.0, 3.0, -0.4, 0.0, 0.25];
    let f = vec![
        Family::Gaussian,
        Family::Bernoulli,
        Family::Poisson,
        Family::GaussianKnownVar { s2: 2.0 },
        Family::Bernoulli,
        Family::Gaussian,
    ];
    (z, y, f)
}

/// Σ_b nll_{f_b}(y_b; link_{f_b}(z_b[..d])) / B, straight from efa-expfam.
fn by_hand(z: &[[f64; 2]], y: &[f64], f: &[Family]) -> f64 {
    let total: f64 = (0..z.len())
        .map(|b| {
            let d = f[b].eta_dim();
            let eta = link::natural(&f[b], &z[b][..d]);
            f[b].nll(&[y[b]], &eta, b).unwrap()
        })
        .sum();
    total / z.len() as f64
}

fn on_tape(z: &[[f64; 2]], y: &[f64], f: &[Family]) -> (f64, Vec<f64>) {
    let mut tape = Tape::<f64>::new();
    let v = tape.input(ArrayD::from_shape_fn(IxDyn(&[z.len(), 2]), |i| {
        z[i[0]][i[1]]
    }));
    let targets = Targets::Mixed {
        y: y.to_vec(),
        families: f.to_vec(),
    };
    let loss = Objective::MixedNll.loss(&mut tape, v, &targets).unwrap();
    let value = tape.value(loss).iter().next().copied().unwrap();
    let grads = tape.backward(loss).unwrap();
    let g = grads.wrt(v).unwrap().iter().copied().collect();
    (value, g)
}

#[test]
fn mixed_loss_is_the_mean_of_each_rows_own_family_nll() {
    let (z, y, f) = case();
    let (loss, _) = on_tape(&z, &y, &f);
    let want = by_hand(&z, &y, &f);
    assert!(
        (loss - want).abs() <= 1e-12 * want.abs(),
        "{loss} vs {want}"
    );
    // Not the nll of one family for every row: the families matter.
    let all_gauss = by_hand(&z, &y, &[Family::Gaussian; 6]);
    assert!((loss - all_gauss).abs() > 1e-3);
}

#[test]
fn mixed_gradient_matches_central_differences_of_the_independent_sum() {
    let (z, y, f) = case();
    let (_, g) = on_tape(&z, &y, &f);
    let h = 1e-6;
    for b in 0..z.len() {
        for k in 0..2 {
            let mut zp = z.clone();
            zp[b][k] += h;
            let mut zm = z.clone();
            zm[b][k] -= h;
            let num = (by_hand(&zp, &y, &f) - by_hand(&zm, &y, &f)) / (2.0 * h);
            let ana = g[b * 2 + k];
            assert!((ana - num).abs() <= 1e-7, "z[{b}][{k}]: {ana} vs {num}");
            // Columns a row's family does not have get no gradient.
            if k >= f[b].eta_dim() {
                assert_eq!(ana, 0.0, "z[{b}][{k}]");
            }
        }
    }
}

#[test]
fn a_family_wider_than_eta_or_a_support_violation_is_an_error() {
    let (z, y, mut f) = case();
    f[2] = Family::Categorical { k: 3 };
    let mut tape = Tape::<f64>::new();
    let v = tape.constant(ArrayD::from_shape_fn(IxDyn(&[6, 2]), |i| z[i[0]][i[1]]));
    let t = Targets::Mixed {
        y: y.clone(),
        families: f,
    };
    let e = Objective::MixedNll.loss(&mut tape, v, &t).unwrap_err();
    assert!(e.to_string().contains("needs 3 natural parameters"), "{e}");
    let (_, mut y, f) = case();
    y[1] = 0.5; // not a Bernoulli observation
    let t = Targets::Mixed { y, families: f };
    assert!(Objective::MixedNll.loss(&mut tape, v, &t).is_err());
}

#[test]
fn poisson_log_eps_on_counts_is_the_shifted_loss_on_ratings_bit_for_bit() {
    // The paper's v1 loss on ratings r: mean(λ − (r − 1)·ln(λ + 1e-8)); on counts y = r − 1
    // the same numbers, in the training dtype.
    let eta = [0.3f32, -1.1, 0.05, 2.0, -0.6];
    let ratings = [1.0, 3.0, 2.0, 5.0, 4.0];
    let value = |objective: Objective, y: Vec<f64>| {
        let mut tape = Tape::<f32>::new();
        let v = tape.constant(ArrayD::from_shape_fn(IxDyn(&[5, 1]), |i| eta[i[0]]));
        let l = objective.loss(&mut tape, v, &Targets::Real(y)).unwrap();
        *tape.value(l).iter().next().unwrap()
    };
    let shifted = value(Objective::PoissonShifted, ratings.to_vec());
    let counts = value(
        Objective::PoissonLogEps,
        ratings.iter().map(|r| r - 1.0).collect(),
    );
    assert_eq!(shifted.to_bits(), counts.to_bits());
    // And by hand in f64.
    let want: f64 = eta
        .iter()
        .zip(&ratings)
        .map(|(&e, &r)| {
            let lam = f64::from(e).exp();
            lam - (r - 1.0) * (lam + 1e-8).ln()
        })
        .sum::<f64>()
        / 5.0;
    assert!((f64::from(counts) - want).abs() < 1e-6 * want.abs().max(1.0));
}
