//! Property tests of `Dd` on seeded random pairs: normalisation after every operation,
//! inverse pairs, exact agreement with f64 where f64 is exact or correctly rounded, and the
//! non-finite cases.

use super::Dd;
use crate::Real;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A random normalised pair: `hi = m·10ᵉ` (m ∈ ±[1, 10), e ∈ [lo_e, hi_e]) and a random
/// `lo` below half an ulp of `hi`.
fn pair(rng: &mut StdRng, lo_e: i32, hi_e: i32) -> Dd {
    let m: f64 = rng.random_range(1.0..10.0);
    let s = if rng.random_bool(0.5) { -1.0 } else { 1.0 };
    let hi = s * m * 10f64.powi(rng.random_range(lo_e..=hi_e));
    let lo = hi * f64::EPSILON * rng.random_range(-0.245..0.245);
    assert_eq!(hi + lo, hi);
    Dd::new(hi, lo)
}

fn pairs(seed: u64, n: usize, lo_e: i32, hi_e: i32) -> Vec<Dd> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| pair(&mut rng, lo_e, hi_e)).collect()
}

/// `|a − b| / |b|`, computed in Dd.
fn rel(a: Dd, b: Dd) -> f64 {
    ((a - b) / b).hi.abs()
}

#[track_caller]
fn normalised(x: Dd, what: &str) {
    if x.is_finite() {
        assert_eq!(x.hi() + x.lo(), x.hi(), "{what}: {:#?} not normalised", x);
    } else {
        assert_eq!(x.lo(), 0.0, "{what}: non-finite {:#?} with lo ≠ 0", x);
    }
}

#[test]
fn every_operation_leaves_a_normalised_pair() {
    let xs = pairs(1, 400, -40, 40);
    for w in xs.windows(2) {
        let (a, b) = (w[0], w[1]);
        for (r, what) in [
            (a + b, "+"),
            (a - b, "−"),
            (a * b, "×"),
            (a / b, "÷"),
            (a % b, "%"),
            (a.abs().sqrt(), "sqrt"),
            (a.abs().ln(), "ln"),
            (a.ln_1p(), "ln_1p"),
            (a.abs().powf(Dd::from_f64(0.37)), "powf"),
            (a.powi(3), "powi"),
            (a.mul_add(b, a), "mul_add"),
            (a.tanh(), "tanh"),
            (a.erf(), "erf"),
            (a.floor(), "floor"),
            (a.round(), "round"),
        ] {
            normalised(r, what);
        }
        let e = Dd::from_f64(a.hi().clamp(-700.0, 700.0));
        normalised(e.exp(), "exp");
        normalised(e.exp_m1(), "exp_m1");
        normalised(a.abs().lgamma(), "lgamma");
    }
}

#[test]
fn sums_and_products_invert() {
    let xs = pairs(2, 600, -20, 20);
    let mut worst = (0.0f64, 0.0f64);
    for w in xs.windows(2) {
        let (a, b) = (w[0], w[1]);
        // (a + b) − b = a up to the roundings of the two sums, relative to the operands.
        let back = (a + b) - b;
        let scale = a.abs().max(b.abs());
        let e_add = ((back - a) / scale).hi().abs();
        worst.0 = worst.0.max(e_add);
        assert!(e_add <= 1e-31, "(a+b)−b: {e_add:e} for {a:e}, {b:e}");
        let e_mul = rel(a * b / b, a);
        worst.1 = worst.1.max(e_mul);
        assert!(e_mul <= 1e-31, "a·b/b: {e_mul:e} for {a:e}, {b:e}");
    }
    println!("worst (a+b)−b {:.2e}, a·b/b {:.2e}", worst.0, worst.1);
}

#[test]
fn exp_ln_and_sqrt_square_invert() {
    // Magnitudes from 10⁻²⁹⁰ up: below MIN_POSITIVE (2⁻⁹⁶⁹) the trailing word is subnormal.
    for x in pairs(3, 500, -290, 300) {
        let x = x.abs();
        let l = x.ln();
        // exp amplifies the absolute error of ln x by 1 (relative): allow |ln x|·u²-ish.
        let tol = 1e-31 * l.hi().abs().max(1.0);
        let e = rel(l.exp(), x);
        assert!(e <= tol, "exp(ln x): {e:e} for {x:e}");
        let s = x.sqrt();
        assert!(rel(s * s, x) <= 1e-31, "sqrt(x)² for {x:e}");
    }
    for x in pairs(4, 300, -20, 0) {
        let e = rel(x.exp_m1().ln_1p(), x);
        assert!(e <= 1e-30, "ln_1p(exp_m1 x): {e:e} for {x:e}");
    }
}

#[test]
fn agrees_with_f64_where_f64_is_exact_or_correctly_rounded() {
    let mut rng = StdRng::seed_from_u64(5);
    for _ in 0..2000 {
        let a: f64 = rng.random_range(-1e6..1e6) * 10f64.powi(rng.random_range(-10..10));
        let b: f64 = rng.random_range(-1e6..1e6) * 10f64.powi(rng.random_range(-10..10));
        let (da, db) = (Dd::from_f64(a), Dd::from_f64(b));
        // TwoSum and TwoProd: hi is the f64 result, hi + lo the exact one.
        let s = da + db;
        assert_eq!(s.hi(), a + b);
        assert_eq!(s.lo(), (a - (s.hi() - (s.hi() - a))) + (b - (s.hi() - a)));
        let p = da * db;
        assert_eq!((p.hi(), p.lo()), (a * b, a.mul_add(b, -(a * b))));
        // Correctly rounded f64 operations: hi (the Dd value rounded) equals them.
        assert_eq!((da / db).hi(), a / b);
        assert_eq!(da.abs().sqrt().hi(), a.abs().sqrt());
        assert_eq!(da % db, Dd::from_f64(a % b), "{a} % {b}");
        assert_eq!(da < db, a < b);
        assert_eq!(da == db, a == b);
        assert_eq!(da.partial_cmp(&db), a.partial_cmp(&b));
        assert_eq!(Real::to_f64(da), a);
        for r in [Real::floor, Real::round, Real::trunc] {
            assert_eq!(r(da).hi(), Real::to_f64(r(Dd::from_f64(a))));
        }
        assert_eq!(Real::floor(da).hi(), a.floor());
        assert_eq!(Real::round(da).hi(), a.round());
        assert_eq!(Real::trunc(da).hi(), a.trunc());
    }
}

#[test]
fn non_finite_values_behave_as_in_f64() {
    let (inf, ninf, nan) = (Dd::INFINITY, Dd::NEG_INFINITY, Dd::NAN);
    let one = Dd::ONE;
    let big = Dd::MAX;
    for (got, want) in [
        (inf + one, f64::INFINITY),
        (one + inf, f64::INFINITY),
        (ninf - one, f64::NEG_INFINITY),
        (inf * Dd::from_f64(-2.0), f64::NEG_INFINITY),
        (one / Dd::ZERO, f64::INFINITY),
        (-one / Dd::ZERO, f64::NEG_INFINITY),
        (one / inf, 0.0),
        (inf / Dd::from_f64(3.0), f64::INFINITY),
        (big + big, f64::INFINITY),
        (big * Dd::TWO, f64::INFINITY),
        (Dd::ZERO.ln(), f64::NEG_INFINITY),
        (inf.ln(), f64::INFINITY),
        (ninf.exp(), 0.0),
        (Dd::from_f64(710.0).exp(), f64::INFINITY),
        (Dd::from_f64(-746.0).exp(), 0.0),
        (Dd::from_f64(1e6).exp(), f64::INFINITY),
        (ninf.exp_m1(), -1.0),
        (Dd::from_f64(-1.0).ln_1p(), f64::NEG_INFINITY),
        (inf.sqrt(), f64::INFINITY),
        (inf.tanh(), 1.0),
        (ninf.tanh(), -1.0),
        (ninf.erf(), -1.0),
        (Dd::ZERO.lgamma(), f64::INFINITY),
        (Dd::from_f64(-3.0).lgamma(), f64::INFINITY),
        (Dd::from_f64(1e308).powi(2), f64::INFINITY),
    ] {
        assert_eq!(got.hi(), want, "{got:#?}");
        assert_eq!(got.lo(), 0.0, "{got:#?}");
    }
    for got in [
        inf - inf,
        inf * Dd::ZERO,
        Dd::ZERO / Dd::ZERO,
        nan + one,
        one * nan,
        nan.exp(),
        Dd::from_f64(-1.0).ln(),
        Dd::from_f64(-1e-300).ln(),
        Dd::from_f64(-2.0).ln_1p(),
        Dd::from_f64(-4.0).sqrt(),
        Dd::from_f64(-2.0).powf(Dd::HALF),
        inf % one,
        one % Dd::ZERO,
        nan.erf(),
        nan.tanh(),
        nan.lgamma(),
    ] {
        assert!(got.is_nan(), "{got:#?}");
    }
    assert!(!inf.is_finite() && !nan.is_finite() && big.is_finite());
    assert_eq!(Dd::from_f64(5.0) % inf, Dd::from_f64(5.0));
    assert_eq!(nan.max(one), one);
    assert_eq!(one.min(nan), one);
    assert_eq!(nan.partial_cmp(&one), None);
    assert!(nan != nan);
}

#[test]
fn powf_special_cases_follow_f64() {
    let vals = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        0.5,
        -0.5,
        3.0,
        -3.0,
        f64::INFINITY,
    ];
    let vals: Vec<f64> = vals
        .iter()
        .flat_map(|&v| [v, -v])
        .chain([f64::NAN])
        .collect();
    for &x in &vals {
        for &y in &vals {
            let got = Dd::from_f64(x).powf(Dd::from_f64(y));
            let want = x.powf(y);
            if want.is_nan() {
                assert!(got.is_nan(), "{x}^{y}: {got:#?}");
            } else if (y.fract() != 0.0 || y < 0.0) && want.is_finite() && want != 0.0 {
                // Not exact in binary: f64's powf is within an ulp.
                assert!(
                    (got.hi() - want).abs() <= f64::EPSILON * want.abs(),
                    "{x}^{y}"
                );
            } else {
                assert_eq!(got.hi().to_bits(), want.to_bits(), "{x}^{y}: {got:#?}");
                assert_eq!(got.lo(), 0.0);
            }
        }
    }
}
