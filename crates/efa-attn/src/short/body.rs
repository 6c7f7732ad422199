//! The vector bodies of the lane-batched path: every buffer holds [`GROUP`] heads side by
//! side (element `(r, c)` of head `g` of an `R × C` matrix at `(r·C + c)·GROUP + g`), so each
//! arithmetic step runs on whole vectors of heads. Each body repeats, head by head, the
//! operations of the tile kernel in the same order (see the parent module), with the
//! accumulators in registers instead of the tile scratch.

use super::GROUP;
use efa_num::simd::SimdVec;
use efa_num::{simd_variants, Real};

/// Sizes of one group: `nq` query rows, `c` visible keys (every row sees keys `0..c`), head
/// widths `d` (queries, keys) and `dv` (values).
#[derive(Clone, Copy)]
pub(super) struct Dims {
    pub nq: usize,
    pub c: usize,
    pub d: usize,
    pub dv: usize,
}

/// A lane-major operand: element `(a, b)` of every head at `ptr + (a·sa + b·sb)·GROUP`.
#[derive(Clone, Copy)]
struct Op<T> {
    ptr: *const T,
    sa: usize,
    sb: usize,
}

/// The operand at `ptr` with strides `sa`, `sb` (in elements of one head).
#[inline(always)]
fn op<T>(ptr: *const T, sa: usize, sb: usize) -> Op<T> {
    Op { ptr, sa, sb }
}

impl<T> Op<T> {
    #[inline(always)]
    unsafe fn at(self, a: usize, b: usize, u: usize) -> *const T {
        unsafe { self.ptr.add((a * self.sa + b * self.sb) * GROUP + u) }
    }
}

/// `N` output columns `b0 .. b0 + N` of row `a`: `out(a, b) = Σ_k x(a, k)·y(k, b)`, one fused
/// multiply-add chain per element from zero in `k` order, kept in registers.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn chain_block<V: SimdVec, const N: usize>(
    nk: usize,
    a: usize,
    b0: usize,
    x: Op<V::Elem>,
    y: Op<V::Elem>,
    out: Op<V::Elem>,
    u: usize,
) {
    unsafe {
        let mut acc = [V::splat(V::Elem::ZERO); N];
        for k in 0..nk {
            let xv = V::load(x.at(a, k, u));
            for (t, s) in acc.iter_mut().enumerate() {
                *s = xv.fma(V::load(y.at(k, b0 + t, u)), *s);
            }
        }
        for (t, s) in acc.iter().enumerate() {
            s.store(out.at(a, b0 + t, u).cast_mut());
        }
    }
}

/// `out(a, b) = Σ_{k < nk} x(a, k)·y(k, b)` for `a < na`, `b < nb` (chains as in
/// [`chain_block`]), on the lanes at offset `u`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn product<V: SimdVec>(
    na: usize,
    nb: usize,
    nk: usize,
    x: Op<V::Elem>,
    y: Op<V::Elem>,
    out: Op<V::Elem>,
    u: usize,
) {
    unsafe {
        for a in 0..na {
            let mut b = 0;
            while b + 8 <= nb {
                chain_block::<V, 8>(nk, a, b, x, y, out, u);
                b += 8;
            }
            if b + 4 <= nb {
                chain_block::<V, 4>(nk, a, b, x, y, out, u);
                b += 4;
            }
            if b + 2 <= nb {
                chain_block::<V, 2>(nk, a, b, x, y, out, u);
                b += 2;
            }
            if b < nb {
                chain_block::<V, 1>(nk, a, b, x, y, out, u);
            }
        }
    }
}

/// `s = scale·Q·Kᵀ` (`nq × c`): the tile kernel's chains over the head width, then the scale
/// when it is not 1.
#[inline(always)]
unsafe fn scores<V: SimdVec>(
    x: Dims,
    u: usize,
    scale: V::Elem,
    qt: *const V::Elem,
    kt: *const V::Elem,
    s: *mut V::Elem,
) {
    unsafe {
        let q = op(qt, x.d, 1);
        let k = op(kt, 1, x.d);
        let so = op(s.cast_const(), x.c, 1);
        product::<V>(x.nq, x.c, x.d, q, k, so, u);
        if scale != V::Elem::ONE {
            let vs = V::splat(scale);
            for i in 0..x.nq * x.c {
                let o = s.add(i * GROUP + u);
                V::load(o).mul(vs).store(o);
            }
        }
    }
}

/// Forward of one group: scores, the online-softmax update from the empty state (running max
/// −∞, sum 0; `s` becomes `exp(s − m)`), and the unnormalised output `acc = P·V`; `m` and `l`
/// get the running max and sum per row. The caller divides by `l` and forms `lse`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn forward_body<V: SimdVec>(
    x: Dims,
    scale: V::Elem,
    qt: *const V::Elem,
    kt: *const V::Elem,
    vt: *const V::Elem,
    s: *mut V::Elem,
    acc: *mut V::Elem,
    m: *mut V::Elem,
    l: *mut V::Elem,
) {
    unsafe {
        let zero = V::splat(V::Elem::ZERO);
        let ninf = V::splat(V::Elem::NEG_INFINITY);
        let lowest = V::splat(-V::Elem::MAX);
        for u in (0..GROUP).step_by(V::LANES) {
            scores::<V>(x, u, scale, qt, kt, s);
            for i in 0..x.nq {
                let row = s.add(i * x.c * GROUP + u);
                let mut mt = ninf;
                for j in 0..x.c {
                    mt = V::load(row.add(j * GROUP)).max(mt);
                }
                let m_new = mt.max(ninf);
                let shift = m_new.max(lowest);
                let alpha = ninf.sub(shift).exp();
                let mut sum = zero;
                for j in 0..x.c {
                    let o = row.add(j * GROUP);
                    let e = V::load(o).sub(shift).exp();
                    e.store(o);
                    sum = sum.add(e);
                }
                zero.fma(alpha, sum).store(l.add(i * GROUP + u));
                m_new.store(m.add(i * GROUP + u));
            }
            let p = op(s.cast_const(), x.c, 1);
            let v = op(vt, x.dv, 1);
            let o = op(acc.cast_const(), x.dv, 1);
            product::<V>(x.nq, x.dv, x.c, p, v, o, u);
        }
    }
}
simd_variants!(pub(super) forward_body, forward_d, (x: Dims, scale: E, qt: *const E, kt: *const E,
    vt: *const E, s: *mut E, acc: *mut E, m: *mut E, l: *mut E) -> ());

/// Backward, first half: `P = exp(s − lse)` per row (the caller zeroes the rows whose `lse` is
/// −∞, as the tile kernel does).
#[inline(always)]
unsafe fn probs_body<V: SimdVec>(
    x: Dims,
    scale: V::Elem,
    qt: *const V::Elem,
    kt: *const V::Elem,
    lse: *const V::Elem,
    p: *mut V::Elem,
) {
    unsafe {
        for u in (0..GROUP).step_by(V::LANES) {
            scores::<V>(x, u, scale, qt, kt, p);
            for i in 0..x.nq {
                let vl = V::load(lse.add(i * GROUP + u));
                for j in 0..x.c {
                    let o = p.add((i * x.c + j) * GROUP + u);
                    V::load(o).sub(vl).exp().store(o);
                }
            }
        }
    }
}
simd_variants!(pub(super) probs_body, probs_d, (x: Dims, scale: E, qt: *const E, kt: *const E,
    lse: *const E, p: *mut E) -> ());

/// Backward, second half, from the probabilities `p`: `dV = Pᵀ·dO` (chains over query rows in
/// order), `dP = dO·Vᵀ`, `dS = P ∘ (dP − D)`, `dQ = dS·K` (chains over keys), `dK = dSᵀ·Q`
/// (chains over query rows), each from zero; the caller applies the scale to `dQ` and `dK`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn grads_body<V: SimdVec>(
    x: Dims,
    qt: *const V::Elem,
    kt: *const V::Elem,
    vt: *const V::Elem,
    dot: *const V::Elem,
    dd: *const V::Elem,
    p: *const V::Elem,
    ds: *mut V::Elem,
    g: [*mut V::Elem; 3],
) {
    unsafe {
        let [dq, dk, dvv] = g;
        let (nq, c, d, dv) = (x.nq, x.c, x.d, x.dv);
        for u in (0..GROUP).step_by(V::LANES) {
            let pt = op(p, 1, c);
            let dor = op(dot, dv, 1);
            let out = op(dvv.cast_const(), dv, 1);
            product::<V>(c, dv, nq, pt, dor, out, u);
            let vcol = op(vt, 1, dv);
            let dso = op(ds.cast_const(), c, 1);
            product::<V>(nq, c, dv, dor, vcol, dso, u);
            for i in 0..nq {
                let vd = V::load(dd.add(i * GROUP + u));
                for j in 0..c {
                    let o = ds.add((i * c + j) * GROUP + u);
                    let pv = V::load(p.add((i * c + j) * GROUP + u));
                    pv.mul(V::load(o).sub(vd)).store(o);
                }
            }
            let krow = op(kt, d, 1);
            let out = op(dq.cast_const(), d, 1);
            product::<V>(nq, d, c, dso, krow, out, u);
            let dst = op(ds.cast_const(), 1, c);
            let qrow = op(qt, d, 1);
            let out = op(dk.cast_const(), d, 1);
            product::<V>(c, d, nq, dst, qrow, out, u);
        }
    }
}
simd_variants!(pub(super) grads_body, grads_d, (x: Dims, qt: *const E, kt: *const E, vt: *const E,
    dot: *const E, dd: *const E, p: *const E, ds: *mut E, g: [*mut E; 3]) -> ());
