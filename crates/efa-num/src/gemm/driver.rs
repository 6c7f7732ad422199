//! The blocked loop nest around the register tile, one `#[inline(always)]` body instantiated
//! per instruction set in `#[target_feature]` wrappers ([`run`]).
//!
//! Loop order (row-major view: vectors run along the columns of `C`, broadcasts along its rows):
//!
//! ```text
//! for ic in blocks of MC rows of A and C          (A block: L3)
//!   for pc in blocks of KC of the inner dimension
//!     pack A[ic.., pc..] into MR-row panels        (skipped on the direct path)
//!     for jc in blocks of NC columns of B and C
//!       pack B[pc.., jc..] into NR-column panels   (B block: L2)
//!       for ir in MR-row strips                    (A panel MR×KC: L1, reused across jr)
//!         for jr in NR-column panels               (B panel KC×NR streamed from L2)
//!           tile, then C ← α·acc + β·C (β only on the first KC block, then 1)
//! ```
//!
//! The direct path reads `A` through its own strides instead of packing it: for the models'
//! shapes (thousands of rows, k and n of 16–128) packing `A` is a copy as long as the product
//! itself. Both paths split `k` into the same blocks and run the same tile, so they give
//! bitwise-equal results.

use super::kernel::{scale, store, tile, tile_compensated, Fused, Lanes, Unfused};
use super::pack::{pack_a, pack_b, with_bufs, Buf};
use super::Path;
use crate::mat::{MatMut, MatRef};
use crate::simd::{Isa, SimdElem, SimdVec};
use crate::sum::compensated;
use crate::Real;

/// Rows of `A`/`C` per block. The A block (`MC × KC`) is re-read from L3 once per NC block
/// of columns; 960 rows × 384 f32 (1.5 MB) fits a core's share of L3 on current server parts
/// (≥ 1.875 MB per core) and bounds the packing buffer. A multiple of every MR (12, 6, 4).
pub const MC: usize = 960;

/// Bytes of one row of the A panel: `KC = KC_BYTES / size_of(element)`, 384 f32 or 192 f64.
/// The A panel (`MR × KC`, 12 × 384 × 4 = 18 KB) stays in L1 (32 KB on Zen 4, 48 KB on
/// Sapphire Rapids) while B panels stream past it; C is read and written once per KC block,
/// so KC·MR·NR FMAs amortise one tile of loads and stores.
pub const KC_BYTES: usize = 1536;

/// Columns of `B`/`C` per block. The packed B block (`KC × NC` = 384 × 320 f32 or 192 × 320
/// f64 = 480 KB) stays in L2 (1 MB on Zen 4, 2 MB on Sapphire Rapids) while every A panel of
/// the block passes over it. A multiple of every NR (32, 16, 8, 4).
pub const NC: usize = 320;

/// One product `C ← α·A·B + β·C`: `A[i, p] = a[i·rsa + p·csa]` (m × k),
/// `B[p, j] = b[p·rsb + j·csb]` (k × n), `C[i, j] = c[i·rsc + j·csc]` (m × n).
#[derive(Clone, Copy)]
pub(super) struct Problem<E> {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub alpha: E,
    pub a: *const E,
    pub rsa: isize,
    pub csa: isize,
    pub b: *const E,
    pub rsb: isize,
    pub csb: isize,
    pub beta: E,
    pub c: *mut E,
    pub rsc: isize,
    pub csc: isize,
}

// SAFETY: a `Problem` is only shared between tasks that write disjoint parts of `C` (see
// `super::gemm_par_with`); `A` and `B` are only read.
unsafe impl<E: Send> Send for Problem<E> {}
// SAFETY: as above.
unsafe impl<E: Sync> Sync for Problem<E> {}

impl<E: Real> Problem<E> {
    /// The product of the views (shapes already checked to agree), its pointers valid while
    /// the views' borrows last.
    #[inline(always)]
    pub fn new(
        alpha: E,
        a: MatRef<'_, E>,
        b: MatRef<'_, E>,
        beta: E,
        mut c: MatMut<'_, E>,
    ) -> Self {
        Problem {
            m: a.rows(),
            k: a.cols(),
            n: b.cols(),
            alpha,
            a: a.as_ptr(),
            rsa: a.rs(),
            csa: a.cs(),
            b: b.as_ptr(),
            rsb: b.rs(),
            csb: b.cs(),
            beta,
            c: c.as_mut_ptr(),
            rsc: c.rs(),
            csc: c.cs(),
        }
    }

    /// Rows `r0 .. r0 + rows` of `A` and `C`.
    pub fn rows(self, r0: usize, rows: usize) -> Self {
        Problem {
            m: rows,
            a: self.a.wrapping_offset(r0 as isize * self.rsa),
            c: self.c.wrapping_offset(r0 as isize * self.rsc),
            ..self
        }
    }

    /// Columns `c0 .. c0 + cols` of `B` and `C`.
    pub fn cols(self, c0: usize, cols: usize) -> Self {
        Problem {
            n: cols,
            b: self.b.wrapping_offset(c0 as isize * self.csb),
            c: self.c.wrapping_offset(c0 as isize * self.csc),
            ..self
        }
    }
}

/// `len` cut into ⌈len/max⌉ near-equal blocks, each rounded up to a multiple of `unit`
/// (no thin last block). Depends only on its arguments.
fn block(len: usize, max: usize, unit: usize) -> usize {
    let parts = len.div_ceil(max).max(1);
    len.div_ceil(parts).div_ceil(unit) * unit
}

/// The KC block of inner dimension `k`: ⌈k/KC⌉ near-equal blocks. A function of `k` and the
/// element type only, so every path, tile and thread split sums each element's products in
/// the same blocks.
pub(super) fn k_block<E>(k: usize) -> usize {
    block(k, KC_BYTES / std::mem::size_of::<E>(), 1)
}

/// Register tile `(MR, NR)` of a variant for element `E`. The compensated tile keeps two
/// accumulators per element and five temporaries per term, so it has fewer rows: 4 × 2
/// vectors (16 of 32 zmm) on AVX-512, 2 × 2 (8 of 16 ymm) on AVX2.
pub(super) fn tile_dims<E: SimdElem>(isa: Isa) -> (usize, usize) {
    let comp = compensated::<E>();
    match isa {
        Isa::Avx512 => (if comp { 4 } else { 12 }, 2 * <E::Avx512 as SimdVec>::LANES),
        Isa::Avx2 => (if comp { 2 } else { 6 }, 2 * <E::Avx2 as SimdVec>::LANES),
        Isa::Scalar => (4, 4),
    }
}

/// Bytes of the packed A block and of the packed B block when `k` is not split (the
/// compensated products): the plain products' block sizes (960 × 192 and 192 × 320 f64).
const A_BLOCK_BYTES: usize = MC * KC_BYTES;
const B_BLOCK_BYTES: usize = NC * KC_BYTES;

/// Largest multiple of `unit` (at least `unit`) with `that · k · size ≤ bytes`.
fn fit(bytes: usize, k: usize, size: usize, unit: usize) -> usize {
    (bytes / (k.max(1) * size) / unit).max(1) * unit
}

/// Whether [`Path::Auto`] reads `A` in place: when an `MR`-row strip of `A` is compact, so
/// that reading it through its strides costs no more than reading a packed panel:
/// - rows contiguous (`csa = 1`) and closer than 4 KB apart (`|rsa|` elements of `size`
///   bytes): a strip of 12 rows spans under 48 KB and its rows do not all fall into one L1
///   set (rows exactly 4 KB or a multiple apart would, and the pages multiply);
/// - columns contiguous (`rsa = 1`, a transposed `A`) and at most 512 bytes apart: a KC-step
///   strip spans ≤ 48 pages and every line read is a neighbour of the last.
///
/// Measured on Zen 4 (one thread, AVX-512, best of 7 interleaved runs on a shared machine):
/// direct over packed on the models' shapes 44×32×32 +48 %, 128×32×64 +36 %, 5632×32×96
/// +22 %, 5632×96×32 with `Bᵀ` +83 %, 16896×64×64 +46 %; on `dW = xᵀ·dy` (transposed `A`)
/// 32×5632×96 +14 %, 64×16896×64 +24 %. For 2048³ (`lda` = 8 KB) the two were within the
/// machine's noise; it packs, as large leading dimensions favour.
pub(super) fn auto_direct(rsa: isize, csa: isize, size: usize) -> bool {
    let bytes = |s: isize| s.unsigned_abs().saturating_mul(size);
    (csa == 1 && bytes(rsa) < 4096) || (rsa == 1 && bytes(csa) <= 512)
}

/// The whole product for register type `L` and tile `MR × NV·W` (`T1`, `T2`: the smaller
/// row counts of the last strip's tiles, see [`macro_tile`]).
///
/// # Safety
/// The pointers with their strides address valid storage of the stated shapes, `C` not
/// overlapping `A` or `B`; the instruction set of `L` available.
/// With `COMP` the tile is [`tile_compensated`] and `k` is one block (a fold into `C` between
/// blocks would round the compensated sum); the A and B blocks then shrink with `k` to the
/// plain blocks' bytes.
#[inline(always)]
unsafe fn driver<
    L: Lanes,
    const MR: usize,
    const NV: usize,
    const T1: usize,
    const T2: usize,
    const COMP: bool,
>(
    direct: bool,
    p: Problem<L::E>,
    abuf: &mut Buf,
    bbuf: &mut Buf,
) {
    let (m, k, n) = (p.m, p.k, p.n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 || p.alpha == L::E::ZERO {
        // SAFETY: C is m × n at (rsc, csc) by the contract.
        unsafe { scale(m, n, p.beta, p.c, p.rsc, p.csc) };
        return;
    }
    let nr = NV * L::W;
    let size = std::mem::size_of::<L::E>();
    let (mcb, kcb, ncb) = if COMP {
        let (mc, nc) = (
            fit(A_BLOCK_BYTES, k, size, MR),
            fit(B_BLOCK_BYTES, k, size, nr),
        );
        (block(m, mc, MR), k, block(n, nc, nr))
    } else {
        (block(m, MC, MR), k_block::<L::E>(k), block(n, NC, nr))
    };
    {
        let ap = abuf.get::<L::E>(if direct { MR } else { mcb } * kcb);
        let bp = bbuf.get::<L::E>(ncb.div_ceil(nr) * nr * kcb);
        let mut ic = 0;
        while ic < m {
            let mc = mcb.min(m - ic);
            let mut pc = 0;
            while pc < k {
                let kc = kcb.min(k - pc);
                let beta = if pc == 0 { p.beta } else { L::E::ONE };
                let a0 =
                    p.a.wrapping_offset(ic as isize * p.rsa + pc as isize * p.csa);
                // SAFETY: the A block (ic.., pc..) of mc × kc lies inside A; the buffer holds
                // ⌈mc/MR⌉·MR·kc elements (packed path) or MR·kc (direct path: only the last,
                // partial strip is packed).
                unsafe {
                    if !direct {
                        pack_a::<L::E, MR>(mc, kc, a0, p.rsa, p.csa, ap);
                    } else if mc % MR != 0 {
                        let r = mc - mc % MR;
                        pack_a::<L::E, MR>(
                            mc - r,
                            kc,
                            a0.offset(r as isize * p.rsa),
                            p.rsa,
                            p.csa,
                            ap,
                        );
                    }
                }
                let mut jc = 0;
                while jc < n {
                    let nc = ncb.min(n - jc);
                    let b0 =
                        p.b.wrapping_offset(pc as isize * p.rsb + jc as isize * p.csb);
                    // SAFETY: the B block (pc.., jc..) of kc × nc lies inside B; the buffer
                    // holds ⌈ncb/NR⌉·NR·kcb ≥ ⌈nc/NR⌉·NR·kc elements.
                    unsafe { pack_b(nr, kc, nc, b0, p.rsb, p.csb, bp) };
                    let c0 =
                        p.c.wrapping_offset(ic as isize * p.rsc + jc as isize * p.csc);
                    // SAFETY: the packed panels were just written; the A block (ic.., pc..)
                    // of mc × kc lies inside A and the C block (ic.., jc..) of mc × nc inside
                    // C, which overlaps neither A nor the buffers; direct strips read only rows
                    // < mc of A.
                    unsafe {
                        let a = MatRef::from_raw_parts(a0, mc, kc, p.rsa, p.csa);
                        let c = MatMut::from_raw_parts(c0, mc, nc, p.rsc, p.csc);
                        macro_tile::<L, MR, NV, T1, T2, COMP>(direct, a, (ap, bp), c, p.alpha, beta)
                    };
                    jc += nc;
                }
                pc += kc;
            }
            ic += mc;
        }
    }
}

/// All tiles of one `mc × nc` block of `C` for one KC block (`a` the `mc × kc` block of `A`,
/// `c` the block of `C`): A panels from the packed buffer `ap` (or, on the direct path, full
/// strips straight from `a` and the last partial strip from `ap`), B panels from `bp`. A last
/// strip of `mr < MR` rows runs the smallest of the `T1`-, `T2`- and `MR`-row tiles that covers
/// it (reading the first rows of its packed panel), so 44 rows on a 12-row tile cost 3 × 12 +
/// 8 rows of work, not 4 × 12.
///
/// # Safety
/// As in [`driver`], for the block; `ap`, `bp` hold the block's packed panels.
#[inline(always)]
unsafe fn macro_tile<
    L: Lanes,
    const MR: usize,
    const NV: usize,
    const T1: usize,
    const T2: usize,
    const COMP: bool,
>(
    direct: bool,
    a: MatRef<'_, L::E>,
    (ap, bp): (*const L::E, *const L::E),
    mut c: MatMut<'_, L::E>,
    alpha: L::E,
    beta: L::E,
) {
    let (mc, kc, nc) = (a.rows(), a.cols(), c.cols());
    let (a0, rsa, csa) = (a.as_ptr(), a.rs(), a.cs());
    let (c0, rsc, csc) = (c.as_mut_ptr(), c.rs(), c.cs());
    let mut ir = 0;
    while ir < mc {
        let mr = MR.min(mc - ir);
        let ci = c0.wrapping_offset(ir as isize * rsc);
        let panel = if direct { ap } else { ap.wrapping_add(ir * kc) };
        let m = MR as isize;
        let s = (kc, nc, bp, ci, rsc, csc, mr, alpha, beta);
        // SAFETY: packed panels hold MR rows × kc (zero past mc); a direct strip has MR rows
        // of A inside the block (mr = MR); each strip writes only its mr rows of C.
        unsafe {
            if mr <= T1 {
                strip::<L, T1, NV, COMP>(panel, 1, m, s)
            } else if mr <= T2 {
                strip::<L, T2, NV, COMP>(panel, 1, m, s)
            } else if mr < MR || !direct {
                strip::<L, MR, NV, COMP>(panel, 1, m, s)
            } else if csa == 1 {
                strip::<L, MR, NV, COMP>(a0.offset(ir as isize * rsa), rsa, 1, s)
            } else {
                strip::<L, MR, NV, COMP>(a0.offset(ir as isize * rsa), rsa, csa, s)
            }
        }
        ir += MR;
    }
}

/// What a strip needs besides its A operand: `(kc, nc, bp, c, rsc, csc, mr, α, β)`.
type StripArgs<E> = (usize, usize, *const E, *mut E, isize, isize, usize, E, E);

/// One strip of `R` rows against every B panel of the block: `A[i, p] = a[i·ars + p·acs]`
/// for `i < R`; writes rows `< mr` of `C`.
///
/// # Safety
/// `a` valid for `R` rows × kc at its strides; `bp` holds ⌈nc/NR⌉ packed panels of kc rows;
/// `C` valid for `mr × nc`; the instruction set of `L` available.
#[inline(always)]
unsafe fn strip<L: Lanes, const R: usize, const NV: usize, const COMP: bool>(
    a: *const L::E,
    ars: isize,
    acs: isize,
    (kc, nc, bp, c, rsc, csc, mr, alpha, beta): StripArgs<L::E>,
) {
    let nr = NV * L::W;
    let mut jr = 0;
    while jr < nc {
        // SAFETY: the panel at jr·kc is inside `bp`; the tile's columns jr.. < nc of C.
        unsafe {
            let b = bp.add(jr * kc);
            let acc = if COMP {
                tile_compensated::<L, R, NV>(kc, a, ars, acs, b)
            } else {
                tile::<L, R, NV>(kc, a, ars, acs, b)
            };
            let cols = nr.min(nc - jr);
            let ct = MatMut::from_raw_parts(c.offset(jr as isize * csc), mr, cols, rsc, csc);
            store::<L, R, NV>(&acc, ct, alpha, beta);
        }
        jr += nr;
    }
}

/// Runs the product on variant `isa` (which must be supported), reading `A` directly when
/// `direct`, with this thread's packing buffers. (The buffers are taken outside the
/// `#[target_feature]` wrappers: a closure inside one would not inherit its features.)
///
/// # Safety
/// As in [`driver`]; `isa` supported by the CPU.
#[inline]
pub(super) unsafe fn run<E: SimdElem>(isa: Isa, direct: bool, p: Problem<E>) {
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn v512<E: SimdElem>(direct: bool, p: Problem<E>, a: &mut Buf, b: &mut Buf) {
        // SAFETY: forwarded contract; AVX-512F is enabled here.
        unsafe {
            if compensated::<E>() {
                driver::<Fused<E::Avx512>, 4, 2, 1, 2, true>(direct, p, a, b)
            } else {
                driver::<Fused<E::Avx512>, 12, 2, 4, 8, false>(direct, p, a, b)
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn v256<E: SimdElem>(direct: bool, p: Problem<E>, a: &mut Buf, b: &mut Buf) {
        // SAFETY: forwarded contract; AVX2 and FMA are enabled here.
        unsafe {
            if compensated::<E>() {
                driver::<Fused<E::Avx2>, 2, 2, 1, 1, true>(direct, p, a, b)
            } else {
                driver::<Fused<E::Avx2>, 6, 2, 2, 4, false>(direct, p, a, b)
            }
        }
    }
    with_bufs(|a, b| {
        // SAFETY: the caller guarantees `isa` is supported.
        unsafe {
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => v512::<E>(direct, p, a, b),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => v256::<E>(direct, p, a, b),
                _ if compensated::<E>() => driver::<Unfused<E>, 4, 4, 1, 2, true>(direct, p, a, b),
                _ => driver::<Unfused<E>, 4, 4, 1, 2, false>(direct, p, a, b),
            }
        }
    })
}

/// Resolves [`Path`] for a whole product.
pub(super) fn resolve<E: SimdElem>(path: Path, p: &Problem<E>) -> bool {
    match path {
        Path::Packed => false,
        Path::Direct => true,
        Path::Auto => auto_direct(p.rsa, p.csa, std::mem::size_of::<E>()),
    }
}
