//! Every SIMD variant against the scalar path (lengths 0..=67 and long rows) and the
//! vectorised exponential against `std` over dense sweeps.

use super::*;

/// Deterministic pseudo-random values in [lo, hi) (xorshift; tests never draw from the OS).
fn values(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

fn conv<T: Real>(v: &[f64]) -> Vec<T> {
    v.iter().map(|&x| T::from_f64(x)).collect()
}

fn lengths() -> Vec<usize> {
    let mut l: Vec<usize> = (0..=67).collect();
    l.extend([255, 1000, 4099]);
    l
}

fn vector_isas() -> Vec<Isa> {
    [Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|i| i.is_supported())
        .collect()
}

/// |a − b| ≤ tol·scale, with exact equality for infinities.
fn close(a: f64, b: f64, tol: f64, scale: f64, what: &str) {
    if a == b {
        return;
    }
    assert!(
        (a - b).abs() <= tol * scale.max(1e-300),
        "{what}: {a} vs {b} (tol {tol}, scale {scale})"
    );
}

fn variants_match_scalar<T: Real>(tol: f64) {
    for isa in vector_isas() {
        for n in lengths() {
            let a: Vec<T> = conv(&values(n, n as u64 + 1, -2.0, 2.0));
            let b: Vec<T> = conv(&values(n, n as u64 + 99, -2.0, 2.0));
            let abs: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (x.to_f64() * y.to_f64()).abs())
                .sum();
            let tag = format!("{} {} n={n}", T::NAME, isa.name());
            close(
                dot_with(isa, &a, &b).to_f64(),
                dot_with(Isa::Scalar, &a, &b).to_f64(),
                tol,
                abs,
                &tag,
            );
            let abs: f64 = a.iter().map(|x| x.to_f64().abs()).sum();
            close(
                sum_with(isa, &a).to_f64(),
                sum_with(Isa::Scalar, &a).to_f64(),
                tol,
                abs,
                &tag,
            );
            assert_eq!(
                max_with(isa, &a).to_f64(),
                max_with(Isa::Scalar, &a).to_f64(),
                "{tag} max"
            );
            let m = T::from_f64(0.5);
            let se: f64 = a.iter().map(|x| (x.to_f64() - 0.5).exp()).sum();
            let (v, s) = (
                sum_exp_with(isa, &a, m).to_f64(),
                sum_exp_with(Isa::Scalar, &a, m).to_f64(),
            );
            close(v, s, tol, se, &format!("{tag} sum_exp"));
            close(v, se, 4.0 * tol, se, &format!("{tag} sum_exp vs std"));
            let (mut x1, mut x2) = (a.clone(), a.clone());
            let s1 = exp_sub_sum_with(isa, &mut x1, m).to_f64();
            let s2 = exp_sub_sum_with(Isa::Scalar, &mut x2, m).to_f64();
            close(s1, s2, tol, se, &format!("{tag} exp_sub_sum"));
            for (p, q) in x1.iter().zip(&x2) {
                close(
                    p.to_f64(),
                    q.to_f64(),
                    tol,
                    q.to_f64().abs(),
                    &format!("{tag} exp_sub_sum values"),
                );
            }
            let (mut y1, mut y2) = (b.clone(), b.clone());
            axpy_with(isa, T::from_f64(-0.75), &a, &mut y1);
            axpy_with(Isa::Scalar, T::from_f64(-0.75), &a, &mut y2);
            // axpy is elementwise with one fused rounding: bitwise equal.
            assert!(y1.iter().zip(&y2).all(|(p, q)| p == q), "{tag} axpy");
            let (mut z1, mut z2) = (a.clone(), a.clone());
            scale_with(isa, T::from_f64(1.25), &mut z1);
            scale_with(Isa::Scalar, T::from_f64(1.25), &mut z2);
            assert!(z1.iter().zip(&z2).all(|(p, q)| p == q), "{tag} scale");
        }
    }
}

#[test]
fn vector_variants_match_scalar_f32() {
    variants_match_scalar::<f32>(2e-6);
}

#[test]
fn vector_variants_match_scalar_f64() {
    variants_match_scalar::<f64>(1e-14);
}

#[test]
fn scalar_kernels_match_plain_loops() {
    let a = values(37, 3, -1.0, 1.0);
    let b = values(37, 4, -1.0, 1.0);
    let d: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    assert!((dot_with(Isa::Scalar, &a, &b) - d).abs() < 1e-14);
    assert!((sum_with(Isa::Scalar, &a) - a.iter().sum::<f64>()).abs() < 1e-14);
    assert_eq!(
        max_with(Isa::Scalar, &a),
        a.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
    );
    assert_eq!(max_with::<f64>(Isa::Scalar, &[]), f64::NEG_INFINITY);
    assert_eq!(sum_with::<f32>(Isa::Avx512, &[]), 0.0);
    let se: f64 = a.iter().map(|x| (x - 0.25).exp()).sum();
    assert!((sum_exp_with(Isa::Scalar, &a, 0.25) - se).abs() < 1e-14 * se);
}

#[test]
fn max_ignores_nan_and_sum_exp_of_neg_infinity_is_zero() {
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        let mut x = vec![f32::NEG_INFINITY; 40];
        assert_eq!(sum_exp_with(isa, &x, 0.0), 0.0, "{}", isa.name());
        x[17] = f32::NAN;
        x[33] = 2.5;
        assert_eq!(max_with(isa, &x), 2.5, "{}", isa.name());
    }
}

/// Max relative error of exp over `xs`, in units of the type's epsilon, against `reference`.
fn exp_max_ulp<T: Real>(isa: Isa, xs: &[f64], reference: impl Fn(f64) -> f64) -> f64 {
    let mut v: Vec<T> = conv(xs);
    let inputs = v.clone();
    exp_slice_with(isa, &mut v);
    let mut worst = 0.0f64;
    for (x, e) in inputs.iter().zip(&v) {
        let r = reference(x.to_f64());
        if r < T::MIN_POSITIVE.to_f64() || !r.is_finite() {
            continue;
        }
        let rel = ((e.to_f64() - r) / r).abs() / T::EPSILON.to_f64();
        assert!(
            rel.is_finite(),
            "{} exp({}) = {} vs {}",
            isa.name(),
            x,
            e,
            r
        );
        worst = worst.max(rel);
    }
    worst
}

/// Documented bound: max relative error below 2 ulp (2·ε) for results in the normal range.
#[test]
fn exp_dense_sweep_f32_within_2ulp() {
    // f32 against the f64 exponential of the same (f32) input: ~3 million points.
    let n = 3_000_000;
    let xs: Vec<f64> = (0..n)
        .map(|i| -87.3 + (88.7 + 87.3) * i as f64 / n as f64)
        .collect();
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        let worst = exp_max_ulp::<f32>(isa, &xs, f64::exp);
        assert!(worst < 2.0, "{} f32 exp worst {worst} ulp", isa.name());
    }
}

#[test]
fn exp_dense_sweep_f64_within_2ulp() {
    let n = 2_000_000;
    let xs: Vec<f64> = (0..n)
        .map(|i| -708.0 + 1417.0 * i as f64 / n as f64)
        .collect();
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        let worst = exp_max_ulp::<f64>(isa, &xs, f64::exp);
        assert!(worst < 2.0, "{} f64 exp worst {worst} ulp", isa.name());
    }
    // Near zero, where most softmax arguments live, densely.
    let xs: Vec<f64> = (0..200_000)
        .map(|i| -1.0 + 2.0 * i as f64 / 200_000.0)
        .collect();
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        assert!(exp_max_ulp::<f64>(isa, &xs, f64::exp) < 2.0);
    }
}

fn exp_specials<T: Real>() {
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        let mut v: Vec<T> = conv(&[
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::NAN,
            0.0,
            1e4,
            -1e4,
            1.0,
        ]);
        exp_slice_with(isa, &mut v);
        let tag = format!("{} {}", T::NAME, isa.name());
        assert_eq!(v[0].to_f64(), 0.0, "{tag} exp(-inf)");
        assert_eq!(v[1].to_f64(), f64::INFINITY, "{tag} exp(inf)");
        assert!(v[2].is_nan(), "{tag} exp(nan)");
        assert_eq!(v[3].to_f64(), 1.0, "{tag} exp(0)");
        assert_eq!(v[4].to_f64(), f64::INFINITY, "{tag} overflow");
        assert_eq!(v[5].to_f64(), 0.0, "{tag} underflow");
        assert!((v[6].to_f64() - std::f64::consts::E).abs() < 2.0 * T::EPSILON.to_f64() * 3.0);
    }
}

#[test]
fn exp_special_values() {
    exp_specials::<f32>();
    exp_specials::<f64>();
}

#[test]
fn exp_overflow_and_gradual_underflow_boundaries() {
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        // Just below the f32 overflow threshold ln(f32::MAX) ≈ 88.7228: finite, accurate.
        let mut v = vec![88.72f32, 88.73, -87.0, -95.0, -103.0, -104.5];
        exp_slice_with(isa, &mut v);
        let r = (88.72f32 as f64).exp();
        assert!(
            v[0].is_finite() && ((v[0] as f64 - r) / r).abs() < 3e-7,
            "{}",
            isa.name()
        );
        assert_eq!(v[1], f32::INFINITY);
        assert!(((v[2] as f64 - (-87.0f64).exp()) / (-87.0f64).exp()).abs() < 3e-7);
        // Subnormal results: absolute error within one subnormal step (2^-149).
        let step = 2f64.powi(-149);
        assert!(
            (v[3] as f64 - (-95.0f64).exp()).abs() <= step,
            "{}",
            isa.name()
        );
        assert!((v[4] as f64 - (-103.0f64).exp()).abs() <= step);
        assert_eq!(v[5], 0.0);
        let mut w = vec![709.7f64, 709.8, -740.0, -746.0];
        exp_slice_with(isa, &mut w);
        assert!(w[0].is_finite() && ((w[0] - 709.7f64.exp()) / 709.7f64.exp()).abs() < 5e-16);
        assert_eq!(w[1], f64::INFINITY);
        assert!((w[2] - (-740.0f64).exp()).abs() <= 2f64.powi(-1074));
        assert_eq!(w[3], 0.0);
    }
}

#[test]
fn env_override_and_detection_are_consistent() {
    assert!(active().is_supported());
    assert!(detected().is_supported());
    assert_eq!(Isa::Scalar.or_scalar(), Isa::Scalar);
    assert_eq!(elem_kind::<f32>(), ElemKind::F32);
    assert_eq!(elem_kind::<f64>(), ElemKind::F64);
}

#[test]
fn efa_simd_values_parse() {
    assert_eq!(Isa::parse(" AVX512 "), Some(Isa::Avx512));
    assert_eq!(Isa::parse("avx2"), Some(Isa::Avx2));
    assert_eq!(Isa::parse("scalar"), Some(Isa::Scalar));
    assert_eq!(Isa::parse("neon"), None);
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        assert_eq!(Isa::parse(isa.name()), Some(isa));
    }
}

/// Checks `active()` against `EFA_SIMD` in this process (run in a child by the test below).
#[test]
fn active_follows_env() {
    match std::env::var("EFA_SIMD") {
        Ok(v) => match Isa::parse(&v) {
            Some(isa) => assert_eq!(active(), isa.or_scalar()),
            None => assert_eq!(active(), Isa::Scalar),
        },
        Err(_) => assert_eq!(active(), detected()),
    }
}

#[test]
fn efa_simd_env_forces_a_variant() {
    let exe = std::env::current_exe().unwrap();
    for v in ["scalar", "avx2", "avx512", "bogus"] {
        let out = std::process::Command::new(&exe)
            .args([
                "--exact",
                "simd::tests::active_follows_env",
                "--test-threads",
                "1",
            ])
            .env("EFA_SIMD", v)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "EFA_SIMD={v}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "EFA_SIMD={v}: child ran no test"
        );
    }
}

/// The vector exponential is lane for lane the one-lane one (the tails of `exp_sub_sum` rely
/// on it): bitwise equal over a dense sweep of the clamped range, subnormal results included.
fn exp_lanes_bitwise<T: Real>(lo: f64, hi: f64, n: usize) {
    let xs: Vec<f64> = (0..n)
        .map(|i| lo + (hi - lo) * i as f64 / n as f64)
        .collect();
    let mut want: Vec<T> = conv(&xs);
    exp_slice_with(Isa::Scalar, &mut want);
    for isa in vector_isas() {
        let mut got: Vec<T> = conv(&xs);
        exp_slice_with(isa, &mut got);
        for ((g, w), x) in got.iter().zip(&want).zip(&xs) {
            assert!(
                g.to_f64().to_bits() == w.to_f64().to_bits(),
                "{} {} exp({x}) = {g} vs scalar {w}",
                T::NAME,
                isa.name()
            );
        }
    }
}

#[test]
fn vector_exp_is_the_scalar_exp_bitwise() {
    exp_lanes_bitwise::<f32>(-112.0, 90.0, 2_000_000);
    exp_lanes_bitwise::<f32>(-1.0, 1.0, 200_000);
    exp_lanes_bitwise::<f64>(-762.0, 712.0, 1_000_000);
}

/// `exp_sub_sum` writes the same values on every variant (its tail runs as a padded vector
/// on the vector variants), and its sum adds them in some fixed order: within rounding of
/// the scalar sum. `max` is exact: equal on every variant, NaNs ignored, −∞ padding never
/// shows.
#[test]
fn exp_sub_sum_and_max_tails_match_scalar() {
    tails_match_scalar::<f32>(1e-6);
    tails_match_scalar::<f64>(1e-13);
}

/// [`exp_sub_sum_and_max_tails_match_scalar`] in `T`: bits compared through the exact widening
/// to f64.
fn tails_match_scalar<T: Real>(tol: f64) {
    let bits = |x: T| x.to_f64().to_bits();
    for isa in vector_isas() {
        for n in 0..80usize {
            let a: Vec<T> = conv(&values(n, n as u64 + 7, -30.0, 3.0));
            let m = max_with(Isa::Scalar, &a);
            assert_eq!(bits(max_with(isa, &a)), bits(m), "{} n={n}", isa.name());
            let (mut x1, mut x2) = (a.clone(), a.clone());
            let s1 = exp_sub_sum_with(isa, &mut x1, m);
            let s2 = exp_sub_sum_with(Isa::Scalar, &mut x2, m);
            for (j, (&p, &q)) in x1.iter().zip(&x2).enumerate() {
                assert_eq!(bits(p), bits(q), "{} n={n} j={j}", isa.name());
            }
            let exact: f64 = x2.iter().map(|&e| e.to_f64()).sum();
            assert!(
                ((s1.to_f64() - exact) / exact.max(1e-30)).abs() < tol,
                "{} n={n}: {s1:?} vs {s2:?}",
                isa.name()
            );
            // NaN entries are ignored by max; an all-NaN row gives −∞.
            let mut b = a.clone();
            for v in b.iter_mut().step_by(3) {
                *v = T::NAN;
            }
            assert_eq!(
                bits(max_with(isa, &b)),
                bits(max_with(Isa::Scalar, &b)),
                "{} n={n} NaN",
                isa.name()
            );
        }
    }
}

/// Tails are read and written only within the slice: a sentinel just past it stays.
#[test]
fn tails_stay_inside_the_slice() {
    for isa in vector_isas() {
        for n in 0..40usize {
            let mut buf: Vec<f32> = conv(&values(n + 1, n as u64 + 3, -4.0, 4.0));
            buf[n] = 1234.5;
            let m = max_with(isa, &buf[..n]);
            if n > 0 {
                exp_sub_sum_with(isa, &mut buf[..n], m);
            }
            scale_with(isa, 0.5, &mut buf[..n]);
            assert_eq!(buf[n], 1234.5, "{} n={n}", isa.name());
            let mut w: Vec<f64> = values(n + 1, n as u64 + 5, -4.0, 4.0);
            w[n] = -7.25;
            let m = max_with(isa, &w[..n]);
            if n > 0 {
                exp_sub_sum_with(isa, &mut w[..n], m);
            }
            scale_with(isa, 0.5, &mut w[..n]);
            assert_eq!(w[n], -7.25, "{} f64 n={n}", isa.name());
        }
    }
}

/// `div` of every vector type gives the bits of the scalar division, lane by lane: random
/// values, signed zeros, infinities, NaN, subnormals and quotients that overflow or underflow.
#[test]
fn vector_division_is_the_scalar_division() {
    fn check<V: SimdVec>(isa: Isa)
    where
        V::Elem: Real,
    {
        if !isa.is_supported() {
            return;
        }
        let specials = [
            0.0,
            -0.0,
            1.0,
            -3.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            1e-310,
            1e-40,
            3e38,
            1e300,
            7.0,
        ];
        let mut a: Vec<f64> = values(64, 3, -10.0, 10.0);
        let mut b: Vec<f64> = values(64, 4, -2.0, 2.0);
        for (i, &x) in specials.iter().enumerate() {
            for (j, &y) in specials.iter().enumerate() {
                a.push(x * if (i + j) % 2 == 0 { 1.0 } else { -1.0 });
                b.push(y);
            }
        }
        while !a.len().is_multiple_of(V::LANES) {
            a.push(1.0);
            b.push(3.0);
        }
        let (a, b): (Vec<V::Elem>, Vec<V::Elem>) = (conv(&a), conv(&b));
        let mut got = vec![V::Elem::ZERO; a.len()];
        for c in (0..a.len()).step_by(V::LANES) {
            // SAFETY: the instruction set is supported; each chunk has LANES elements.
            unsafe {
                V::load(a[c..].as_ptr())
                    .div(V::load(b[c..].as_ptr()))
                    .store(got[c..].as_mut_ptr())
            };
        }
        for ((&x, &y), &g) in a.iter().zip(&b).zip(&got) {
            let want = x / y;
            assert!(
                want.to_f64().to_bits() == g.to_f64().to_bits() || (want.is_nan() && g.is_nan()),
                "{} {}: {x:e} / {y:e} = {g:e}, scalar {want:e}",
                isa.name(),
                V::Elem::NAME
            );
        }
    }
    check::<Lane<f32>>(Isa::Scalar);
    check::<Lane<f64>>(Isa::Scalar);
    #[cfg(target_arch = "x86_64")]
    {
        check::<Avx2F32>(Isa::Avx2);
        check::<Avx2F64>(Isa::Avx2);
        check::<Avx512F32>(Isa::Avx512);
        check::<Avx512F64>(Isa::Avx512);
    }
}

/// `bodies::exp_shift_strided` (`SIDE` exponentials side by side, summed in order) against the
/// one-vector loop it replaces, bit for bit: values written and the sum, for every count up to
/// 11 (whole blocks of four and every remainder), strides past one vector, and inputs from
/// far below the shift to above it, with −∞ entries (exp gives 0).
#[test]
fn strided_exponentials_match_the_one_vector_loop() {
    fn check<V: SimdVec>(isa: Isa)
    where
        V::Elem: Real,
    {
        if !isa.is_supported() {
            return;
        }
        let w = V::LANES;
        for n in 0..=11 {
            for stride in [w, 2 * w + 1] {
                let mut v = values(n * stride + w, 7 + n as u64, -90.0, 3.0);
                for (i, x) in v.iter_mut().enumerate() {
                    if i % 13 == 5 {
                        *x = f64::NEG_INFINITY;
                    }
                }
                let mut got: Vec<V::Elem> = conv(&v);
                let mut want = got.clone();
                // SAFETY: the instruction set is supported; every vector j < n starts at
                // j·stride and ends inside the buffer (n·stride + w elements).
                let (sg, sw) = unsafe {
                    let shift = V::splat(V::Elem::from_f64(-1.5));
                    let sg = bodies::exp_shift_strided::<V>(got.as_mut_ptr(), stride, n, shift);
                    let mut sw = V::splat(V::Elem::ZERO);
                    for j in 0..n {
                        let p = want.as_mut_ptr().add(j * stride);
                        let e = V::load(p).sub(shift).exp();
                        e.store(p);
                        sw = sw.add(e);
                    }
                    let (mut a, mut b) = (vec![V::Elem::ZERO; w], vec![V::Elem::ZERO; w]);
                    sg.store(a.as_mut_ptr());
                    sw.store(b.as_mut_ptr());
                    (a, b)
                };
                let bits =
                    |x: &[V::Elem]| x.iter().map(|e| e.to_f64().to_bits()).collect::<Vec<_>>();
                let what = format!("{} {} n {n} stride {stride}", isa.name(), V::Elem::NAME);
                assert_eq!(bits(&got), bits(&want), "{what}: values");
                assert_eq!(bits(&sg), bits(&sw), "{what}: sum");
            }
        }
    }
    check::<Lane<f32>>(Isa::Scalar);
    check::<Lane<f64>>(Isa::Scalar);
    #[cfg(target_arch = "x86_64")]
    {
        check::<Avx2F32>(Isa::Avx2);
        check::<Avx2F64>(Isa::Avx2);
        check::<Avx512F32>(Isa::Avx512);
        check::<Avx512F64>(Isa::Avx512);
    }
}
