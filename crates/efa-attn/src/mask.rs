//! Attention masks: which keys each query may see.
//!
//! A query row `i` of batch row `b`, head `h` sees key `j` iff every active rule allows it:
//! causal `j ≤ i + offset`, key padding `j < lengths[b]`, exclude-self `j ≠ i`, dense
//! `dense[b, h, i, j]` (broadcast over size-1 batch/head axes). Causal and key-padding rules
//! give each row a visible prefix `[0, hi(i))`; the kernels never touch keys at or beyond it,
//! so fully masked tiles are skipped. Exclude-self and dense rules are applied per element.

use crate::AttnError;
use ndarray::ArrayView4;

/// A combination of masking rules (all optional); [`Mask::Combined`] carries one.
#[derive(Clone, Debug, Default)]
pub struct MaskSet<'a> {
    /// Causal with offset: query `i` sees keys `j ≤ i + offset` (offset `Nk − Nq` aligns the
    /// last query with the last key in rectangular cases).
    pub causal: Option<isize>,
    /// Valid key count per batch row: key `j` is visible iff `j < key_lengths[b]`.
    pub key_lengths: Option<&'a [usize]>,
    /// Query `i` does not see key `j = i`.
    pub exclude_self: bool,
    /// Boolean visibility `[B or 1, H or 1, Nq, Nk]`; `true` means visible.
    pub dense: Option<ArrayView4<'a, bool>>,
}

/// Which keys each query may attend to.
#[derive(Clone, Debug, Default)]
pub enum Mask<'a> {
    /// Every key is visible.
    #[default]
    None,
    /// Query `i` sees keys `j ≤ i + offset`.
    Causal {
        /// Diagonal offset (0 for square self-attention).
        offset: isize,
    },
    /// Key `j` of batch row `b` is visible iff `j < lengths[b]`.
    KeyPadding(&'a [usize]),
    /// Query `i` sees every key except `j = i`.
    ExcludeSelf,
    /// Boolean visibility `[B or 1, H or 1, Nq, Nk]` (`true` = visible).
    Dense(ArrayView4<'a, bool>),
    /// Several rules at once (e.g. key padding + causal, key padding + exclude-self).
    Combined(MaskSet<'a>),
}

impl<'a> Mask<'a> {
    /// The rules as a [`MaskSet`].
    pub fn to_set(&self) -> MaskSet<'a> {
        match self {
            Mask::None => MaskSet::default(),
            Mask::Causal { offset } => MaskSet {
                causal: Some(*offset),
                ..Default::default()
            },
            Mask::KeyPadding(l) => MaskSet {
                key_lengths: Some(l),
                ..Default::default()
            },
            Mask::ExcludeSelf => MaskSet {
                exclude_self: true,
                ..Default::default()
            },
            Mask::Dense(d) => MaskSet {
                dense: Some(*d),
                ..Default::default()
            },
            Mask::Combined(s) => s.clone(),
        }
    }

    /// Shorthand for `Mask::Causal { offset: 0 }`.
    pub fn causal() -> Self {
        Mask::Causal { offset: 0 }
    }
}

/// A mask checked against the problem's shape, ready for the kernels.
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
    pub fn new<'m: 'a>(
        mask: &Mask<'m>,
        batch: usize,
        heads: usize,
        nq: usize,
        nk: usize,
    ) -> Result<Self, AttnError> {
        let set = mask.to_set();
        if let Some(l) = set.key_lengths {
            if l.len() != batch {
                return Err(AttnError::new(
                    "mask.key_lengths",
                    vec![l.len()],
                    format!("needs one length per batch row ({batch})"),
                ));
            }
            if let Some((b, &len)) = l.iter().enumerate().find(|(_, &len)| len > nk) {
                return Err(AttnError::new(
                    "mask.key_lengths",
                    vec![l.len()],
                    format!("length {len} at index [{b}] exceeds the key count {nk}"),
                ));
            }
        }
        if let Some(d) = &set.dense {
            let s = d.shape();
            let ok = (s[0] == batch || s[0] == 1)
                && (s[1] == heads || s[1] == 1)
                && s[2] == nq
                && s[3] == nk;
            if !ok {
                return Err(AttnError::new(
                    "mask.dense",
                    s.to_vec(),
                    format!("expected [{batch} or 1, {heads} or 1, {nq}, {nk}]"),
                ));
            }
        }
        let dense: Option<ArrayView4<'a, bool>> = set.dense.map(|d| d.reborrow());
        Ok(Rules {
            causal: set.causal,
            lengths: set.key_lengths,
            exclude_self: set.exclude_self,
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
            let lim = i as isize + off + 1;
            hi = hi.min(lim.clamp(0, self.nk as isize) as usize);
        }
        hi
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
