//! The backward's partial parameter gradients: which piece of a chunk's buffer holds which
//! parameter's gradient, and their lengths.

use super::super::dense::ld;
use super::super::Dims;

/// Partial parameter gradients, in the order below (padded row strides for kernels).
pub(super) const WQ: usize = 0;
pub(super) const BQ: usize = 1;
pub(super) const WK: usize = 2;
pub(super) const BK: usize = 3;
pub(super) const WV: usize = 4;
pub(super) const BV: usize = 5;
pub(super) const WO: usize = 6;
pub(super) const BO: usize = 7;
pub(super) const G1: usize = 8;
pub(super) const BE1: usize = 9;
pub(super) const W1: usize = 10;
pub(super) const B1: usize = 11;
pub(super) const W2: usize = 12;
pub(super) const B2: usize = 13;
pub(super) const G2: usize = 14;
pub(super) const BE2: usize = 15;

/// One chunk's partial parameter gradients: 16 pieces of one buffer, in the order above.
pub(super) type Partial<'a, T> = [&'a mut [T]; 16];

/// Elements of a parameter gradient per task of the partial sums' reduction.
pub(super) const SUM_PIECE: usize = 512;

/// Lengths of the 16 parameter gradients (padded row strides for kernels; the projections'
/// are empty with given `q, k, v`).
pub(super) fn sizes(dm: &Dims, project: bool) -> [usize; 16] {
    let (d, hk, f) = (dm.d, dm.hk, dm.f);
    let (ldd, ldhk, ldf) = (ld(d), ld(hk), ld(f));
    let pq = if project { d * ldhk } else { 0 };
    let pb = if project { hk } else { 0 };
    [
        pq,
        pb,
        pq,
        pb,
        pq,
        pb,
        hk * ldd,
        d,
        d,
        d,
        d * ldf,
        f,
        f * ldd,
        d,
        d,
        d,
    ]
}

/// `buf` cut into consecutive pieces of the given lengths.
pub(super) fn cut<'a, T>(mut buf: &'a mut [T], sizes: &[usize; 16]) -> Partial<'a, T> {
    let mut out: Partial<'a, T> = Default::default();
    for (o, &n) in out.iter_mut().zip(sizes) {
        let (a, rest) = std::mem::take(&mut buf).split_at_mut(n);
        *o = a;
        buf = rest;
    }
    out
}
