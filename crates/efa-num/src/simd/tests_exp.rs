//! The exponential formed several vectors side by side ([`SimdVec::exp_each`]) and the softmax
//! bodies that use it, against the one-lane exponential and the one-vector loops they replaced,
//! bit for bit: every lane's value, and sums added in the same order.

use super::kernels::exp_sub_sum_body;
use super::strided::exp_shift_strided;
use super::*;

/// A dense sweep of `[lo, hi)` (past the clamps at both ends) with the special values spread
/// through it, `len` elements.
fn sweep<T: Real>(lo: f64, hi: f64, len: usize) -> Vec<T> {
    let mut x: Vec<T> = (0..len)
        .map(|i| T::from_f64(lo + (hi - lo) * i as f64 / len as f64))
        .collect();
    let specials = [f64::NEG_INFINITY, f64::INFINITY, f64::NAN, 0.0, -0.0, 1e-30];
    for (i, s) in specials.into_iter().enumerate() {
        x[(i * 37 + 5) % len] = T::from_f64(s);
    }
    x
}

/// The one-lane exponential of `x` (the scalar path).
fn lane_exp<T: Real>(x: T) -> T
where
    Lane<T>: SimdVec<Elem = T>,
{
    // SAFETY: the scalar lane needs no instruction set.
    unsafe { Lane(x).exp().0 }
}

fn same<T: Real>(a: T, b: T) -> bool {
    a.to_f64().to_bits() == b.to_f64().to_bits() || (a.is_nan() && b.is_nan())
}

/// `exp_each::<K>` over `x` in groups of `K` vectors, lane for lane the one-lane exponential.
fn each_k<V: SimdVec, const K: usize>(x: &[V::Elem], what: &str)
where
    V::Elem: Real,
    Lane<V::Elem>: SimdVec<Elem = V::Elem>,
{
    let w = V::LANES;
    let mut got = x.to_vec();
    for c in (0..x.len() - x.len() % (K * w)).step_by(K * w) {
        // SAFETY: the caller checked the instruction set; `K·w` elements from `c` are in `x`.
        unsafe {
            let v: [V; K] = std::array::from_fn(|t| V::load(x[c + t * w..].as_ptr()));
            for (t, e) in V::exp_each(v).into_iter().enumerate() {
                e.store(got[c + t * w..].as_mut_ptr());
            }
        }
    }
    for (i, (&g, &a)) in got.iter().zip(x).enumerate() {
        if i < x.len() - x.len() % (K * w) {
            let want = lane_exp(a);
            assert!(
                same(g, want),
                "{what} K {K}: exp({a}) = {g}, one lane {want}"
            );
        }
    }
}

/// `exp_shift_strided` down a column of `n` vectors at stride `2·LANES` (the other vector of
/// each row untouched), and `exp_sub_sum_body` along rows of every length below `17·LANES`.
fn bodies<V: SimdVec>(x: &[V::Elem], what: &str)
where
    V::Elem: Real,
    Lane<V::Elem>: SimdVec<Elem = V::Elem>,
{
    let w = V::LANES;
    let shift: Vec<V::Elem> = (0..w)
        .map(|l| V::Elem::from_f64(0.37 * l as f64 - 1.0))
        .collect();
    for n in (0..20).chain([50, 64]) {
        let mut col = x[..2 * w * n].to_vec();
        let mut sum = vec![V::Elem::ZERO; w];
        // SAFETY: the caller checked the instruction set; `n` vectors at stride 2w are in `col`.
        unsafe {
            let s = V::load(shift.as_ptr());
            exp_shift_strided::<V>(col.as_mut_ptr(), 2 * w, n, s).store(sum.as_mut_ptr());
        }
        let mut want_sum = vec![V::Elem::ZERO; w];
        for j in 0..n {
            for l in 0..w {
                let (at, skip) = (j * 2 * w + l, j * 2 * w + w + l);
                let e = lane_exp(x[at] - shift[l]);
                assert!(same(col[at], e), "{what} strided n {n} ({j}, {l})");
                assert!(
                    same(col[skip], x[skip]),
                    "{what} strided wrote ({j}, {})",
                    w + l
                );
                want_sum[l] += e;
            }
        }
        for l in 0..w {
            assert!(
                same(sum[l], want_sum[l]),
                "{what} strided n {n} sum lane {l}"
            );
        }
    }
    let m = V::Elem::from_f64(0.75);
    for (n, off) in (0..17 * w).flat_map(|n| [(n, 0), (n, 3 * w + 1), (n, x.len() - n)]) {
        let x = &x[off..off + n];
        let mut row = x.to_vec();
        // SAFETY: the caller checked the instruction set; `row` holds `n` elements.
        let got = unsafe { exp_sub_sum_body::<V>(row.as_mut_ptr(), n, m) };
        // The one-vector loop: whole vectors into two sums alternately, their lane sums (in
        // the type's fixed order), then the tail element by element.
        let mut s = [vec![V::Elem::ZERO; w], vec![V::Elem::ZERO; w]];
        for (i, (&g, &a)) in row.iter().zip(x).enumerate() {
            let e = lane_exp(a - m);
            assert!(same(g, e), "{what} exp_sub_sum n {n} element {i}");
            if i < n - n % w {
                s[(i / w) % 2][i % w] += e;
            }
        }
        // SAFETY: as above; `s[0]`, `s[1]` hold `w` elements.
        let mut want = unsafe {
            V::load(s[0].as_ptr())
                .add(V::load(s[1].as_ptr()))
                .reduce_sum()
        };
        for &e in &row[n - n % w..] {
            want += e;
        }
        assert!(
            same(got, want),
            "{what} exp_sub_sum n {n} at {off}: {got}, one at a time {want}"
        );
    }
}

fn side_by_side<V: SimdVec>(isa: Isa, lo: f64, hi: f64)
where
    V::Elem: Real,
    Lane<V::Elem>: SimdVec<Elem = V::Elem>,
{
    if !isa.is_supported() {
        return;
    }
    let what = format!("{} {}", isa.name(), V::Elem::NAME);
    let x: Vec<V::Elem> = sweep(lo, hi, 6 * V::LANES * 4001);
    each_k::<V, 1>(&x, &what);
    each_k::<V, 2>(&x, &what);
    each_k::<V, 4>(&x, &what);
    each_k::<V, 6>(&x, &what);
    // Scores near their row's maximum, and far below it.
    bodies::<V>(&sweep(-3.0, 2.0, 2 * V::LANES * 64), &what);
    bodies::<V>(&sweep(-30.0, 2.0, 2 * V::LANES * 64), &what);
    bodies::<V>(&sweep(lo, hi, 2 * V::LANES * 64), &what);
}

#[test]
fn exp_side_by_side_is_exp_one_at_a_time_bitwise() {
    side_by_side::<Lane<f32>>(Isa::Scalar, -112.0, 90.0);
    side_by_side::<Lane<f64>>(Isa::Scalar, -762.0, 712.0);
    #[cfg(target_arch = "x86_64")]
    {
        side_by_side::<Avx2F32>(Isa::Avx2, -112.0, 90.0);
        side_by_side::<Avx2F64>(Isa::Avx2, -762.0, 712.0);
        side_by_side::<Avx512F32>(Isa::Avx512, -112.0, 90.0);
        side_by_side::<Avx512F64>(Isa::Avx512, -762.0, 712.0);
    }
}

/// The lower clamp `EXP_LO` (see [`SimdElem::EXP_LO`]): its `n = round(EXP_LO·log₂e)` splits
/// into two halves whose biased exponents are 0, so both scaling factors are +0 and `exp` of
/// `EXP_LO` and of −∞ is a product with zero; and every argument from the smallest one with a
/// zero result down to −∞ gives +0 on the scalar path and every vector type.
fn exp_lo<T: SimdElem>(bias: i64)
where
    Lane<T>: SimdVec<Elem = T>,
{
    let n = (T::EXP_LO.to_f64() * T::LOG2E.to_f64()).round() as i64;
    let n1 = n.div_euclid(2);
    assert_eq!((n1 + bias, n - n1 + bias), (0, 0), "{}: n = {n}", T::NAME);
    // SAFETY: the scalar lane needs no instruction set.
    let zero = unsafe {
        Lane(T::from_f64(n as f64))
            .mul(Lane(T::HALF))
            .floor()
            .pow2i()
            .0
    };
    assert_eq!(zero.to_f64().to_bits(), 0.0f64.to_bits(), "{}", T::NAME);
    // Below half the smallest subnormal: the true exponential of these rounds to +0.
    let first_zero = (T::MIN_POSITIVE.to_f64() * T::EPSILON.to_f64() / 2.0).ln();
    let mut x: Vec<T> = (0..4000)
        .map(|i| T::from_f64(first_zero - 0.5 - i as f64 * (1.1 * -T::EXP_LO.to_f64() / 4000.0)))
        .chain([T::EXP_LO, T::NEG_INFINITY, T::from_f64(-1e30)])
        .collect();
    // Whole vectors of every width (at most 16 lanes).
    x.resize(x.len().div_ceil(16) * 16, T::NEG_INFINITY);
    let mut isas = vec![Isa::Scalar];
    #[cfg(target_arch = "x86_64")]
    isas.extend([Isa::Avx2, Isa::Avx512]);
    for isa in isas.into_iter().filter(|i| i.is_supported()) {
        let mut got = x.clone();
        // SAFETY: the instruction set is supported; the body reads and writes `got`.
        unsafe { exp_slice::<T>(isa, &mut got) };
        for (a, g) in x.iter().zip(&got) {
            assert!(
                g.to_f64().to_bits() == 0.0f64.to_bits(),
                "{} {}: exp({a}) = {g}",
                isa.name(),
                T::NAME
            );
        }
    }
}

/// `exp` of every element in place with `isa`'s vectors.
///
/// # Safety
/// `isa` must be supported, and `x.len()` a multiple of its lanes.
unsafe fn exp_slice<T: SimdElem>(isa: Isa, x: &mut [T])
where
    Lane<T>: SimdVec<Elem = T>,
{
    /// # Safety
    /// `V`'s instruction set must be supported and `x.len()` a multiple of its lanes.
    unsafe fn run<V: SimdVec>(x: &mut [V::Elem]) {
        // SAFETY: the caller guarantees the instruction set, and every vector from `c` is
        // inside `x` (its length a multiple of the lanes).
        unsafe {
            for c in (0..x.len()).step_by(V::LANES) {
                V::load(x[c..].as_ptr()).exp().store(x[c..].as_mut_ptr());
            }
        }
    }
    // SAFETY: the caller guarantees `isa` is supported (each arm runs its vector type) and
    // that `x.len()` is a multiple of its lanes.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => run::<T::Avx2>(x),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => run::<T::Avx512>(x),
            _ => run::<T::One>(x),
        }
    }
}

#[test]
fn exp_lo_scales_by_exact_zeros() {
    exp_lo::<f32>(127);
    exp_lo::<f64>(1023);
}
