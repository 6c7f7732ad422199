//! The block's parameter gradients by name ([`BlockGrads`]): their lengths, one chunk's partial
//! gradients as pieces of one buffer, and the op's outputs in input order.

use super::super::dense::ld;
use super::super::{unpad, Dims};
use efa_num::Real;
use ndarray::{ArrayD, IxDyn};

/// One value per parameter of the block (padded row strides for the kernels' matrices).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct BlockGrads<B> {
    /// Projections `W_q, b_q, W_k, b_k, W_v, b_v` (empty with given `q, k, v` or `a`).
    pub wq: B,
    pub bq: B,
    pub wk: B,
    pub bk: B,
    pub wv: B,
    pub bv: B,
    /// Output projection and first norm.
    pub wo: B,
    pub bo: B,
    pub g1: B,
    pub be1: B,
    /// Feed-forward layers and second norm.
    pub w1: B,
    pub b1: B,
    pub w2: B,
    pub b2: B,
    pub g2: B,
    pub be2: B,
}

impl<B> BlockGrads<B> {
    /// The parameters in input order.
    pub fn into_array(self) -> [B; 16] {
        let g = self;
        [
            g.wq, g.bq, g.wk, g.bk, g.wv, g.bv, g.wo, g.bo, g.g1, g.be1, g.w1, g.b1, g.w2, g.b2,
            g.g2, g.be2,
        ]
    }

    /// The parameters from an array in input order.
    pub fn from_array(a: [B; 16]) -> Self {
        let [wq, bq, wk, bk, wv, bv, wo, bo, g1, be1, w1, b1, w2, b2, g2, be2] = a;
        BlockGrads {
            wq,
            bq,
            wk,
            bk,
            wv,
            bv,
            wo,
            bo,
            g1,
            be1,
            w1,
            b1,
            w2,
            b2,
            g2,
            be2,
        }
    }
}

impl BlockGrads<usize> {
    /// Lengths of the parameter gradients (padded row strides for the kernels; the
    /// projections' are empty unless they run in the op).
    pub fn sizes(dm: &Dims, project: bool) -> Self {
        let (d, hk, f) = (dm.d, dm.hk, dm.f);
        let (ldd, ldhk, ldf) = (ld(d), ld(hk), ld(f));
        let pq = if project { d * ldhk } else { 0 };
        let pb = if project { hk } else { 0 };
        BlockGrads {
            wq: pq,
            bq: pb,
            wk: pq,
            bk: pb,
            wv: pq,
            bv: pb,
            wo: hk * ldd,
            bo: d,
            g1: d,
            be1: d,
            w1: d * ldf,
            b1: f,
            w2: f * ldd,
            b2: d,
            g2: d,
            be2: d,
        }
    }

    /// Elements over all parameters.
    pub fn total(&self) -> usize {
        self.into_array().iter().sum()
    }
}

/// `buf` cut into consecutive pieces of the given lengths, in input order.
pub(super) fn cut<'a, T>(
    mut buf: &'a mut [T],
    sizes: &BlockGrads<usize>,
) -> BlockGrads<&'a mut [T]> {
    BlockGrads::from_array(sizes.into_array().map(|n| {
        let (a, rest) = std::mem::take(&mut buf).split_at_mut(n);
        buf = rest;
        a
    }))
}

/// The summed gradients as the op's arrays, unpadded (`None` for the projections unless they
/// ran in the op).
pub(super) fn outputs<T: Real>(g: BlockGrads<Vec<T>>, dm: &Dims, project: bool) -> Vec<ArrayD<T>> {
    let (d, hk, f) = (dm.d, dm.hk, dm.f);
    let (ldd, ldhk, ldf) = (ld(d), ld(hk), ld(f));
    let vec1 = |x: Vec<T>| {
        let n = x.len();
        ArrayD::from_shape_vec(IxDyn(&[n]), x).expect("sizes")
    };
    let mut out = Vec::with_capacity(16);
    if project {
        for (w, b) in [(&g.wq, g.bq), (&g.wk, g.bk), (&g.wv, g.bv)] {
            out.push(unpad(w, ldhk, d, hk, 0, &[d, hk]));
            out.push(vec1(b));
        }
    }
    out.push(unpad(&g.wo, ldd, hk, d, 0, &[hk, d]));
    out.push(vec1(g.bo));
    out.push(vec1(g.g1));
    out.push(vec1(g.be1));
    out.push(unpad(&g.w1, ldf, d, f, 0, &[d, f]));
    out.push(vec1(g.b1));
    out.push(unpad(&g.w2, ldd, f, d, 0, &[f, d]));
    out.push(vec1(g.b2));
    out.push(vec1(g.g2));
    out.push(vec1(g.be2));
    out
}
