//! Long sums of vectors in one fixed order, shared by every plan that forms them.
//!
//! A gradient that sums a cotangent over thousands of positions (a bias, a shared table row, a
//! layer norm's gain) loses about `n·u` of `Σ|x|` when the terms are added one after another
//! (`u` the unit round-off). Here the `n` terms are cut into blocks of [`BLOCK`] consecutive
//! terms, each block is summed from zero in order (in registers, as a plain loop would), and
//! the block sums are added in a fixed pairwise tree ([`tree`]): the worst-case error is about
//! `(BLOCK + ⌈log₂ ⌈n / BLOCK⌉⌉)·u·Σ|x|` instead of `(n − 1)·u·Σ|x|`, at the cost of one
//! buffer of block sums. The order depends only on `n`, never on the thread count, so a result
//! has the same bits on any pool; and every op that sums the same terms with this order (the
//! tape's `embedding` and the fused gathers, a `linear` bias and a gathered bias) gives the
//! same bits. With `n ≤ BLOCK` it is the plain loop.

use crate::Real;

/// Terms per block: summed in order from zero, as a plain loop would.
pub const BLOCK: usize = 128;

/// Whether products of `T` are summed compensated: f64, the dtype that audits gradients
/// against the double-double reference (`crate::gemm`'s f64 products, the attention and block
/// kernels' products, the shared-context op's scores); f32, the training dtype, keeps the plain
/// fused sums, and double-double needs none. docs/design.md §3c.
#[inline(always)]
pub fn compensated<T: Real>() -> bool {
    matches!(crate::simd::elem_kind::<T>(), crate::simd::ElemKind::F64)
}

/// One term `a·b` of a compensated dot product `(s, e)` in scalar arithmetic, with the
/// operations of [`crate::simd::SimdVec::dot2_step`] (so a scalar loop and a vector body give
/// the same bits): `p = a·b`, `π = fma(a, b, −p)`, `(s, σ) = TwoSum(s, p)`, `e ← e + (σ + π)`.
/// After the last term, `s + e` rounded once is the sum as if formed in twice the precision.
#[inline(always)]
pub fn dot2_step<T: Real>(a: T, b: T, (s, e): (T, T)) -> (T, T) {
    let p = a * b;
    let pe = a.mul_add(b, T::ZERO - p);
    let t = s + p;
    let z = t - s;
    let se = (s - (t - z)) + (p - z);
    (t, e + (se + pe))
}

/// Adds `nb` rows of `w` elements (row `i` at `buf[i·w..]`) pairwise, leaving the total in
/// row 0: at level `s = 1, 2, 4, …` every row `i` that is a multiple of `2s` adds row `i + s`
/// when it exists. Elementwise, so any vectorisation gives the same bits.
///
/// # Panics
/// If `buf` holds fewer than `nb·w` elements.
#[track_caller]
pub fn tree<T: Real>(buf: &mut [T], w: usize, nb: usize) {
    assert!(
        buf.len() >= nb * w,
        "sum::tree: {nb} rows of {w} in {}",
        buf.len()
    );
    let mut s = 1;
    while s < nb {
        let mut i = 0;
        while i + s < nb {
            let (lo, hi) = buf.split_at_mut((i + s) * w);
            for (a, &b) in lo[i * w..(i + 1) * w].iter_mut().zip(&hi[..w]) {
                *a += b;
            }
            i += 2 * s;
        }
        s *= 2;
    }
}

/// Number of blocks of `n` terms.
pub fn blocks(n: usize) -> usize {
    n.div_ceil(BLOCK)
}

/// `dst = Σ_{k<n} term_k` in the fixed order of this module, where `add(k, acc)` adds term
/// `k` (a vector of `dst.len()` elements) into `acc`: each block of [`BLOCK`] terms from zero
/// in order, then the blocks' [`tree`].
pub fn terms_into<T: Real>(dst: &mut [T], n: usize, mut add: impl FnMut(usize, &mut [T])) {
    let w = dst.len();
    dst.fill(T::ZERO);
    if n <= BLOCK {
        for k in 0..n {
            add(k, dst);
        }
        return;
    }
    let nb = blocks(n);
    let mut buf = crate::pool::filled(nb * w, T::ZERO);
    if w > 0 {
        for (b, acc) in buf.chunks_exact_mut(w).enumerate() {
            for k in b * BLOCK..((b + 1) * BLOCK).min(n) {
                add(k, acc);
            }
        }
    }
    tree(&mut buf, w, nb);
    dst.copy_from_slice(&buf[..w]);
    crate::pool::give(buf);
}

/// `dst[j] = Σ_{i<rows} src[i·ld + j]` for `j < dst.len()`: the column sums of a row-major
/// matrix in the order of [`terms_into`] (rows in order).
///
/// # Panics
/// If `src` is too short for the rows.
#[track_caller]
pub fn col_sums<T: Real>(dst: &mut [T], src: &[T], ld: usize, rows: usize) {
    let w = dst.len();
    assert!(
        rows == 0 || (rows - 1) * ld + w <= src.len(),
        "sum::col_sums: {rows} rows of {w} at stride {ld} in {}",
        src.len()
    );
    terms_into(dst, rows, |i, acc| {
        for (a, &x) in acc.iter_mut().zip(&src[i * ld..i * ld + w]) {
            *a += x;
        }
    });
}

/// Positions grouped by id, each group's positions in increasing order (a stable counting
/// sort): the order of the long sums over a table row's positions, which the tape's
/// `embedding` backward and the fused gathers share. Its two buffers come from the pool and
/// go back to it on drop.
pub struct ById {
    start: Vec<usize>,
    order: Vec<usize>,
}

impl ById {
    /// Position `k < n` joins group `id(k)` when that is `Some` (each below `groups`).
    ///
    /// # Panics
    /// If an id is `groups` or more.
    #[track_caller]
    pub fn new(n: usize, groups: usize, id: impl Fn(usize) -> Option<usize>) -> Self {
        let mut start = crate::pool::filled(groups + 1, 0usize);
        for k in 0..n {
            if let Some(i) = id(k) {
                assert!(
                    i < groups,
                    "sum::ById: id {i} at position {k}, {groups} groups"
                );
                start[i + 1] += 1;
            }
        }
        for i in 0..groups {
            start[i + 1] += start[i];
        }
        let mut next = crate::pool::take(groups + 1);
        next.extend_from_slice(&start);
        let mut order = crate::pool::filled(start[groups], 0usize);
        for k in 0..n {
            if let Some(i) = id(k) {
                order[next[i]] = k;
                next[i] += 1;
            }
        }
        crate::pool::give(next);
        ById { start, order }
    }

    /// Group `id`'s positions, increasing (empty past the last group).
    pub fn group(&self, id: usize) -> &[usize] {
        match (self.start.get(id), self.start.get(id + 1)) {
            (Some(&a), Some(&b)) => &self.order[a..b],
            _ => &[],
        }
    }

    /// Positions in some group.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// No position in any group.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

impl Drop for ById {
    fn drop(&mut self) {
        crate::pool::give(std::mem::take(&mut self.start));
        crate::pool::give(std::mem::take(&mut self.order));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Dd;

    #[test]
    fn positions_group_by_id_in_increasing_order_leaving_out_none() {
        let ids = [Some(2), None, Some(0), Some(2), Some(2), None, Some(0)];
        let g = ById::new(ids.len(), 4, |k| ids[k]);
        assert_eq!(g.group(0), &[2, 6]);
        assert_eq!(g.group(1), &[] as &[usize]);
        assert_eq!(g.group(2), &[0, 3, 4]);
        assert_eq!(g.group(3), &[] as &[usize]);
        assert_eq!(g.group(9), &[] as &[usize]);
        assert_eq!(g.len(), 5);
        assert!(ById::new(0, 0, |_| None).is_empty());
    }

    #[test]
    #[should_panic(expected = "id 3 at position 1, 3 groups")]
    fn an_id_past_the_groups_is_named() {
        let ids = [0, 3];
        ById::new(2, 3, |k| Some(ids[k]));
    }

    /// The tree adds rows pairwise by levels: for five rows `((r0 + r1) + (r2 + r3)) + r4`.
    #[test]
    fn tree_adds_pairs_by_level() {
        let rows = [1.0f32, 1e8, -1e8, 3.0, 0.5];
        let mut buf = rows.to_vec();
        tree(&mut buf, 1, 5);
        let want = ((rows[0] + rows[1]) + (rows[2] + rows[3])) + rows[4];
        assert_eq!(buf[0].to_bits(), want.to_bits());
        // One row is left alone; none is an empty sum.
        let mut one = vec![7.0f64, 9.0];
        tree(&mut one, 2, 1);
        assert_eq!(one, [7.0, 9.0]);
    }

    /// Up to one block the order is the plain loop's; above it, the blocks' sums from zero
    /// in order, then the tree: spelled out here for 300 terms (blocks of 128, 128, 44).
    #[test]
    fn terms_follow_blocks_then_tree() {
        let x = |k: usize| ((k as f32 * 0.731).sin() * 5.0).exp() - 3.0;
        for n in [0, 1, 127, 128] {
            let mut got = [f32::NAN];
            terms_into(&mut got, n, |k, acc| acc[0] += x(k));
            let plain = (0..n).fold(0.0f32, |s, k| s + x(k));
            assert_eq!(got[0].to_bits(), plain.to_bits(), "n {n}");
        }
        let block = |lo: usize, hi: usize| (lo..hi).fold(0.0f32, |s, k| s + x(k));
        let want = (block(0, 128) + block(128, 256)) + block(256, 300);
        let mut got = [f32::NAN; 1];
        terms_into(&mut got, 300, |k, acc| acc[0] += x(k));
        assert_eq!(got[0].to_bits(), want.to_bits());
        // Column sums are the same order per column.
        let m: Vec<f32> = (0..300 * 3).map(|k| x(k / 3 + 17 * (k % 3))).collect();
        let mut cols = [0.0f32; 2];
        col_sums(&mut cols, &m, 3, 300);
        for (j, &c) in cols.iter().enumerate() {
            let b = |lo: usize, hi: usize| (lo..hi).fold(0.0f32, |s, i| s + m[i * 3 + j]);
            let want = (b(0, 128) + b(128, 256)) + b(256, 300);
            assert_eq!(c.to_bits(), want.to_bits(), "column {j}");
        }
    }

    /// 100,000 terms whose running sum climbs to ~1e6 and whose plain f32 loop loses digits:
    /// the blocked sum stays within its bound `(BLOCK + ⌈log₂ blocks⌉)·u·Σ|x|` of the
    /// double-double sum, and it is two orders of magnitude closer than the plain loop.
    #[test]
    fn blocked_error_is_within_its_bound_where_the_plain_loop_is_not() {
        let n = 100_000;
        let x = |k: usize| 10.0f32 + ((k as f32 * 0.377).sin() * 3.0);
        let mut exact = <Dd as Real>::ZERO;
        let mut abs = 0.0f64;
        for k in 0..n {
            exact += Dd::from_f64(x(k) as f64);
            abs += (x(k) as f64).abs();
        }
        let mut got = [0.0f32];
        terms_into(&mut got, n, |k, acc| acc[0] += x(k));
        let plain = (0..n).fold(0.0f32, |s, k| s + x(k));
        let err = |v: f32| (Dd::from_f64(v as f64) - exact).hi().abs();
        let u = f32::EPSILON as f64 / 2.0;
        let levels = (blocks(n) as f64).log2().ceil();
        let bound = (BLOCK as f64 + levels) * u * abs;
        assert!(err(got[0]) <= bound, "blocked {} > {bound}", err(got[0]));
        // The plain loop's error is two orders larger at these terms (2.1 against 1e-2).
        assert!(
            err(got[0]) * 100.0 < err(plain),
            "{} {}",
            err(got[0]),
            err(plain)
        );
    }
}
