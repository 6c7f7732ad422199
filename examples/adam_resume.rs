//! Adam (Keras ε placement) on a small least-squares problem, with its state saved after 50
//! steps and restored into a fresh optimizer: the continuation is bit-identical to the
//! uninterrupted run.
//!
//! Run: `cargo run --example adam_resume`.

use efa::optim::{Adam, AdamConfig, Param};

/// ∇ of ½‖A·w − b‖² for a fixed 3×2 system.
fn grad(w: &[f64]) -> Vec<f64> {
    let a = [[1.0, 2.0], [0.5, -1.0], [3.0, 0.25]];
    let b = [1.0, -0.5, 2.0];
    let mut g = vec![0.0; 2];
    for (row, bi) in a.iter().zip(b) {
        let r = row[0] * w[0] + row[1] * w[1] - bi;
        g[0] += r * row[0];
        g[1] += r * row[1];
    }
    g
}

fn step(adam: &mut Adam<f64>, w: &mut [f64]) {
    let g = grad(w);
    adam.step(&mut [Param::new("w", w, Some(&g))]).unwrap();
}

fn main() {
    let cfg = AdamConfig::keras(0.05);
    // Uninterrupted: 100 steps.
    let mut adam = Adam::new(cfg).unwrap();
    let mut w = vec![0.0, 0.0];
    for _ in 0..100 {
        step(&mut adam, &mut w);
    }
    // Interrupted after 50 steps: save the state, drop the optimizer, restore, continue.
    let mut first = Adam::new(cfg).unwrap();
    let mut v = vec![0.0, 0.0];
    for _ in 0..50 {
        step(&mut first, &mut v);
    }
    let bytes = first.save();
    drop(first);
    let mut resumed = Adam::<f64>::load(&bytes).unwrap();
    assert_eq!(resumed.steps(), 50);
    for _ in 0..50 {
        step(&mut resumed, &mut v);
    }
    println!(
        "uninterrupted w = {w:?}\nresumed       w = {v:?} ({} state bytes)",
        bytes.len()
    );
    assert_eq!(
        w.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    // A corrupted state is an error, not a silent restart.
    let mut bad = bytes.clone();
    bad.truncate(bytes.len() / 2);
    assert!(Adam::<f64>::load(&bad).is_err());
}

#[cfg(test)]
mod tests {
    #[test]
    fn example_runs() {
        super::main();
    }
}
