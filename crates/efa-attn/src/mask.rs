//! Attention masks: which keys each query may see.
//!
//! A query row `i` of batch row `b`, head `h` sees key `j` iff every active rule allows it:
//! causal `j ≤ i + offset`, key padding `j < key_lengths[b]`, exclude-self `j ≠ i`, dense
//! `dense[b, h, i, j]` (broadcast over size-1 batch/head axes). Causal and key-padding rules
//! give each row a visible prefix `[0, hi(i))`; the kernels never touch keys at or beyond it,
//! so fully masked tiles are skipped. Exclude-self and dense rules are applied per element.

use crate::AttnError;
use ndarray::{Array4, ArrayView4};
use std::sync::Arc;

/// Which keys each query may attend to: a combination of rules, built from [`Mask::none`] or
/// [`Mask::causal`] by chaining, e.g. `Mask::causal().key_lengths(&lengths)`.
///
/// Query `i` of batch row `b`, head `h` sees key `j` iff every rule present allows it:
///
/// | rule | builder | visible iff |
/// |------|---------|-------------|
/// | causal | [`Mask::causal`], [`Mask::causal_offset`] | `j ≤ i + offset` |
/// | key padding | [`Mask::key_lengths`] (`[B]`) | `j < key_lengths[b]` |
/// | exclude-self | [`Mask::exclude_self`] | `j ≠ i` |
/// | dense | [`Mask::dense`] (`[B or 1, H or 1, Nq, Nk]`) | `dense[b, h, i, j]` |
///
/// The mask owns its data behind `Arc`s, so it can be stored (e.g. on a tape) and cloned in
/// O(1); the kernels read it through a borrowed view. Shapes are checked against the problem
/// when it runs; errors name the field (`mask.key_lengths`, `mask.dense`), its shape and the
/// offending index.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Mask {
    causal: Option<isize>,
    key_lengths: Option<Arc<[usize]>>,
    exclude_self: bool,
    dense: Option<Arc<Array4<bool>>>,
}

impl Mask {
    /// Every key visible (no rule).
    pub fn none() -> Self {
        Mask::default()
    }

    /// Causal: query `i` sees keys `j ≤ i` (same as `Mask::none().causal_offset(0)`).
    pub fn causal() -> Self {
        Mask::none().causal_offset(0)
    }

    /// Adds (or replaces) the causal rule with a diagonal offset: query `i` sees keys
    /// `j ≤ i + offset`. Offset `Nk − Nq` aligns the last query with the last key when
    /// `Nq ≠ Nk`; a negative offset hides every key from the first `−offset` queries.
    pub fn causal_offset(mut self, offset: isize) -> Self {
        self.causal = Some(offset);
        self
    }

    /// Adds (or replaces) key padding: key `j` of batch row `b` is visible iff
    /// `j < lengths[b]` (one length per batch row, each at most `Nk`). Accepts `&[usize]`,
    /// `&Vec<usize>`, arrays or an owned `Vec` (copied once, here).
    pub fn key_lengths(mut self, lengths: impl AsRef<[usize]>) -> Self {
        self.key_lengths = Some(Arc::from(lengths.as_ref()));
        self
    }

    /// Adds exclude-self: query `i` does not see key `j = i`.
    pub fn exclude_self(mut self) -> Self {
        self.exclude_self = true;
        self
    }

    /// Adds (or replaces) a dense boolean visibility `[B or 1, H or 1, Nq, Nk]` (`true` =
    /// visible; size-1 batch or head axes broadcast). Accepts an `Array4<bool>` or an
    /// `Arc` of one (shared, not copied).
    pub fn dense(mut self, visible: impl Into<Arc<Array4<bool>>>) -> Self {
        self.dense = Some(visible.into());
        self
    }

    /// The causal offset, if the causal rule is present.
    pub fn offset(&self) -> Option<isize> {
        self.causal
    }

    /// The key lengths per batch row, if key padding is present.
    pub fn lengths(&self) -> Option<&[usize]> {
        self.key_lengths.as_deref()
    }

    /// Whether the exclude-self rule is present.
    pub fn excludes_self(&self) -> bool {
        self.exclude_self
    }

    /// The dense visibility, if present.
    pub fn visibility(&self) -> Option<ArrayView4<'_, bool>> {
        self.dense.as_deref().map(|d| d.view())
    }

    /// Checks the mask against a `[batch, heads, nq, nk]` problem.
    ///
    /// # Errors
    /// `mask.key_lengths` without one length per batch row or with a length beyond `nk`
    /// (naming the batch row), `mask.dense` of another shape.
    pub fn check(&self, batch: usize, heads: usize, nq: usize, nk: usize) -> Result<(), AttnError> {
        Rules::new(self, batch, heads, nq, nk).map(|_| ())
    }

    /// Number of visible (batch row, head, query, key) quadruples `Σ_{b,h,i} |V(i)|` of a
    /// `[batch, heads, nq, nk]` problem: for prefix rules only, `H·Σ_{b,i} hi(b, i)` with
    /// `hi(b, i) = min(Nk, key_lengths[b], i + offset + 1)` (clamped at 0); exclude-self and
    /// dense rules are counted element by element.
    ///
    /// # Errors
    /// As [`Mask::check`].
    pub fn visible_pairs(
        &self,
        batch: usize,
        heads: usize,
        nq: usize,
        nk: usize,
    ) -> Result<u64, AttnError> {
        let r = Rules::new(self, batch, heads, nq, nk)?;
        let mut total: u64 = 0;
        for b in 0..batch {
            if r.has_pointwise() {
                for h in 0..heads {
                    for i in 0..nq {
                        let n = (0..r.hi(b, i)).filter(|&j| r.pointwise(b, h, i, j)).count();
                        total = total.saturating_add(n as u64);
                    }
                }
            } else {
                let len = self.lengths().map_or(nk, |l| l[b]).min(nk) as u64;
                let row = match self.causal {
                    // Σ_{i<nq} clamp(i + offset + 1, 0, len)
                    //   = Σ_{t=offset+1}^{offset+nq} clamp(t, 0, len).
                    Some(off) => {
                        let (a, z) = (off as i128 + 1, off as i128 + nq as i128);
                        let sum = ramp_sum(len, z) - ramp_sum(len, a - 1);
                        u64::try_from(sum).unwrap_or(u64::MAX)
                    }
                    None => nq as u64 * len,
                };
                total = total.saturating_add(row.saturating_mul(heads as u64));
            }
        }
        Ok(total)
    }
}

/// `Σ_{t=1}^{n} min(t, len)` (0 for `n ≤ 0`): `n(n+1)/2` up to `len`, then `len` per term
/// (in u128: `n` can be near `isize::MAX` with a large causal offset).
fn ramp_sum(len: u64, n: i128) -> u128 {
    if n <= 0 {
        return 0;
    }
    let (n, len) = (n as u128, len as u128);
    if n <= len {
        n * (n + 1) / 2
    } else {
        len * (len + 1) / 2 + (n - len) * len
    }
}

/// A mask checked against the problem's shape, borrowed for the kernels.
#[derive(Clone, Debug)]
pub(crate) struct Rules<'a> {
    causal: Option<isize>,
    lengths: Option<&'a [usize]>,
    pub exclude_self: bool,
    dense: Option<ArrayView4<'a, bool>>,
    nk: usize,
}

impl<'a> Rules<'a> {
    /// Validates the mask for `[batch, heads, nq, nk]`.
    pub fn new(
        mask: &'a Mask,
        batch: usize,
        heads: usize,
        nq: usize,
        nk: usize,
    ) -> Result<Self, AttnError> {
        let lengths = mask.lengths();
        if let Some(l) = lengths {
            if l.len() != batch {
                return Err(AttnError::new(
                    "mask.key_lengths",
                    vec![l.len()],
                    format!("needs one length per batch row (B = {batch})"),
                ));
            }
            if let Some((b, &len)) = l.iter().enumerate().find(|(_, &len)| len > nk) {
                return Err(AttnError::new(
                    "mask.key_lengths",
                    vec![l.len()],
                    format!("length {len} at batch row [{b}] exceeds the key count Nk = {nk}"),
                ));
            }
        }
        let dense = mask.visibility();
        if let Some(d) = &dense {
            let s = d.shape();
            let ok = (s[0] == batch || s[0] == 1)
                && (s[1] == heads || s[1] == 1)
                && s[2] == nq
                && s[3] == nk;
            if !ok {
                return Err(AttnError::new(
                    "mask.dense",
                    s.to_vec(),
                    format!("expected [{batch} or 1, {heads} or 1, {nq}, {nk}] (B, H, Nq, Nk)"),
                ));
            }
        }
        Ok(Rules {
            causal: mask.causal,
            lengths,
            exclude_self: mask.exclude_self,
            dense,
            nk,
        })
    }

    /// End (exclusive) of the visible key prefix of query `i` in batch row `b`.
    #[inline]
    pub fn hi(&self, b: usize, i: usize) -> usize {
        let mut hi = self.nk;
        if let Some(l) = self.lengths {
            hi = hi.min(l[b]);
        }
        if let Some(off) = self.causal {
            // Saturating: offsets near isize::MIN / MAX mean "nothing" / "everything".
            let lim = (i as isize).saturating_add(off).saturating_add(1);
            hi = hi.min(lim.clamp(0, self.nk as isize) as usize);
        }
        hi
    }

    /// Whether every query row of a batch row sees the same keys: visibility from key lengths
    /// alone (no causal offset, no element-wise rule).
    #[inline]
    pub fn uniform_rows(&self) -> bool {
        self.causal.is_none() && !self.has_pointwise()
    }

    /// Visible key counts of a tile: `out[r] = clamp(hi(b, i0 + r) − j0, 0, bk)` for every
    /// `r < out.len()` (the keys of tile `[j0, j0 + bk)` query row `i0 + r` sees), with the
    /// per-row work reduced to the causal limit.
    pub fn counts(&self, b: usize, i0: usize, j0: usize, bk: usize, out: &mut [usize]) {
        let mut cap = self.nk;
        if let Some(l) = self.lengths {
            cap = cap.min(l[b]);
        }
        match self.causal {
            None => out.fill(cap.saturating_sub(j0).min(bk)),
            Some(off) => {
                let nk = self.nk as isize;
                for (r, x) in out.iter_mut().enumerate() {
                    let lim = ((i0 + r) as isize).saturating_add(off).saturating_add(1);
                    *x = cap
                        .min(lim.clamp(0, nk) as usize)
                        .saturating_sub(j0)
                        .min(bk);
                }
            }
        }
    }

    /// Whether element-wise rules (exclude-self or dense) are present.
    #[inline]
    pub fn has_pointwise(&self) -> bool {
        self.exclude_self || self.dense.is_some()
    }

    /// Element-wise visibility of key `j` for query `i` (exclude-self and dense rules only;
    /// the prefix rules are handled by [`Rules::hi`]).
    #[inline]
    pub fn pointwise(&self, b: usize, h: usize, i: usize, j: usize) -> bool {
        if self.exclude_self && i == j {
            return false;
        }
        if let Some(d) = &self.dense {
            let bb = if d.shape()[0] == 1 { 0 } else { b };
            let hh = if d.shape()[1] == 1 { 0 } else { h };
            return d[[bb, hh, i, j]];
        }
        true
    }

    /// Full visibility (prefix and element-wise rules).
    #[inline]
    pub fn visible(&self, b: usize, h: usize, i: usize, j: usize) -> bool {
        j < self.hi(b, i) && self.pointwise(b, h, i, j)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Visible pairs against a brute-force count of `visible` written out by hand for the
    /// rules: every (b, h, i, j) tested directly from the definitions in the module docs.
    #[test]
    fn visible_pairs_counts_every_rule() {
        for (bs, hs, nq, nk) in [(3, 2, 5, 7), (3, 1, 9, 4), (3, 2, 1, 1), (3, 1, 0, 3)] {
            // Broadcast over heads, and one per head.
            let dense =
                Array4::from_shape_fn((bs, 1, nq, nk), |(b, _, i, j)| (b + 2 * i + j) % 3 != 0);
            let per_head =
                Array4::from_shape_fn((bs, hs, nq, nk), |(b, h, i, j)| (b + h + i * j) % 4 != 1);
            let (l0, l1) = (vec![nk, nk / 2, 0], vec![nk.min(4), nk, nk.min(1)]);
            let mut masks = vec![
                Mask::none(),
                Mask::none().key_lengths(&l0),
                Mask::none().exclude_self(),
                Mask::causal().exclude_self().key_lengths(&l1),
                Mask::none().dense(dense),
                Mask::causal().dense(per_head).exclude_self(),
            ];
            for off in [-12, -2, -1, 0, 1, 2, 5, 12, isize::MIN, isize::MAX] {
                masks.push(Mask::none().causal_offset(off));
                masks.push(Mask::none().causal_offset(off).key_lengths(&l0));
                masks.push(Mask::none().causal_offset(off).key_lengths(&l1));
            }
            for m in &masks {
                let mut want = 0u64;
                for b in 0..bs {
                    for h in 0..hs {
                        for i in 0..nq {
                            for j in 0..nk {
                                let ok = m
                                    .offset()
                                    .is_none_or(|o| j as i128 <= i as i128 + o as i128)
                                    && m.lengths().is_none_or(|l| j < l[b])
                                    && !(m.excludes_self() && i == j)
                                    && m.visibility()
                                        .is_none_or(|d| d[[b, h.min(d.shape()[1] - 1), i, j]]);
                                want += ok as u64;
                            }
                        }
                    }
                }
                let got = m.visible_pairs(bs, hs, nq, nk).unwrap();
                assert_eq!(got, want, "{bs}×{hs}×{nq}×{nk} {m:?}");
            }
        }
        // Hand count: causal 5×7 with offset 0 sees 1 + 2 + 3 + 4 + 5 = 15 keys per head.
        assert_eq!(Mask::causal().visible_pairs(1, 1, 5, 7).unwrap(), 15);
    }

    /// The tile counts equal `hi` clamped to the tile, row by row, for every prefix rule.
    #[test]
    fn counts_match_hi_row_by_row() {
        let (batch, nq, nk) = (3, 9, 11);
        let lens = [nk, 4, 0];
        let mut masks = vec![Mask::none(), Mask::none().key_lengths(lens)];
        for off in [-12, -3, 0, 2, 20, isize::MIN, isize::MAX] {
            masks.push(Mask::none().causal_offset(off));
            masks.push(Mask::none().causal_offset(off).key_lengths(lens));
        }
        for m in &masks {
            let r = Rules::new(m, batch, 1, nq, nk).unwrap();
            for b in 0..batch {
                for (i0, rows) in [(0, nq), (2, 5), (8, 1)] {
                    for (j0, bk) in [(0, nk), (3, 4), (10, 1), (0, 2)] {
                        let mut got = vec![usize::MAX; rows];
                        r.counts(b, i0, j0, bk, &mut got);
                        let want: Vec<usize> = (0..rows)
                            .map(|x| r.hi(b, i0 + x).saturating_sub(j0).min(bk))
                            .collect();
                        assert_eq!(got, want, "{m:?} b{b} i0 {i0} j0 {j0} bk {bk}");
                    }
                }
            }
        }
    }

    #[test]
    fn builder_sets_and_replaces_rules() {
        let v = vec![1, 2];
        let m = Mask::causal().key_lengths(&v).key_lengths(vec![3]);
        assert_eq!((m.offset(), m.lengths()), (Some(0), Some(&[3usize][..])));
        assert!(!m.excludes_self() && m.visibility().is_none());
        assert_eq!(Mask::none(), Mask::default());
        assert_ne!(Mask::causal(), Mask::none().causal_offset(1));
    }

    #[test]
    fn errors_name_field_shape_and_batch_row() {
        let e = Mask::none()
            .key_lengths([5, 6, 2])
            .check(3, 1, 4, 5)
            .unwrap_err();
        assert_eq!((e.tensor, e.shape.clone()), ("mask.key_lengths", vec![3]));
        assert!(e.message.contains("6 at batch row [1]"), "{e}");
        assert!(e.message.contains("Nk = 5"), "{e}");
        let e = Mask::none().key_lengths([5]).check(2, 1, 4, 5).unwrap_err();
        assert!(e.message.contains("B = 2"), "{e}");
        let d = Array4::from_elem((2, 3, 4, 5), true);
        let e = Mask::none().dense(d).check(2, 2, 4, 5).unwrap_err();
        assert_eq!(
            (e.tensor, e.shape.clone()),
            ("mask.dense", vec![2, 3, 4, 5])
        );
    }
}
