//! Exponential families at extreme natural parameters, in f64 and f32: the log-partition
//! `A(η)`, the mean `∇A(η)` and the nll stay finite and accurate where the textbook formulas
//! overflow, underflow or cancel (softplus never forms `ln(eᶯ + 1)`, `1 − σ` is `σ(−η)`, …).
//!
//! Run: `cargo run --example expfam_extreme`.

use efa::expfam::Family;

fn rel(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        (a - b).abs() / b.abs()
    }
}

fn main() {
    let bern = Family::Bernoulli.eval();
    // A(η) = log(1 + eᶯ): for η = 800, eᶯ overflows f64 and f32 but A = 800 + log1p(e⁻⁸⁰⁰).
    let a64: f64 = bern.log_partition(&[800.0]).unwrap();
    let a32: f32 = bern.log_partition(&[800.0f32]).unwrap();
    println!("Bernoulli A(800): f64 {a64}, f32 {a32}");
    assert_eq!((a64, a32), (800.0, 800.0));
    // For η = −30, A = log1p(e⁻³⁰) ≈ e⁻³⁰ (1 − e⁻³⁰/2): full relative accuracy, not 0.
    let want = (-30f64).exp() * (1.0 - 0.5 * (-30f64).exp());
    let a64: f64 = bern.log_partition(&[-30.0]).unwrap();
    let a32: f32 = bern.log_partition(&[-30.0f32]).unwrap();
    println!(
        "Bernoulli A(−30): f64 {a64:e} (rel err {:.1e}), f32 {a32:e}",
        rel(a64, want)
    );
    assert!(rel(a64, want) < 1e-15 && rel(f64::from(a32), want) < 1e-6);
    // The nll of y = 1 at η = 40 is A(40) − 40 = log1p(e⁻⁴⁰) ≈ 4.25e-18: formed as A − ⟨t, η⟩
    // it would be 0 (all digits cancel); the stable form keeps full relative accuracy, and
    // its gradient σ(40) − 1 = −σ(−40) likewise.
    let (nll, grad) = bern.nll_grad(&[1.0], &[40.0]).unwrap();
    let e40 = (-40f64).exp();
    println!(
        "Bernoulli nll(y=1; η=40) = {nll:e}, ∂nll/∂η = {:e}",
        grad[0]
    );
    assert!(rel(nll, e40 * (1.0 - 0.5 * e40)) < 1e-15);
    assert!(rel(-grad[0], e40 / (1.0 + e40)) < 1e-15);

    // Poisson: A(η) = eᶯ. At η = 700 it is finite in f64 (≈ 1.0e304); f32's range ends at
    // 3.4e38, so there the true value overflows to +∞ (no wrong finite number).
    let pois = Family::Poisson.eval();
    let a: f64 = pois.log_partition(&[700.0]).unwrap();
    assert!(a.is_finite() && rel(a, 700f64.exp()) < 1e-15);
    let a32: f32 = pois.log_partition(&[700.0f32]).unwrap();
    println!("Poisson A(700): f64 {a:e}, f32 {a32}");
    assert_eq!(a32, f32::INFINITY);
    // The nll of a large count near its mean: lgamma(y + 1) and y·η nearly cancel η-wise; the
    // per-family stable form keeps it small and exact to a few ulps.
    let y = 1.0e6f64;
    let nll: f64 = pois.nll(&[y], &[y.ln()]).unwrap();
    // Stirling: nll ≈ ½·ln(2πy) + 1/(12y) for y = μ.
    let stirling = 0.5 * (2.0 * std::f64::consts::PI * y).ln() + 1.0 / (12.0 * y);
    println!("Poisson nll(y = 1e6; μ = 1e6) = {nll} (Stirling {stirling})");
    assert!(rel(nll, stirling) < 1e-9);

    // Gamma with shape near 1: A uses lgamma1p, so η₁ = 1e-10 keeps full relative accuracy.
    let gamma = Family::Gamma.eval();
    let a: f64 = gamma.log_partition(&[1e-10, -1.0]).unwrap();
    // A(η) = lnΓ(η₁ + 1) − (η₁ + 1)·ln(−η₂) = lnΓ(1 + 1e-10) ≈ −γ·1e-10 at η₂ = −1.
    let want = -0.577_215_664_901_532_9 * 1e-10 + 0.822_467_033_424_113_2 * 1e-20;
    println!("Gamma A(1e-10, −1) = {a:e} (rel err {:.1e})", rel(a, want));
    assert!(rel(a, want) < 1e-14);
}

#[cfg(test)]
mod tests {
    #[test]
    fn example_runs() {
        super::main();
    }
}
