//! Unit tests of `Dd`: constants, conversions, bits, rounding, fused and remainder
//! operations, decimal output and use through ndarray.

use super::Dd;
use crate::Real;
use ndarray::{Array2, ArrayD, IxDyn};

fn p2(n: i32) -> f64 {
    2f64.powi(n)
}

#[test]
fn constants_are_what_they_claim() {
    assert_eq!(Dd::EPSILON.parts(), (p2(-104), 0.0));
    assert_eq!(Dd::MIN_POSITIVE.parts(), (p2(-969), 0.0));
    assert_eq!(Dd::MAX.hi() + Dd::MAX.lo(), f64::MAX);
    // One more unit of lo (the next f64 up) would round hi + lo to +∞.
    let next = f64::from_bits(Dd::MAX.lo().to_bits() + 1);
    assert_eq!(f64::MAX + next, f64::INFINITY);
    assert!(Dd::MAX.is_finite() && Dd::MAX > Dd::from_f64(f64::MAX));
    assert_eq!(Dd::NAME, "dd");
    assert_eq!(Dd::BYTES, std::mem::size_of::<Dd>());
    assert_eq!(
        (Dd::ZERO, Dd::ONE, Dd::TWO, Dd::HALF),
        (0.0.into(), 1.0.into(), 2.0.into(), 0.5.into())
    );
    assert_eq!(Dd::default(), Dd::ZERO);
    // 1 + ε is the next double-double after 1 at 104 bits: representable, and ε/2 is still seen.
    assert!(Dd::ONE + Dd::EPSILON > Dd::ONE);
    assert!(Dd::ONE + Dd::EPSILON.ldexp(-1) > Dd::ONE);
}

#[test]
fn conversions_are_exact() {
    for n in [
        0usize,
        1,
        12345,
        (1 << 53) + 1,
        (1 << 60) + 3,
        usize::MAX,
        usize::MAX - 1024,
    ] {
        let d = Dd::from_usize(n);
        assert_eq!(d.hi() + d.lo(), d.hi());
        assert_eq!(d.hi() as i128 + d.lo() as i128, n as i128, "{n}");
    }
    for x in [0.1, -3.5e300, 5e-324, f64::MAX] {
        assert_eq!(Dd::from_f64(x).to_f64(), x);
        assert_eq!(Dd::from(x).parts(), (x, 0.0));
    }
    let third = Dd::ONE / Dd::from_f64(3.0);
    assert_eq!(third.to_f64(), 1.0 / 3.0);
    assert_eq!(Dd::new(1.0, p2(-60)).parts(), (1.0, p2(-60)));
    assert_eq!(Dd::new(p2(-60), 1.0).parts(), (1.0, p2(-60)));
}

#[test]
fn bits_differ_when_either_word_does() {
    let a = Dd::new(1.0, p2(-60));
    let b = Dd::new(1.0, p2(-61));
    let c = Dd::new(1.0 + f64::EPSILON, p2(-60));
    assert_ne!(a.to_bits_u64(), b.to_bits_u64());
    assert_ne!(a.to_bits_u64(), c.to_bits_u64());
    assert_ne!(
        Dd::new(1.0, 0.0).to_bits_u64(),
        Dd::raw(1.0, -0.0).to_bits_u64()
    );
    assert_eq!(Dd::from_f64(2.5).to_bits_u64(), 2.5f64.to_bits());
    assert_eq!(a.to_bits_u64(), Dd::new(1.0, p2(-60)).to_bits_u64());
}

#[test]
fn integer_rounding_uses_the_low_word() {
    let big = p2(60);
    let cases = [
        // (hi, lo, floor, round, trunc) with the results as (hi + lo) offsets from hi.
        (big, -0.25, -1.0, 0.0, -1.0),
        (big, 0.5, 0.0, 1.0, 0.0),
        (big, -0.5, -1.0, 0.0, -1.0),
        (-big, 0.5, 0.0, 0.0, 1.0),
        (-big, -0.5, -1.0, -1.0, 0.0),
        (-big, 0.25, 0.0, 0.0, 1.0),
    ];
    for (hi, lo, f, r, t) in cases {
        let x = Dd::new(hi, lo);
        assert_eq!(x.floor(), Dd::new(hi, f), "floor {hi} {lo}");
        assert_eq!(x.round(), Dd::new(hi, r), "round {hi} {lo}");
        assert_eq!(x.trunc(), Dd::new(hi, t), "trunc {hi} {lo}");
    }
    // A half-integral hi: the sign of lo decides.
    assert_eq!(Dd::new(2.5, -1e-20).round(), Dd::from_f64(2.0));
    assert_eq!(Dd::new(2.5, 1e-20).round(), Dd::from_f64(3.0));
    assert_eq!(Dd::new(-2.5, 1e-20).round(), Dd::from_f64(-2.0));
    assert_eq!(Dd::from_f64(-2.5).round(), Dd::from_f64(-3.0));
    assert_eq!(Dd::new(3.0, -1e-20).floor(), Dd::from_f64(2.0));
    assert_eq!(Dd::new(-3.0, 1e-20).trunc(), Dd::from_f64(-2.0));
    assert!(Dd::from_f64(-0.3).trunc().is_sign_negative());
}

#[test]
fn mul_add_rounds_once_and_rem_is_exact() {
    let e = Dd::from_f64(p2(-60));
    let (a, b) = (Dd::ONE + e, Dd::ONE - e);
    // (1 + 2⁻⁶⁰)(1 − 2⁻⁶⁰) − 1 = −2⁻¹²⁰ exactly; the separate product rounds it away.
    assert_eq!(a.mul_add(b, -Dd::ONE), Dd::from_f64(-p2(-120)));
    assert_eq!(a * b - Dd::ONE, Dd::ZERO);
    // 10 % 3 = 1; x % y keeps the sign of x; a remainder below hi's ulp.
    let (ten, three) = (Dd::from_f64(10.0), Dd::from_f64(3.0));
    assert_eq!(ten % three, Dd::ONE);
    assert_eq!(-ten % three, -Dd::ONE);
    let x = Dd::new(p2(70), 5.0);
    assert_eq!(x % Dd::from_f64(8.0), Dd::from_f64(5.0));
    let mut y = x;
    y %= Dd::from_f64(4.0);
    assert_eq!(y, Dd::ONE);
    // Huge quotients (up to 2¹⁰⁶⁰): as f64's exact fmod.
    for (a, b) in [
        (1e300, 3.0),
        (f64::MAX, 0.1),
        (1e20, 1e-300),
        (-7e250, 1.7e-5),
        (2f64.powi(200), -3.0),
    ] {
        assert_eq!(
            Dd::from_f64(a) % Dd::from_f64(b),
            Dd::from_f64(a % b),
            "{a} % {b}"
        );
    }
}

#[test]
fn decimal_output() {
    let third = Dd::ONE / Dd::from_f64(3.0);
    assert_eq!(format!("{third}"), "0.33333333333333333333333333333333");
    assert_eq!(format!("{:.5}", third), "0.33333");
    assert_eq!(
        format!("{:e}", third),
        "3.3333333333333333333333333333333e-1"
    );
    assert_eq!(format!("{:.3e}", -third), "-3.333e-1");
    assert_eq!(format!("{}", Dd::PI), "3.1415926535897932384626433832795");
    assert_eq!(format!("{:.40}", Dd::PI).len(), 42);
    // The f64 nearest 10⁴⁰ is not 10⁴⁰; 10⁴⁰ = 2⁴⁰·5⁴⁰ (93 bits) is a double-double.
    assert_eq!(
        format!("{:e}", Dd::from_f64(1e40)),
        "1.0000000000000000303786028427004e40"
    );
    assert_eq!(format!("{}", Dd::from_f64(10.0).powi(40)), "1e40");
    assert_eq!(format!("{}", Dd::from_f64(-1234.5)), "-1234.5");
    assert_eq!(format!("{}", Dd::from_f64(0.0)), "0");
    assert_eq!(format!("{:.2}", Dd::from_f64(9.999)), "10.00");
    assert_eq!(format!("{:.2}", Dd::from_f64(0.004)), "0.00");
    assert_eq!(format!("{:.2}", Dd::from_f64(0.006)), "0.01");
    assert_eq!(
        format!("{:>8.2}|{:<6}|{:+}", Dd::ONE, Dd::TWO, Dd::ONE),
        "    1.00|2     |+1"
    );
    assert_eq!(
        format!("{} {} {}", Dd::NAN, Dd::INFINITY, Dd::NEG_INFINITY),
        "NaN inf -inf"
    );
    assert_eq!(format!("{:?}", Dd::HALF), "0.5");
    assert_eq!(
        format!("{:#?}", Dd::new(1.0, p2(-60))).replace(['\n', ' '], ""),
        "Dd{hi:1.0,lo:8.673617379884035e-19,}"
    );
    // 1 + 10⁻³⁰ needs the low word: its 31st decimal shows.
    let x = Dd::ONE + Dd::from_f64(1e-30);
    assert_eq!(format!("{x:.31}"), "1.0000000000000000000000000000010");
    let tiny = Dd::from_f64(1e-300) / Dd::from_f64(3.0);
    assert_eq!(format!("{tiny:.5e}"), "3.33333e-301");
    let max = format!("{:e}", Dd::MAX);
    assert!(
        max.starts_with("1.79769313486231") && max.ends_with("e308"),
        "{max}"
    );
}

#[test]
fn works_through_ndarray() {
    let z = ArrayD::<Dd>::zeros(IxDyn(&[2, 3]));
    assert!(z.iter().all(|&v| v == Dd::ZERO));
    let a = Array2::from_shape_fn((3, 4), |(i, j)| {
        Dd::from_f64(1.0 + i as f64) / Dd::from_f64(3.0 + j as f64)
    });
    let b = Array2::from_shape_fn((4, 2), |(i, j)| Dd::from_f64((i + 2 * j) as f64).sqrt());
    let c = a.dot(&b);
    for i in 0..3 {
        for j in 0..2 {
            let want: Dd = (0..4).map(|p| a[[i, p]] * b[[p, j]]).sum();
            assert!(
                ((c[[i, j]] - want) / want).abs() < Dd::from_f64(1e-31),
                "{i},{j}"
            );
        }
    }
    let doubled = a.mapv(|v| v * Dd::TWO);
    assert_eq!(doubled[[2, 3]], a[[2, 3]] + a[[2, 3]]);
    let s: Dd = a.sum();
    let want: Dd = a.iter().copied().sum();
    assert!(((s - want) / want).abs() < Dd::from_f64(1e-31));
    let scaled = &a * Dd::HALF;
    assert_eq!(scaled[[1, 1]], a[[1, 1]] * Dd::HALF);
    let refs: Dd = [Dd::ONE, Dd::TWO].iter().sum();
    assert_eq!(refs, Dd::from_f64(3.0));
}

#[test]
fn generic_code_runs_in_double_double() {
    fn harmonic<T: Real>(n: usize) -> T {
        (1..=n).map(|k| T::ONE / T::from_usize(k)).sum()
    }
    // H₁₀₀ − ln 100 − γ ≈ 1/200 − 1/120000 …: the Dd sum keeps 30+ digits.
    let h: Dd = harmonic(100);
    let h64: f64 = harmonic(100);
    assert!((h.to_f64() - h64).abs() < 1e-13);
    let back: Dd = (1..=100).rev().map(|k| Dd::ONE / Dd::from_usize(k)).sum();
    assert!(((h - back) / h).abs() < Dd::from_f64(1e-31));
    assert!(((h - back) / h).abs() > Dd::ZERO || h == back);
}
