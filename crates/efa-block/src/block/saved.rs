//! What the forward keeps for the backward, as named parts, and the one function that cuts
//! them into chunks for both directions ([`carve`]).
//!
//! [`SavedParts`] is generic over what each part is: the per-sample lengths
//! ([`SavedParts::per_sample`]), whole buffers (the kernel's [`Saved`]), or one chunk's pieces
//! of them (written by a forward chunk, read by a backward chunk).

use super::dense::ld;
use super::{Config, Dims, Source};
use efa_num::pool::Buf;
use efa_num::Real;
use std::mem::MaybeUninit;

/// One value per saved quantity, row-major with padded strides.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SavedParts<B> {
    /// Projected queries `[B·Nq, ld(H·K)]` and keys ‖ values `[B·N, ld(2·H·K)]` (projection
    /// mode only).
    pub q: B,
    pub kv: B,
    /// Per sample on the column path, the attention softmax's per-query maxima and scales
    /// ([`Config::kept_len`]), from which the backward forms the probabilities again.
    pub kept: B,
    /// Per sample on the row-major path (a few query rows), the probabilities themselves
    /// ([`Config::saved_p_len`]).
    pub p: B,
    /// Attention output before its projection `[B·Nq, ld(H·K)]` (empty when it is given:
    /// [`super::BlockSource::Attended`]).
    pub o: B,
    /// Normalised rows and reciprocal deviations of both layer norms.
    pub xhat1: B,
    pub rstd1: B,
    pub xhat2: B,
    pub rstd2: B,
    /// Feed-forward hidden layer after the ReLU `[B·Nq, ld(F)]`.
    pub hid: B,
}

/// What the forward keeps for the backward (the saved state of the last forward).
pub(super) type Saved<T> = SavedParts<Buf<T>>;

impl<B> SavedParts<B> {
    /// Each part through `f`, in the order of the fields.
    pub fn map<C>(self, mut f: impl FnMut(B) -> C) -> SavedParts<C> {
        SavedParts {
            q: f(self.q),
            kv: f(self.kv),
            kept: f(self.kept),
            p: f(self.p),
            o: f(self.o),
            xhat1: f(self.xhat1),
            rstd1: f(self.rstd1),
            xhat2: f(self.xhat2),
            rstd2: f(self.rstd2),
            hid: f(self.hid),
        }
    }

    /// The parts of `self` and `other`, paired.
    pub fn zip<C>(self, other: SavedParts<C>) -> SavedParts<(B, C)> {
        SavedParts {
            q: (self.q, other.q),
            kv: (self.kv, other.kv),
            kept: (self.kept, other.kept),
            p: (self.p, other.p),
            o: (self.o, other.o),
            xhat1: (self.xhat1, other.xhat1),
            rstd1: (self.rstd1, other.rstd1),
            xhat2: (self.xhat2, other.xhat2),
            rstd2: (self.rstd2, other.rstd2),
            hid: (self.hid, other.hid),
        }
    }

    /// Each part by mutable reference.
    pub fn each_mut(&mut self) -> SavedParts<&mut B> {
        SavedParts {
            q: &mut self.q,
            kv: &mut self.kv,
            kept: &mut self.kept,
            p: &mut self.p,
            o: &mut self.o,
            xhat1: &mut self.xhat1,
            rstd1: &mut self.rstd1,
            xhat2: &mut self.xhat2,
            rstd2: &mut self.rstd2,
            hid: &mut self.hid,
        }
    }

    /// Each part by reference.
    pub fn each_ref(&self) -> SavedParts<&B> {
        SavedParts {
            q: &self.q,
            kv: &self.kv,
            kept: &self.kept,
            p: &self.p,
            o: &self.o,
            xhat1: &self.xhat1,
            rstd1: &self.rstd1,
            xhat2: &self.xhat2,
            rstd2: &self.rstd2,
            hid: &self.hid,
        }
    }
}

impl SavedParts<usize> {
    /// Elements of each part per sample for the call's shapes: the projections only in
    /// projection mode, the attention output unless it is given, the probabilities or the
    /// softmax statistics as [`Config::saved_p_len`] and [`Config::kept_len`] say.
    pub fn per_sample(cfg: &Config, dm: &Dims) -> Self {
        let (n, nq) = (dm.n, dm.nq);
        let (ldd, ldhk, ldkv, ldf) = (ld(dm.d), ld(dm.hk), ld(2 * dm.hk), ld(dm.f));
        let project = cfg.project();
        SavedParts {
            q: if project { nq * ldhk } else { 0 },
            kv: if project { n * ldkv } else { 0 },
            kept: cfg.kept_len(dm),
            p: cfg.saved_p_len(dm),
            o: if cfg.src == Source::Attended {
                0
            } else {
                nq * ldhk
            },
            xhat1: nq * ldd,
            rstd1: nq,
            xhat2: nq * ldd,
            rstd2: nq,
            hid: nq * ldf,
        }
    }

    /// Elements over all parts.
    pub fn total(&self) -> usize {
        let s = self;
        s.q + s.kv + s.kept + s.p + s.o + s.xhat1 + s.rstd1 + s.xhat2 + s.rstd2 + s.hid
    }
}

/// A buffer that can be cut into one piece per chunk of samples.
pub(super) trait Cut: Sized {
    /// `self` (`b` samples of `each` elements, or empty) cut into one piece per chunk of `per`
    /// samples (empty pieces for an empty buffer).
    fn cut(self, each: usize, per: usize, b: usize) -> Vec<Self>;
}

impl<T> Cut for &mut [T] {
    fn cut(self, each: usize, per: usize, b: usize) -> Vec<Self> {
        let chunks = b.div_ceil(per);
        if self.is_empty() || each == 0 {
            return (0..chunks).map(|_| <&mut [T]>::default()).collect();
        }
        debug_assert_eq!(self.len(), b * each);
        self.chunks_mut(per * each).collect()
    }
}

impl<T> Cut for &[T] {
    fn cut(self, each: usize, per: usize, b: usize) -> Vec<Self> {
        let chunks = b.div_ceil(per);
        if self.is_empty() || each == 0 {
            return (0..chunks).map(|_| <&[T]>::default()).collect();
        }
        debug_assert_eq!(self.len(), b * each);
        self.chunks(per * each).collect()
    }
}

/// The saved parts cut into one [`SavedParts`] of pieces per chunk of `per` samples, each part
/// `lens` elements per sample: the forward's chunks write their pieces, the backward's read
/// them, both through this one carving.
pub(super) fn carve<B: Cut>(
    parts: SavedParts<B>,
    lens: SavedParts<usize>,
    per: usize,
    b: usize,
) -> Vec<SavedParts<B>> {
    let mut pieces = parts
        .zip(lens)
        .map(|(buf, each)| buf.cut(each, per, b).into_iter());
    (0..b.div_ceil(per))
        .map(|_| {
            pieces
                .each_mut()
                .map(|it| it.next().expect("one piece per chunk"))
        })
        .collect()
}

/// A buffer of `n` elements not yet written, to be cut like [`Cut::cut`] and written piece by
/// piece by the parallel chunks that own them: in full by the products and row kernels that
/// produce it, or zeroed first ([`zeroed`]) where a chunk accumulates or writes only part of
/// it. No serial zero-fill runs before the chunks start, and a piece is first touched by the
/// thread that computes it.
pub(super) fn uninit<T>(n: usize) -> Vec<MaybeUninit<T>> {
    efa_num::pool::uninit(n)
}

/// A piece of an [`uninit`] buffer, zeroed and returned initialised.
pub(super) fn zeroed<T: Real>(s: &mut [MaybeUninit<T>]) -> &mut [T] {
    for x in s.iter_mut() {
        x.write(T::ZERO);
    }
    // SAFETY: every element was just written, and `MaybeUninit<T>` has the layout of `T`.
    unsafe { &mut *(s as *mut [MaybeUninit<T>] as *mut [T]) }
}

/// An [`uninit`] buffer whose every piece went through [`zeroed`] (or was otherwise written).
pub(super) use efa_num::pool::assume_init;
