//! Error budgets of the fused block on its own (docs/design.md §3c) at adversarial inputs:
//! its output and every input's gradient in f32 and f64 against the same block composed from
//! the tape's ops in double-double (about 106 bits), each within twice the error of that
//! composition in the same type, or 32 units of the type's round-off of the tensor's largest
//! entry. The inputs: sharp attention (query and key inputs ×6), one dominant key per sample,
//! all-equal scores (zero queries) and 1e4-scale inputs; at the temperature model's widths
//! (44 positions, d = 32, two heads of 16, feed-forward 64), with and without key padding.

use super::tests::{cases, run_on, Case, Mode, MODES};
use efa_block::block::BlockSource as Source;
use efa_num::{Dd, Real};
use efa_testkit::rel_err;
use ndarray::{ArrayD, Axis};

/// The case's seeded inputs for `mode`, made adversarial.
fn inputs(case: &Case, mode: Mode, what: &str, seed: u64) -> Vec<(String, ArrayD<f64>)> {
    let mut x = case.inputs(mode, seed);
    let hk = case.heads * case.kd;
    for (name, a) in x.iter_mut() {
        let name = name.as_str();
        match what {
            // Queries and keys (or their projections) ×6: near one-hot attention.
            "sharp" if matches!(name, "q" | "k" | "wq" | "bq" | "wk" | "bk") => {
                a.mapv_inplace(|v| 6.0 * v)
            }
            // Zero queries: every visible key weighs the same.
            "all-equal scores" if matches!(name, "q" | "wq" | "bq") => a.fill(0.0),
            // Inputs of 1e4 (the residual dominates the first layer norm's input).
            "1e4-scale inputs" if matches!(name, "x" | "v") => a.mapv_inplace(|v| 1e4 * v),
            _ => {}
        }
    }
    if what == "one dominant key" {
        // Every query shares a direction `u` per head and key 1 of each sample lies along
        // it (given q, k only): its score is far above the others'.
        let u: Vec<f64> = (0..hk)
            .map(|c| if (3 * c) % 7 < 3 { -1.0 } else { 1.0 })
            .collect();
        for (name, a) in x.iter_mut() {
            match name.as_str() {
                "q" => {
                    for mut row in a.lanes_mut(Axis(2)) {
                        for (v, u) in row.iter_mut().zip(&u) {
                            *v += 1.5 * u;
                        }
                    }
                }
                "k" => {
                    for s in 0..case.b {
                        for (c, u) in u.iter().enumerate() {
                            a[[s, 1, c]] = 4.0 * u;
                        }
                    }
                }
                _ => {}
            }
        }
    }
    x
}

/// The fused block in `T` within `factor` times the composition's error in `T` (or 32 ε),
/// every output and gradient, against the composition in double-double.
fn check<T: Real>(case: &Case, mode: Mode, what: &str, factor: f64) {
    let seed = 31;
    let x = inputs(case, mode, what, seed);
    let want = run_on::<Dd>(case, mode, false, x.clone(), seed);
    let fused = run_on::<T>(case, mode, true, x.clone(), seed);
    let composed = run_on::<T>(case, mode, false, x.clone(), seed);
    let units = 32.0 * T::EPSILON.to_f64();
    for (k, ((f, c), w)) in fused.iter().zip(&composed).zip(&want).enumerate() {
        let name = if k == 0 {
            "output"
        } else {
            x[k - 1].0.as_str()
        };
        let (ef, ec) = (rel_err(f, w), rel_err(c, w));
        assert!(
            ef.is_finite() && ef <= (factor * ec).max(units),
            "{what} {mode:?} n{} {}: {name}: fused error {ef:.3e} of the largest entry, the \
             composition's {ec:.3e}",
            case.n,
            T::NAME
        );
    }
}

#[test]
fn within_budget_at_adversarial_inputs() {
    // The temperature widths, and the padded case with a sample without keys.
    let all = cases();
    for case in [&all[3], &all[4]] {
        for mode in MODES {
            let whats: &[&str] = match mode.src {
                Source::Given => &[
                    "sharp",
                    "one dominant key",
                    "all-equal scores",
                    "1e4-scale inputs",
                ],
                Source::Project => &["sharp", "all-equal scores", "1e4-scale inputs"],
                Source::Attended => &["1e4-scale inputs"],
            };
            for what in whats {
                check::<f32>(case, mode, what, 2.0);
                check::<f64>(case, mode, what, 2.0);
            }
        }
    }
}
