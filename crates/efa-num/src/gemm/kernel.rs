//! The register tile: `MR × NR` accumulators, `NR = NV·W` (NV vectors of W lanes), updated by
//! one broadcast of `A` per row and one load of `B` per vector at each step of `k`, then
//! written to `C` as `C ← α·acc + β·C` (β = 0: `C` is not read).
//!
//! The bodies are `#[inline(always)]` and generic over [`Lanes`], so they compile to AVX-512,
//! AVX2 + FMA or plain code inside the `#[target_feature]` wrappers of `super::driver`.
//! Each element's sum over `k` runs in index order in one accumulator lane, independent of
//! which tile, path or thread computes it; so is the update formula (full tiles in vectors,
//! edge tiles element by element through [`Lanes::madd1`], which rounds the same way).

use crate::mat::MatMut;
use crate::simd::{SimdElem, SimdVec};
use crate::Real;

/// Most elements of any tile (12 × 32 for AVX-512 f32), the size of the edge scratch tile.
pub(super) const MAX_TILE: usize = 12 * 32;

/// A register of `W` lanes for the tile, fused (FMA) or unfused (scalar path).
///
/// # Safety
/// Methods may only be called where the register type's instruction set is available;
/// pointers must be valid for `W` elements.
pub(super) unsafe trait Lanes: Copy {
    /// Element type.
    type E: SimdElem;
    /// Lanes per register.
    const W: usize;
    /// All lanes `x`.
    unsafe fn splat(x: Self::E) -> Self;
    /// Unaligned load.
    unsafe fn load(p: *const Self::E) -> Self;
    /// Unaligned store.
    unsafe fn store(self, p: *mut Self::E);
    /// `self·b + c` (one rounding in the fused registers, two in the scalar path).
    unsafe fn madd(self, b: Self, c: Self) -> Self;
    /// `self·b`.
    unsafe fn mul(self, b: Self) -> Self;
    /// `self + b`.
    unsafe fn add(self, b: Self) -> Self;
    /// One term `self·b` of a compensated sum `(s, e)`: [`SimdVec::dot2_step`] (for
    /// [`Unfused`], that of the scalar lane, whose `mul_add` is exact on every target).
    unsafe fn dot2_step(self, b: Self, s: &mut Self, e: &mut Self);
    /// The scalar `a·b + c`, rounded exactly as [`Lanes::madd`] rounds each lane.
    fn madd1(a: Self::E, b: Self::E, c: Self::E) -> Self::E;
}

/// A SIMD register used with fused multiply-add.
#[derive(Clone, Copy)]
pub(super) struct Fused<V>(V);

// SAFETY: forwards to `SimdVec`, whose methods carry the same contract.
unsafe impl<V: SimdVec> Lanes for Fused<V> {
    type E = V::Elem;
    const W: usize = V::LANES;
    #[inline(always)]
    unsafe fn splat(x: Self::E) -> Self {
        // SAFETY: forwarded contract.
        Fused(unsafe { V::splat(x) })
    }
    #[inline(always)]
    unsafe fn load(p: *const Self::E) -> Self {
        // SAFETY: forwarded contract.
        Fused(unsafe { V::load(p) })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut Self::E) {
        // SAFETY: forwarded contract.
        unsafe { self.0.store(p) }
    }
    #[inline(always)]
    unsafe fn madd(self, b: Self, c: Self) -> Self {
        // SAFETY: forwarded contract.
        Fused(unsafe { self.0.fma(b.0, c.0) })
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        // SAFETY: forwarded contract.
        Fused(unsafe { self.0.mul(b.0) })
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        // SAFETY: forwarded contract.
        Fused(unsafe { self.0.add(b.0) })
    }
    #[inline(always)]
    unsafe fn dot2_step(self, b: Self, s: &mut Self, e: &mut Self) {
        // SAFETY: forwarded contract.
        unsafe { self.0.dot2_step(b.0, &mut s.0, &mut e.0) }
    }
    #[inline(always)]
    fn madd1(a: Self::E, b: Self::E, c: Self::E) -> Self::E {
        a.mul_add(b, c)
    }
}

/// One scalar with separate multiply and add: the portable path (a software `fma` call per
/// step would be many times slower on CPUs without the instruction).
#[derive(Clone, Copy)]
pub(super) struct Unfused<E>(E);

// SAFETY: plain scalar arithmetic; pointers valid for one element by the trait contract.
unsafe impl<E: SimdElem> Lanes for Unfused<E> {
    type E = E;
    const W: usize = 1;
    #[inline(always)]
    unsafe fn splat(x: E) -> Self {
        Unfused(x)
    }
    #[inline(always)]
    unsafe fn load(p: *const E) -> Self {
        // SAFETY: `p` is valid for one element (trait contract).
        Unfused(unsafe { *p })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut E) {
        // SAFETY: `p` is valid for one element (trait contract).
        unsafe { *p = self.0 }
    }
    #[inline(always)]
    unsafe fn madd(self, b: Self, c: Self) -> Self {
        Unfused(self.0 * b.0 + c.0)
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        Unfused(self.0 * b.0)
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        Unfused(self.0 + b.0)
    }
    #[inline(always)]
    unsafe fn dot2_step(self, b: Self, s: &mut Self, e: &mut Self) {
        // SAFETY: the scalar lane (`E::One`) needs no instruction set; the stores write one
        // element each into `s` and `e`.
        unsafe {
            let one = |x: E| <E::One as SimdVec>::splat(x);
            let (mut ls, mut le) = (one(s.0), one(e.0));
            one(self.0).dot2_step(one(b.0), &mut ls, &mut le);
            ls.store(&mut s.0);
            le.store(&mut e.0);
        }
    }
    #[inline(always)]
    fn madd1(a: E, b: E, c: E) -> E {
        a * b + c
    }
}

/// `acc[i][v] = Σ_{p<kc} A[i, p]·B[p, v·W .. v·W + W]` (p in index order), where `A[i, p]` is
/// `a[i·ars + p·acs]` and `B` is a packed panel: row `p` is `NR = NV·W` consecutive elements
/// at `b[p·NR]`.
///
/// # Safety
/// `a` valid at every `i·ars + p·acs` (`i < MR`, `p < kc`), `b` for `kc·NR` elements; the
/// instruction set of `L` available.
#[inline(always)]
pub(super) unsafe fn tile<L: Lanes, const MR: usize, const NV: usize>(
    kc: usize,
    a: *const L::E,
    ars: isize,
    acs: isize,
    b: *const L::E,
) -> [[L; NV]; MR] {
    // SAFETY: every pointer formed below stays within the ranges of the contract.
    unsafe {
        let nr = NV * L::W;
        let zero = L::splat(L::E::ZERO);
        let mut acc = [[zero; NV]; MR];
        let (mut ap, mut bp) = (a, b);
        for _ in 0..kc {
            let mut bv = [zero; NV];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = L::load(bp.add(v * L::W));
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let av = L::splat(*ap.offset(i as isize * ars));
                for (x, &bj) in row.iter_mut().zip(&bv) {
                    *x = av.madd(bj, *x);
                }
            }
            ap = ap.offset(acs);
            bp = bp.add(nr);
        }
        acc
    }
}

/// [`tile`] with each element's sum compensated (the f64 products, `docs/design.md §3c`):
/// every term through [`Lanes::dot2_step`] (an error-free product and sum, the errors gathered
/// in a second accumulator), and the tile returns `s + e`, rounded once: the sum as if formed
/// in about twice the precision, then rounded (Ogita, Rump and Oishi's `Dot2`), with error at
/// most `u·|Σ| + γ_k²·Σ|A·B|` instead of the plain sum's `γ_k·Σ|A·B|`. About ten operations
/// per term instead of one fused multiply-add; still in index order in one lane per element,
/// so every tile, path and thread gives the same bits.
///
/// # Safety
/// As [`tile`].
#[inline(always)]
pub(super) unsafe fn tile_compensated<L: Lanes, const MR: usize, const NV: usize>(
    kc: usize,
    a: *const L::E,
    ars: isize,
    acs: isize,
    b: *const L::E,
) -> [[L; NV]; MR] {
    // SAFETY: every pointer formed below stays within the ranges of the contract.
    unsafe {
        let nr = NV * L::W;
        let zero = L::splat(L::E::ZERO);
        let mut sum = [[zero; NV]; MR];
        let mut err = [[zero; NV]; MR];
        let (mut ap, mut bp) = (a, b);
        for _ in 0..kc {
            let mut bv = [zero; NV];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = L::load(bp.add(v * L::W));
            }
            for (i, (srow, erow)) in sum.iter_mut().zip(err.iter_mut()).enumerate() {
                let av = L::splat(*ap.offset(i as isize * ars));
                for ((s, e), &bj) in srow.iter_mut().zip(erow.iter_mut()).zip(&bv) {
                    av.dot2_step(bj, s, e);
                }
            }
            ap = ap.offset(acs);
            bp = bp.add(nr);
        }
        for (srow, erow) in sum.iter_mut().zip(&err) {
            for (s, &e) in srow.iter_mut().zip(erow) {
                *s = s.add(e);
            }
        }
        sum
    }
}

/// Writes a tile into the `mr × nr` view `c` (`mr ≤ MR`, `nr ≤ NV·W`):
/// `C[i, j] ← α·acc[i, j] + β·C[i, j]` (computed as `fma(α, acc, β·C)`; β = 0 gives `α·acc`
/// without reading `C`). Full tiles with unit column stride go through vectors; the rest
/// through a scratch tile and [`Lanes::madd1`], with the same rounding.
///
/// # Safety
/// The instruction set of `L` available.
#[inline(always)]
pub(super) unsafe fn store<L: Lanes, const MR: usize, const NV: usize>(
    acc: &[[L; NV]; MR],
    mut c: MatMut<'_, L::E>,
    alpha: L::E,
    beta: L::E,
) {
    let (mr, nr, rsc, csc) = (c.rows(), c.cols(), c.rs(), c.cs());
    debug_assert!(mr <= MR && nr <= NV * L::W);
    let c = c.as_mut_ptr();
    let w = L::W;
    let full = NV * w;
    // SAFETY: every address written or read below is a `C[i, j]` with `i < mr`, `j < nr`
    // (inside the view), or inside the local scratch tile of `MR·NV·W ≤ MAX_TILE` elements.
    unsafe {
        // Opaque to the optimiser, so these splats are formed here and not hoisted out of the
        // tile loops, where they would hold two registers across the k loop (with 16 AVX2
        // registers that spills an accumulator).
        let (alpha, beta) = std::hint::black_box((alpha, beta));
        let va = L::splat(alpha);
        if mr == MR && nr == full && csc == 1 {
            let vb = L::splat(beta);
            for (i, row) in acc.iter().enumerate() {
                let ci = c.offset(i as isize * rsc);
                for (v, x) in row.iter().enumerate() {
                    let p = ci.add(v * w);
                    let y = if beta == L::E::ZERO {
                        va.mul(*x)
                    } else if beta == L::E::ONE {
                        va.madd(*x, L::load(p))
                    } else {
                        va.madd(*x, vb.mul(L::load(p)))
                    };
                    y.store(p);
                }
            }
            return;
        }
        let mut t = [L::E::ZERO; MAX_TILE];
        for (i, row) in acc.iter().enumerate() {
            for (v, x) in row.iter().enumerate() {
                x.store(t.as_mut_ptr().add(i * full + v * w));
            }
        }
        for i in 0..mr {
            let ci = c.offset(i as isize * rsc);
            for j in 0..nr {
                let p = ci.offset(j as isize * csc);
                let x = t[i * full + j];
                *p = if beta == L::E::ZERO {
                    alpha * x
                } else {
                    L::madd1(alpha, x, beta * *p)
                };
            }
        }
    }
}

/// `C ← β·C` over `m × n` (β = 0 writes zeros without reading): the whole product when
/// `k = 0` or `α = 0`.
///
/// # Safety
/// `c` valid at every `i·rsc + j·csc`, `i < m`, `j < n`.
pub(super) unsafe fn scale<E: Real>(
    m: usize,
    n: usize,
    beta: E,
    c: *mut E,
    rsc: isize,
    csc: isize,
) {
    for i in 0..m {
        for j in 0..n {
            // SAFETY: (i, j) is inside the m × n matrix of the contract.
            unsafe {
                let p = c.offset(i as isize * rsc + j as isize * csc);
                *p = if beta == E::ZERO { E::ZERO } else { beta * *p };
            }
        }
    }
}
