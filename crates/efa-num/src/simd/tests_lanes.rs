//! Lane primitives every vector type implements its own way, against their definitions: the
//! partial loads and stores (`load_first`, `store_first`: the first `n` lanes hold or write
//! exactly the `n` elements at the pointer, the other lanes the fill, and nothing beside those
//! `n` elements is written) and `ldexp` (the scalar path's two-step scaling, bit for bit).

use super::*;

fn partial<V: SimdVec>(isa: Isa)
where
    V::Elem: Real,
{
    if !isa.is_supported() {
        return;
    }
    let w = V::LANES;
    let bits = |x: &[V::Elem]| x.iter().map(|e| e.to_f64().to_bits()).collect::<Vec<_>>();
    let src: Vec<V::Elem> = (0..w + 2)
        .map(|i| V::Elem::from_f64(1.5 + i as f64))
        .collect();
    for fill in [0.0, f64::NEG_INFINITY, -7.25] {
        let fill = V::Elem::from_f64(fill);
        for n in 0..w {
            let what = format!("{} {} n {n}", isa.name(), V::Elem::NAME);
            let mut got = vec![V::Elem::ZERO; w];
            // SAFETY: the instruction set is supported; `n < LANES` elements are read from
            // `src[1..]` (w + 1 elements) and `LANES` written to `got`.
            unsafe { V::load_first(src[1..].as_ptr(), n, fill).store(got.as_mut_ptr()) };
            let want: Vec<V::Elem> = (0..w)
                .map(|i| if i < n { src[1 + i] } else { fill })
                .collect();
            assert_eq!(bits(&got), bits(&want), "{what}: load_first");
            let sentinel = V::Elem::from_f64(-99.0);
            let mut dst = vec![sentinel; w + 2];
            // SAFETY: the instruction set is supported; `LANES` elements are read from `src`
            // and `n < LANES` written at `dst[1..]` (w + 1 elements).
            unsafe { V::load(src.as_ptr()).store_first(dst[1..].as_mut_ptr(), n) };
            let want: Vec<V::Elem> = (0..w + 2)
                .map(|i| {
                    if (1..=n).contains(&i) {
                        src[i - 1]
                    } else {
                        sentinel
                    }
                })
                .collect();
            assert_eq!(bits(&dst), bits(&want), "{what}: store_first");
        }
    }
}

#[test]
fn partial_loads_and_stores_touch_only_their_lanes() {
    partial::<Lane<f32>>(Isa::Scalar);
    partial::<Lane<f64>>(Isa::Scalar);
    #[cfg(target_arch = "x86_64")]
    {
        partial::<Avx2F32>(Isa::Avx2);
        partial::<Avx2F64>(Isa::Avx2);
        partial::<Avx512F32>(Isa::Avx512);
        partial::<Avx512F64>(Isa::Avx512);
    }
}

/// `x·2ⁿ` of every vector type against the scalar path's (the two-step definition), bit for
/// bit: `x` normal, subnormal, zero, infinite and NaN, `n` over twice the exponent range
/// (results that overflow, underflow gradually, or vanish). `two_step` variants compute the
/// definition itself and must match everywhere; AVX-512's `scalef` rounds once, so it is held
/// to the cases where the first step is exact (`x·2^⌊n/2⌋` normal, zero or infinite), which
/// include every scaling the exponential does (`x` in [0.7, 1.5], `|n| ≤ 160` in f32).
fn ldexp_bits<V: SimdVec>(isa: Isa, emax: i32, two_step: bool)
where
    V::Elem: Real,
    Lane<V::Elem>: SimdVec<Elem = V::Elem>,
{
    if !isa.is_supported() {
        return;
    }
    let w = V::LANES;
    let mut xs: Vec<f64> = (0..40).map(|i| -4.0 + 0.2137 * i as f64).collect();
    let tiny = V::Elem::MIN_POSITIVE.to_f64();
    xs.extend([
        0.0,
        -0.0,
        tiny / 8.0,
        -tiny / 3.0,
        tiny,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ]);
    xs.extend([f64::NAN, V::Elem::MAX.to_f64(), 0.7, 1.45]);
    for n in -2 * emax..=2 * emax {
        let (x, nv): (Vec<V::Elem>, Vec<V::Elem>) = xs
            .iter()
            .map(|&x| (V::Elem::from_f64(x), V::Elem::from_f64(n as f64)))
            .unzip();
        let mut got = vec![V::Elem::ZERO; x.len().div_ceil(w) * w];
        let mut xp = x.clone();
        let mut np = nv.clone();
        xp.resize(got.len(), V::Elem::ONE);
        np.resize(got.len(), V::Elem::ZERO);
        for c in (0..got.len()).step_by(w) {
            // SAFETY: the instruction set is supported; each chunk has LANES elements.
            unsafe {
                V::load(xp[c..].as_ptr())
                    .ldexp(V::load(np[c..].as_ptr()))
                    .store(got[c..].as_mut_ptr())
            };
        }
        for (i, (&a, &k)) in x.iter().zip(&nv).enumerate() {
            // SAFETY: the scalar lane needs no instruction set.
            let want = unsafe { SimdVec::ldexp(Lane(a), Lane(k)).0 };
            let g = got[i];
            let first = a.to_f64() * 2f64.powi(n.div_euclid(2));
            let tiny = V::Elem::MIN_POSITIVE.to_f64();
            let inexact = a.to_f64().abs() < tiny && a != V::Elem::ZERO
                || first.abs() < tiny && first != 0.0
                || first == 0.0 && a != V::Elem::ZERO;
            if !two_step && inexact {
                continue;
            }
            assert!(
                g.to_f64().to_bits() == want.to_f64().to_bits() || (g.is_nan() && want.is_nan()),
                "{} {}: ldexp({:e}, {n}) = {:e}, scalar {:e}",
                isa.name(),
                V::Elem::NAME,
                a.to_f64(),
                g.to_f64(),
                want.to_f64()
            );
        }
    }
}

#[test]
fn vector_ldexp_is_the_scalar_ldexp_bitwise() {
    #[cfg(target_arch = "x86_64")]
    {
        ldexp_bits::<Avx2F32>(Isa::Avx2, 126, true);
        ldexp_bits::<Avx2F64>(Isa::Avx2, 1022, true);
        ldexp_bits::<Avx512F32>(Isa::Avx512, 126, false);
        ldexp_bits::<Avx512F64>(Isa::Avx512, 1022, false);
    }
}
