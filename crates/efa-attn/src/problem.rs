//! Shape checks, tile packing and task splitting shared by forward and backward.

use crate::mask::Rules;
use crate::micro::{padded, scale_rows};
use crate::{Attention, AttnError, Par};
use efa_num::simd::{self, Isa};
use efa_num::{MatMut, MatRef, Real};
use ndarray::{Array3, Array4, ArrayView2, ArrayView3, ArrayView4, Axis};
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// A validated attention problem.
pub(crate) struct Problem<'a, T> {
    pub q: ArrayView4<'a, T>,
    pub k: ArrayView4<'a, T>,
    pub v: ArrayView4<'a, T>,
    pub batch: usize,
    pub heads: usize,
    pub nq: usize,
    pub nk: usize,
    pub d: usize,
    pub dv: usize,
    pub scale: T,
    pub rules: Rules<'a>,
    pub isa: Isa,
    pub par: Par,
}

/// Errors unless `got` equals `want`.
pub(crate) fn expect_shape(
    name: &'static str,
    got: &[usize],
    want: &[usize],
) -> Result<(), AttnError> {
    if got != want {
        return Err(AttnError::new(
            name,
            got.to_vec(),
            format!("expected shape {want:?}"),
        ));
    }
    Ok(())
}

impl<'a, T: Real> Problem<'a, T> {
    /// Checks the shapes of `args` (`q` `[B, H, Nq, D]`, `k` `[B, H, Nk, D]`, `v`
    /// `[B, H, Nk, Dv]`), its mask and its scale (finite in `T`).
    pub fn new<'v: 'a>(args: &'a Attention<ArrayView4<'v, T>>) -> Result<Self, AttnError> {
        let (q, k, v) = (args.q.view(), args.k.view(), args.v.view());
        let [batch, heads, nq, d] = [q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]];
        let nk = k.shape()[2];
        expect_shape("k", k.shape(), &[batch, heads, nk, d])?;
        let dv = v.shape()[3];
        expect_shape("v", v.shape(), &[batch, heads, nk, dv])?;
        let scale = T::from_f64(args.scale_for(d));
        if !scale.is_finite() {
            return Err(AttnError::new(
                "scale",
                vec![],
                format!("must be finite in {}, got {scale}", T::NAME),
            ));
        }
        let rules = Rules::new(&args.mask, batch, heads, nq, nk)?;
        Ok(Problem {
            q,
            k,
            v,
            batch,
            heads,
            nq,
            nk,
            d,
            dv,
            scale,
            rules,
            isa: args.isa_or_active().or_scalar(),
            par: args.par,
        })
    }

    /// (batch, head) of a flat index `b·H + h`.
    #[inline]
    pub fn split(&self, bh: usize) -> (usize, usize) {
        (bh / self.heads, bh % self.heads)
    }

    /// The `[len, dim]` matrix of one (batch, head).
    #[inline]
    pub fn head<'v>(&self, x: &ArrayView4<'v, T>, bh: usize) -> ArrayView2<'v, T> {
        let (b, h) = self.split(bh);
        x.index_axis_move(Axis(0), b).index_axis_move(Axis(0), h)
    }

    /// Asks for head `bh`'s rows of each of `xs` in the second-level cache when the head
    /// exists, its rows are contiguous and all of them together are small ([`prefetch_small`]).
    /// A task calls it for the head it will take next, so that the head's first reads do not
    /// wait on memory (a hint: no value changes).
    pub fn prefetch_head<const N: usize>(&self, xs: [&ArrayView4<'_, T>; N], bh: usize) {
        if bh >= self.batch * self.heads {
            return;
        }
        let heads = xs.map(|x| self.head(x, bh).to_slice().unwrap_or(&[]));
        prefetch_small(&heads);
    }

    /// End (exclusive) of the keys any query row in `[i0, i0 + mq)` can see.
    #[inline]
    pub fn hi_max(&self, b: usize, i0: usize, mq: usize) -> usize {
        if mq == 0 {
            0
        } else {
            self.rules.hi(b, i0 + mq - 1)
        }
    }

    /// First query row whose visible prefix reaches past key `j0` (rows before it see nothing
    /// at or beyond `j0`; the prefix end grows with the row index).
    pub fn first_row_seeing(&self, b: usize, j0: usize) -> usize {
        let (mut lo, mut hi) = (0, self.nq);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.rules.hi(b, mid) > j0 {
                hi = mid
            } else {
                lo = mid + 1
            }
        }
        lo
    }
}

/// Calls `f(r, x[b, h, i0 + r])` for `r < n`, with `(b, h)` of the flat index `bh`, reading
/// through the view's strides (no per-call views: this runs once per block of rows).
pub(crate) fn head3_each<T: Copy>(
    x: &ArrayView3<T>,
    heads: usize,
    bh: usize,
    i0: usize,
    n: usize,
    mut f: impl FnMut(usize, T),
) {
    let (b, h) = (bh / heads, bh % heads);
    let (sh, st) = (x.shape(), x.strides());
    if n == 0 {
        return;
    }
    assert!(
        b < sh[0] && h < sh[1] && i0 + n <= sh[2],
        "head3_each: bounds"
    );
    let base = x
        .as_ptr()
        .wrapping_offset(b as isize * st[0] + h as isize * st[1]);
    for r in 0..n {
        // SAFETY: b < B, h < H and i0 + r < N (asserted) address an element of the view.
        f(r, unsafe { *base.offset((i0 + r) as isize * st[2]) });
    }
}

/// `dst[r·stride + c] = alpha·src[r0 + r, c]` for `r < rows`, `c < cols`, zero for
/// `cols ≤ c < stride`.
pub(crate) fn pack_rows<T: Real>(
    src: &ArrayView2<T>,
    r0: usize,
    rows: usize,
    alpha: T,
    dst: &mut [T],
    stride: usize,
) {
    let cols = src.shape()[1];
    if rows == 0 {
        return;
    }
    assert!(r0 + rows <= src.shape()[0] && dst.len() >= rows * stride && cols <= stride);
    let (rs, cs) = (src.strides()[0], src.strides()[1]);
    // SAFETY: r0 + rows ≤ src rows and c < cols address elements of the view.
    let base = unsafe { src.as_ptr().offset(r0 as isize * rs) };
    for r in 0..rows {
        let out = &mut dst[r * stride..(r + 1) * stride];
        // SAFETY: r < rows and r0 + rows ≤ the view's rows (asserted), so row r0 + r is a row
        // of the view (its only caller, `b_operand`, has cols ≥ 1: 0 is a multiple of PAD).
        let row = unsafe { base.offset(r as isize * rs) };
        if cs == 1 {
            // SAFETY: with column stride 1 the row's `cols` elements are contiguous in the
            // view, which stays borrowed (shared, so unchanged) for this call; `dst` is a
            // distinct unique borrow, so the slice aliases nothing mutable.
            let s = unsafe { std::slice::from_raw_parts(row, cols) };
            if alpha == T::ONE {
                for (o, &x) in out[..cols].iter_mut().zip(s) {
                    *o = x;
                }
            } else {
                for (o, &x) in out[..cols].iter_mut().zip(s) {
                    *o = alpha * x;
                }
            }
        } else {
            for (c, o) in out[..cols].iter_mut().enumerate() {
                // SAFETY: c < cols addresses element (r0 + r, c) of the view.
                *o = alpha * unsafe { *row.offset(c as isize * cs) };
            }
        }
        out[cols..].fill(T::ZERO);
    }
}

/// Transposed pack: `dst[c·stride + r] = src[r0 + r, c]` for `r < rows`, zero for
/// `rows ≤ r < stride`, for every column `c`. With `f32` elements and contiguous rows, blocks
/// are transposed in registers: 16×16 with `isa = Avx512` and `stride` a multiple of 16
/// ([`efa_num::simd::transpose16::transpose16_f32`]), 8×8 with `Avx2` and a multiple of 8
/// ([`efa_num::simd::transpose8::transpose_f32`]); otherwise element by element.
pub(crate) fn pack_cols<T: Real>(
    isa: Isa,
    src: &ArrayView2<T>,
    r0: usize,
    rows: usize,
    dst: &mut [T],
    stride: usize,
) {
    let cols = src.shape()[1];
    assert!(r0 + rows <= src.shape()[0] && rows <= stride && dst.len() >= cols * stride);
    let (rs, cs) = (src.strides()[0], src.strides()[1]);
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512
        && simd::elem_kind::<T>() == simd::ElemKind::F32
        && (cs == 1 || cols <= 1)
        && stride.is_multiple_of(16)
        && rows > 0
    {
        let full = rows.next_multiple_of(16);
        for c in 0..cols {
            dst[c * stride + full..(c + 1) * stride].fill(T::ZERO);
        }
        // SAFETY: Avx512 is only passed when supported (Problem::new applies or_scalar); T is
        // f32; rows r0..r0+rows of the view have `cols` contiguous elements each; the blocks
        // write columns < cols, rows < full ≤ stride of dst (asserted above: cols·stride ≤
        // dst.len()).
        unsafe {
            let base = src.as_ptr().offset(r0 as isize * rs).cast::<f32>();
            let d = dst.as_mut_ptr().cast::<f32>();
            for rb in (0..rows).step_by(16) {
                for cb in (0..cols).step_by(16) {
                    efa_num::simd::transpose16::transpose16_f32(
                        base.offset(rb as isize * rs).add(cb),
                        rs,
                        (rows - rb).min(16),
                        (cols - cb).min(16),
                        d.add(cb * stride + rb),
                        stride,
                    );
                }
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2
        && simd::elem_kind::<T>() == simd::ElemKind::F32
        && (cs == 1 || cols <= 1)
        && stride.is_multiple_of(8)
        && rows > 0
    {
        let full = rows.next_multiple_of(8);
        for c in 0..cols {
            dst[c * stride + full..(c + 1) * stride].fill(T::ZERO);
        }
        // SAFETY: Avx2 is only passed when supported (Problem::new applies or_scalar); T is
        // f32; rows r0 .. r0 + rows of the view have `cols` contiguous elements; output rows
        // c < cols get full ≤ stride elements (rows ≤ stride, both multiples of 8 there), so
        // inside cols·stride ≤ dst.len() (asserted above).
        unsafe {
            efa_num::simd::transpose8::transpose_f32(
                src.as_ptr().offset(r0 as isize * rs).cast(),
                rs,
                (rows, cols),
                dst.as_mut_ptr().cast(),
                stride,
            )
        };
        return;
    }
    let _ = isa;
    for c in 0..cols {
        dst[c * stride + rows..(c + 1) * stride].fill(T::ZERO);
    }
    if rows == 0 {
        return;
    }
    // SAFETY: as in pack_rows for the reads; the writes stay below cols·stride ≤ dst.len()
    // (asserted above). Rows outer: contiguous reads, `cols` sequential write streams.
    unsafe {
        let base = src.as_ptr().offset(r0 as isize * rs);
        let d = dst.as_mut_ptr();
        for r in 0..rows {
            let row = base.offset(r as isize * rs);
            let out = d.add(r);
            if cs == 1 {
                for c in 0..cols {
                    *out.add(c * stride) = *row.add(c);
                }
            } else {
                for c in 0..cols {
                    *out.add(c * stride) = *row.offset(c as isize * cs);
                }
            }
        }
    }
}

/// A matrix operand in memory: element `(r, c)` at `ptr + r·rs + c·cs`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<T> {
    pub ptr: *const T,
    pub rs: isize,
    pub cs: isize,
}

impl<T> Mat<T> {
    /// The operand starting `r` rows further down.
    #[inline]
    pub fn down(self, r: usize) -> Self {
        Mat {
            ptr: self.ptr.wrapping_offset(r as isize * self.rs),
            ..self
        }
    }

    /// The operand's first `rows × cols` elements as a view (for [`crate::micro::gemm`]).
    ///
    /// # Safety
    /// Those elements (and, for a right operand, its rows up to the padded width) must be
    /// readable for the view's lifetime.
    #[inline]
    pub unsafe fn view<'a>(self, rows: usize, cols: usize) -> MatRef<'a, T> {
        // SAFETY: the caller guarantees the elements are readable, this function's contract.
        unsafe { MatRef::from_raw_parts(self.ptr, rows, cols, self.rs, self.cs) }
    }
}

/// Rows from `r0` of a view as a left operand of [`crate::micro::gemm`] (read element by
/// element through the view's own strides; no copy).
pub(crate) fn a_operand<T: Real>(src: &ArrayView2<T>, r0: usize) -> Mat<T> {
    let (rs, cs) = (src.strides()[0], src.strides()[1]);
    Mat {
        ptr: src.as_ptr().wrapping_offset(r0 as isize * rs),
        rs,
        cs,
    }
}

/// Rows `[r0, r0 + rows)` of a view as a right operand of [`crate::micro::gemm`] (contiguous
/// rows of padded width): the view itself when its rows are contiguous and their width is a
/// multiple of [`PAD`](crate::micro::PAD), otherwise a zero-padded copy in `buf`.
pub(crate) fn b_operand<T: Real>(
    src: &ArrayView2<T>,
    r0: usize,
    rows: usize,
    buf: &mut [T],
) -> Mat<T> {
    let cols = src.shape()[1];
    let (rs, cs) = (src.strides()[0], src.strides()[1]);
    if (cs == 1 || cols <= 1) && cols.is_multiple_of(crate::micro::PAD) {
        return Mat {
            ptr: src.as_ptr().wrapping_offset(r0 as isize * rs),
            rs,
            cs: 1,
        };
    }
    let w = padded(cols);
    pack_rows(src, r0, rows, T::ONE, buf, w);
    Mat {
        ptr: buf.as_ptr(),
        rs: w as isize,
        cs: 1,
    }
}

/// The layout of an accumulator in a scratch buffer: `rows` rows of `n` values, row `r` at
/// `r·w` with `w = padded(n)` (whole vectors per row). Forward's output accumulator is one
/// (`Nq` rows of `Dv` row-major, or `Dv` rows of `Nq` transposed), as are backward's `dQ`,
/// `dK` and `dV`.
#[derive(Clone, Copy)]
pub(crate) struct AccRows {
    pub rows: usize,
    pub n: usize,
    pub w: usize,
}

impl AccRows {
    /// `rows` rows of `n` values at the padded stride.
    #[inline]
    pub fn new(rows: usize, n: usize) -> Self {
        AccRows {
            rows,
            n,
            w: padded(n),
        }
    }

    /// Zeroes the rows (padding columns included).
    #[inline]
    pub fn clear<T: Real>(self, buf: &mut [T]) {
        buf[..self.rows * self.w].fill(T::ZERO);
    }

    /// The `n` values of row `r`.
    #[inline]
    pub fn row<T>(self, buf: &[T], r: usize) -> &[T] {
        &buf[r * self.w..r * self.w + self.n]
    }

    /// The `n` values of row `r`, mutably.
    #[inline]
    pub fn row_mut<T>(self, buf: &mut [T], r: usize) -> &mut [T] {
        &mut buf[r * self.w..r * self.w + self.n]
    }

    /// Rows `r .. r + rows`, `cols` columns of each (at stride `w`), as a
    /// [`crate::micro::gemm`] output.
    #[inline]
    pub fn rows_mut<T>(self, buf: &mut [T], r: usize, rows: usize, cols: usize) -> MatMut<'_, T> {
        MatMut::row_major(&mut buf[r * self.w..], rows, cols, self.w)
    }

    /// Writes the rows, times `alpha`, into `out` (`rows·n` elements, unpadded).
    #[inline]
    pub fn write<T: Real>(self, isa: Isa, buf: &[T], alpha: T, out: &mut [MaybeUninit<T>]) {
        scale_rows(isa, self.rows, self.n, buf, self.w, alpha, out);
    }
}

/// Most bytes [`prefetch_small`] asks for at once: a sixteenth of a 1 MiB second-level cache,
/// so that what is asked for ahead of time does not push out what is being worked on (long
/// heads stream through the hardware prefetcher anyway).
const PREFETCH_MAX: usize = 64 << 10;

/// Asks for every line of `parts` in the second-level cache ([`simd::prefetch_l2`]) when
/// they hold at most [`PREFETCH_MAX`] bytes together; nothing otherwise.
pub(crate) fn prefetch_small<E>(parts: &[&[E]]) {
    let bytes: usize = parts.iter().map(|s| std::mem::size_of_val(*s)).sum();
    if bytes <= PREFETCH_MAX {
        for s in parts {
            simd::prefetch_l2(s);
        }
    }
}

/// Splits `buf` into consecutive pieces of the given lengths (lengths may be 0).
pub(crate) fn split_lens<T>(mut buf: &mut [T], lens: impl Iterator<Item = usize>) -> Vec<&mut [T]> {
    let mut out = Vec::new();
    for n in lens {
        let (a, b) = std::mem::take(&mut buf).split_at_mut(n);
        out.push(a);
        buf = b;
    }
    out
}

/// Tile starts and lengths covering `0..n` in steps of `block`.
pub(crate) fn tiles(n: usize, block: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n)
        .step_by(block.max(1))
        .map(move |s| (s, block.min(n - s)))
}

/// Runs `f(scratch, task)` over all tasks, sequentially or on rayon's current pool; each rayon
/// job makes its own scratch with `init`.
pub(crate) fn run_tasks<S, X: Send>(
    par: Par,
    tasks: Vec<X>,
    init: impl Fn() -> S + Sync + Send,
    f: impl Fn(&mut S, X) + Sync + Send,
) {
    run_tasks_min(par, tasks, crate::MIN_TASKS_PER_JOB, init, f)
}

/// [`run_tasks`] with at least `min_len` tasks per rayon job (for tasks that are each worth
/// several small ones).
pub(crate) fn run_tasks_min<S, X: Send>(
    par: Par,
    tasks: Vec<X>,
    min_len: usize,
    init: impl Fn() -> S + Sync + Send,
    f: impl Fn(&mut S, X) + Sync + Send,
) {
    match par {
        Par::Sequential => {
            let mut s = init();
            for t in tasks {
                f(&mut s, t);
            }
        }
        Par::Rayon => {
            tasks
                .into_par_iter()
                .with_min_len(min_len.max(1))
                .for_each_init(init, f);
        }
    }
}

/// Scratch vector of `n` zeros.
/// A `[B, H, N, D]` array not yet written, its buffer from the engine's cache
/// ([`efa_num::pool`]): the kernels' outputs, which the callers give back when done (the tape
/// does when it drops), so that a training step's attention allocates nothing large.
pub(crate) fn uninit4<T>(shape: (usize, usize, usize, usize)) -> Array4<MaybeUninit<T>> {
    efa_num::pool::uninit_array(ndarray::Dim(shape))
}

/// A `[B, H, N]` array not yet written, its buffer from the engine's cache (as [`uninit4`]).
pub(crate) fn uninit3<T>(shape: (usize, usize, usize)) -> Array3<MaybeUninit<T>> {
    efa_num::pool::uninit_array(ndarray::Dim(shape))
}

pub(crate) fn zeros<T: Real>(n: usize) -> Vec<T> {
    vec![T::ZERO; n]
}

/// Padded widths `(dpad, dvpad)`.
pub(crate) fn pads<T: Real>(p: &Problem<T>) -> (usize, usize) {
    (padded(p.d), padded(p.dv))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{s, Array2};

    /// Every variant of the transposed pack equals the element-wise definition, for row and
    /// column counts around the 16-wide blocks, contiguous and strided views.
    #[test]
    fn pack_cols_every_variant() {
        for isa in Isa::ALL {
            if !isa.is_supported() {
                continue;
            }
            for (nrows, cols) in [
                (1, 1),
                (5, 3),
                (16, 16),
                (17, 16),
                (50, 16),
                (64, 64),
                (70, 33),
            ] {
                let a = Array2::from_shape_fn((nrows + 3, cols + 2), |(i, j)| {
                    (i * 1000 + j) as f32 + 0.5
                });
                // Column-strided copy: element (i, j) at i + j·rows.
                let at = a.t().as_standard_layout().into_owned();
                let views = [
                    a.slice(s![.., ..cols]),
                    a.slice(s![.., 1..cols + 1]),
                    at.t().slice_move(s![.., ..cols]),
                ];
                for v in views {
                    for (r0, rows) in [(0, nrows), (3, nrows), (1, nrows.min(5))] {
                        let stride = padded(rows) + 16;
                        let mut dst = vec![f32::NAN; cols * stride];
                        pack_cols(isa, &v, r0, rows, &mut dst, stride);
                        for c in 0..cols {
                            for r in 0..stride {
                                let want = if r < rows { v[[r0 + r, c]] } else { 0.0 };
                                assert_eq!(dst[c * stride + r], want, "{isa:?} {nrows}x{cols}");
                            }
                        }
                        let mut dst64 = vec![f64::NAN; cols * stride];
                        let v64 = v.mapv(f64::from);
                        pack_cols(isa, &v64.view(), r0, rows, &mut dst64, stride);
                        for c in 0..cols {
                            for r in 0..rows {
                                assert_eq!(dst64[c * stride + r], v64[[r0 + r, c]]);
                            }
                        }
                    }
                }
            }
        }
    }
}
