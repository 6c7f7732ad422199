//! Attention of one short sequence on row-major projections, the probabilities written out for
//! the backward: the kernel of dense blocks whose whole score row fits in a few vectors (the
//! temperature model: 1–132 queries, 44–132 keys, 2 heads of 16).
//!
//! For one sequence, query rows `qᵢ` (`nq` rows), key rows `kⱼ` and value rows `vⱼ` (`nk` rows)
//! are read from row-major matrices with any row stride, head `h` owning columns
//! `[h·dk, (h+1)·dk)` of `q` and `k` and `[h·dv, (h+1)·dv)` of `v`; the first `keys` keys are
//! visible (key padding). Per head:
//!
//! - forward: `sᵢⱼ = scale·⟨qᵢ, kⱼ⟩`, `Pᵢⱼ = exp(sᵢⱼ − mᵢ) / Σ_{j'<keys} exp(sᵢⱼ' − mᵢ)` with
//!   `mᵢ = max_{j<keys} sᵢⱼ` (0 for `j ≥ keys`), `oᵢ = Σⱼ Pᵢⱼ vⱼ`. The whole score row is
//!   formed at once (no online softmax) and `P` is written to the caller's buffer (at
//!   [`RowsShape::p_index`]; zeros at hidden keys and padding). [`probs_uninit`] writes the
//!   same `P`, bit for bit, without `O`: a caller can keep `P` for the backward or form it
//!   again there from `q` and `k`;
//! - backward from `P` and `dO`: `dV = Pᵀ·dO`, `dP = dO·Vᵀ`, `Dᵢ = Σⱼ Pᵢⱼ dPᵢⱼ` (which equals
//!   `⟨dOᵢ, oᵢ⟩`), `dS = P ∘ (dP − D)`, `dQ = scale·dS·K`, `dK = scale·dSᵀ·Q`.
//!
//! With `keys = 0` every `oᵢ` is 0 and every gradient is 0. Each product is one
//! [`efa_attn::micro::gemm`] call. From [`COLS_MIN_NQ`] queries on (the column path), the
//! score-shaped blocks are kept transposed (one row per key, one column per query:
//! `Sᵀ = scale·K·Qᵀ`, `P` as `nk` rows of `padded(nq)` per head, `dPᵀ = V·dOᵀ`), so the softmax
//! and its backward run down the columns, one query per vector lane
//! ([`efa_attn::micro::softmax_cols`], [`efa_attn::micro::ds_cols`]: the row kernels'
//! operations in their order, without horizontal reductions). With fewer queries, whose lanes
//! would be mostly padding, they are kept row-major (`by_rows`: `P` as `nq` rows of
//! `padded(nk)` per head). Both give the same bits. The operands the products need with
//! contiguous padded rows (`Qᵀ` or `Kᵀ`, `dOᵀ` or `Vᵀ`, and for head widths that are not whole
//! padded rows `V`, `dO`, `K`, `Q`) are copied per head into reusable scratch, which costs
//! `O(n·d)` against the products' `O(n²·d)`. Everything runs on the calling thread, in a fixed
//! order, so results do not depend on the thread pool.

use super::dense::grow;
use super::transpose::transpose_block;
use cols::{backward_cols, forward_cols};
use efa_attn::micro::{
    ds_cols, gemm_checked, gemm_checked_into, padded, softmax_cols, softmax_cols_again,
    softmax_cols_keep, PAD,
};
use efa_attn::AttnError;
use efa_num::pool::Buf;
use efa_num::simd::Isa;
use efa_num::Real;
use std::mem::MaybeUninit;

/// The shape of one sequence's attention (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowsShape {
    /// Query rows.
    pub nq: usize,
    /// Key (and value) rows.
    pub nk: usize,
    /// Visible keys: rows `j < keys` (at most `nk`).
    pub keys: usize,
    /// Heads.
    pub heads: usize,
    /// Query/key width per head.
    pub dk: usize,
    /// Value width per head.
    pub dv: usize,
    /// Score scale (`1/√dk` in the usual parameterisation).
    pub scale: f64,
}

impl RowsShape {
    /// Whether the probabilities are kept transposed (one row per key, one column per query;
    /// the column path): from [`COLS_MIN_NQ`] queries on. With fewer, the column path's
    /// vectors would be mostly padding, and `P` is kept row-major (one row per query).
    pub fn p_transposed(&self) -> bool {
        self.nq >= COLS_MIN_NQ
    }

    /// Row stride of the kept probabilities: `nq` (transposed) or `nk` (row-major) rounded up
    /// to the kernels' padding.
    pub fn p_stride(&self) -> usize {
        if self.p_transposed() {
            cols_p_stride(self)
        } else {
            by_rows::p_stride(self)
        }
    }

    /// Length of the probability buffer: `heads · nk · p_stride` (transposed) or
    /// `heads · nq · p_stride` (row-major).
    pub fn p_len(&self) -> usize {
        if self.p_transposed() {
            cols_p_len(self)
        } else {
            by_rows::p_len(self)
        }
    }

    /// Where `Pᵢⱼ` of head `h` (query `i`, key `j`) is kept in the probability buffer.
    pub fn p_index(&self, h: usize, i: usize, j: usize) -> usize {
        if self.p_transposed() {
            (h * self.nk + j) * self.p_stride() + i
        } else {
            (h * self.nq + i) * self.p_stride() + j
        }
    }

    /// Length of the softmax's per-query maxima and scales that [`forward_uninit_kept`] keeps
    /// (`heads · 2 · p_stride` on the column path; 0 on the row-major path, which keeps none).
    pub fn kept_len(&self) -> usize {
        if self.p_transposed() {
            self.heads * 2 * cols_p_stride(self)
        } else {
            0
        }
    }

    /// Floating-point operations of [`forward`]: `2·heads·nq·keys·(dk + dv)` (`QKᵀ` and `PV`;
    /// exponentials not counted).
    pub fn forward_flops(&self) -> u64 {
        2 * (self.heads * self.nq * self.keys * (self.dk + self.dv)) as u64
    }
}

/// Queries from which the probabilities are kept transposed ([`RowsShape::p_transposed`]).
pub const COLS_MIN_NQ: usize = 9;

/// The column path's row stride of `Pᵀ`: `nq` padded.
fn cols_p_stride(s: &RowsShape) -> usize {
    padded(s.nq.max(1))
}

/// The column path's probability length: `heads · nk · cols_p_stride`.
fn cols_p_len(s: &RowsShape) -> usize {
    s.heads * s.nk * cols_p_stride(s)
}

/// An [`AttnError`] naming `tensor`, its shape and what is wrong.
fn attn_err(tensor: &'static str, shape: Vec<usize>, message: impl Into<String>) -> AttnError {
    AttnError {
        tensor,
        shape,
        message: message.into(),
    }
}

/// A row-major matrix in a slice: row `r` starts at `data[r·ld]`.
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a, T> {
    /// The elements.
    pub data: &'a [T],
    /// Row stride.
    pub ld: usize,
}

/// A writable row-major matrix in a slice: row `r` starts at `data[r·ld]`.
#[derive(Debug)]
pub struct RowsMut<'a, T> {
    /// The elements.
    pub data: &'a mut [T],
    /// Row stride.
    pub ld: usize,
}

/// One sequence's query, key and value rows (`nq`, `nk` and `nk` rows; see the
/// [module docs](self)).
#[derive(Clone, Copy, Debug)]
pub struct Qkv<'a, T> {
    /// Query rows (their first `heads·dk` columns).
    pub q: Rows<'a, T>,
    /// Key rows (their first `heads·dk` columns).
    pub k: Rows<'a, T>,
    /// Value rows (their first `heads·dv` columns).
    pub v: Rows<'a, T>,
}

/// Where [`backward`] writes the gradients of a [`Qkv`]'s rows (the same widths).
#[derive(Debug)]
pub struct QkvGrads<'a, T> {
    /// `dQ`: `nq` rows.
    pub dq: RowsMut<'a, T>,
    /// `dK`: `nk` rows.
    pub dk: RowsMut<'a, T>,
    /// `dV`: `nk` rows.
    pub dv: RowsMut<'a, T>,
}

/// A matrix read at `data[i·rs + j·cs]` (row-major or transposed), as `(data, rs, cs)`.
type Strided<'a, T> = (&'a [T], usize, usize);

/// Scratch buffers reused across calls (one per thread).
#[derive(Clone, Debug, Default)]
pub struct RowsScratch<T> {
    a: Buf<T>,
    b: Buf<T>,
    c: Buf<T>,
    d: Buf<T>,
    e: Buf<T>,
}

impl<T: Real> RowsScratch<T> {
    /// Empty scratch (buffers grow on first use).
    pub fn new() -> Self {
        RowsScratch {
            a: Buf::new(),
            b: Buf::new(),
            c: Buf::new(),
            d: Buf::new(),
            e: Buf::new(),
        }
    }
}

/// Checks that a `rows × width` matrix fits `len` elements with row stride `ld`.
fn fits(
    name: &'static str,
    len: usize,
    ld: usize,
    rows: usize,
    width: usize,
) -> Result<(), AttnError> {
    let need = if rows == 0 {
        0
    } else {
        (rows - 1) * ld + width
    };
    if ld < width || need > len {
        return Err(attn_err(
            name,
            vec![rows, width],
            format!("{rows} rows of {width} at row stride {ld} need {need} elements, the slice has {len}"),
        ));
    }
    Ok(())
}

/// `P` of at least [`RowsShape::p_len`] elements (its layout's length).
fn check_p(len: usize, s: &RowsShape) -> Result<(), AttnError> {
    if len < s.p_len() {
        return Err(attn_err(
            "p",
            vec![len],
            format!("needs {} elements", s.p_len()),
        ));
    }
    Ok(())
}

fn check_shape(s: &RowsShape) -> Result<(), AttnError> {
    if s.keys > s.nk {
        return Err(attn_err(
            "keys",
            vec![s.nk],
            format!("{} visible keys of {}", s.keys, s.nk),
        ));
    }
    if !s.scale.is_finite() {
        return Err(attn_err(
            "scale",
            vec![],
            format!("not finite: {}", s.scale),
        ));
    }
    Ok(())
}

/// Copies rows `[0, rows)`, columns `[c0, c0 + w)` of `src` into `dst` (`rows × ldd`), zeroing
/// columns `[w, ldd)`.
fn copy_block<T: Real>(src: Rows<T>, c0: usize, w: usize, rows: usize, dst: &mut [T], ldd: usize) {
    for r in 0..rows {
        let s = &src.data[r * src.ld + c0..r * src.ld + c0 + w];
        let d = &mut dst[r * ldd..(r + 1) * ldd];
        d[..w].copy_from_slice(s);
        d[w..].fill(T::ZERO);
    }
}

/// Writes columns `[0, w)` of `src` (`rows × lds`) into rows `[0, rows)`, columns
/// `[c0, c0 + w)` of `dst`, and zeros in rows `[rows, total)` of those columns.
fn put_block<T: Real>(
    src: &[T],
    lds: usize,
    rows: usize,
    total: usize,
    dst: &mut RowsMut<T>,
    c0: usize,
    w: usize,
) {
    for r in 0..total {
        let d = &mut dst.data[r * dst.ld + c0..r * dst.ld + c0 + w];
        if r < rows {
            d.copy_from_slice(&src[r * lds..r * lds + w]);
        } else {
            d.fill(T::ZERO);
        }
    }
}

/// Whether every head's columns are a whole number of padded kernel rows (`dk`, `dv` multiples
/// of [`PAD`], as the temperature model's 16): then a head's columns of `V`, `K`, `Q`, `dO` are
/// themselves the kernel's right-hand operand rows and its outputs can be written straight into
/// the head's columns of `O`, `dQ`, `dK`, `dV`, with no copies through scratch. The kernel
/// computes the same sums either way (its results do not depend on where operands live).
fn whole_heads(s: &RowsShape) -> bool {
    s.dk > 0 && s.dv > 0 && s.dk.is_multiple_of(PAD) && s.dv.is_multiple_of(PAD)
}

/// Zeros rows `[from, to)`, columns `[c0, c0 + w)` of `dst`.
fn zero_rows<T: Real>(dst: &mut RowsMut<T>, from: usize, to: usize, c0: usize, w: usize) {
    for r in from..to {
        dst.data[r * dst.ld + c0..r * dst.ld + c0 + w].fill(T::ZERO);
    }
}

/// `C ← alpha·A·B` ([`gemm_checked`]): `A` `m × k` read through its strides, `B` `k × n` with
/// rows at `b[p·ldb]` (padded width), `C` rows at `c[i·ldc]` (padded width).
fn product<T: Real>(
    isa: Isa,
    mnk: (usize, usize, usize),
    (a, rsa, csa): Strided<'_, T>,
    b: (&[T], usize),
    c: (&mut [T], usize),
    alpha: T,
) {
    gemm_checked(isa, mnk, (a, (rsa, csa)), b, c, false, alpha);
}

/// `s` viewed as initialised.
///
/// # Safety
/// Every element of `s` must have been written.
unsafe fn written<T>(s: &mut [MaybeUninit<T>]) -> &mut [T] {
    // SAFETY: `MaybeUninit<T>` has the layout of `T`; the caller guarantees every element is
    // initialised.
    unsafe { &mut *(s as *mut [MaybeUninit<T>] as *mut [T]) }
}

/// Forward of one sequence (see the [module docs](self)): writes `P` to `p`
/// ([`RowsShape::p_len`] elements) and `oᵢ` to columns `[0, heads·dv)` of the rows of `o`.
///
/// # Errors
/// `keys > nk`, a non-finite scale, or a slice too short for its rows at its row stride.
pub fn forward<T: Real>(
    isa: Isa,
    s: &RowsShape,
    x: Qkv<T>,
    p: &mut [T],
    o: RowsMut<T>,
    scratch: &mut RowsScratch<T>,
) -> Result<(), AttnError> {
    // SAFETY: `MaybeUninit<T>` has the layout of `T`, and `forward_uninit` only writes
    // initialised values through it.
    let p = unsafe { &mut *(p as *mut [T] as *mut [MaybeUninit<T>]) };
    forward_uninit(isa, s, x, p, o, scratch)
}

/// [`forward`] into a probability buffer not yet written (no zero-fill first): on success its
/// first [`RowsShape::p_len`] elements are all written, each exactly as [`forward`] writes it.
///
/// # Errors
/// As [`forward`] (then `p` may be partly written).
pub fn forward_uninit<T: Real>(
    isa: Isa,
    s: &RowsShape,
    x: Qkv<T>,
    p: &mut [MaybeUninit<T>],
    o: RowsMut<T>,
    scratch: &mut RowsScratch<T>,
) -> Result<(), AttnError> {
    checked_forward(isa, s, (x.q, x.k), Some((x.v, o)), p, Kept::No, scratch)
}

/// [`forward_uninit`], also keeping the softmax's per-query maxima and scales in `kept`
/// ([`RowsShape::kept_len`] elements, every one written) for [`probs_uninit`] to form `P`
/// again with one exponential per element.
///
/// # Errors
/// As [`forward_uninit`], or `kept` shorter than [`RowsShape::kept_len`].
pub fn forward_uninit_kept<T: Real>(
    isa: Isa,
    s: &RowsShape,
    x: Qkv<T>,
    p: &mut [MaybeUninit<T>],
    kept: &mut [T],
    o: RowsMut<T>,
    scratch: &mut RowsScratch<T>,
) -> Result<(), AttnError> {
    let kept = Kept::Keep(kept);
    checked_forward(isa, s, (x.q, x.k), Some((x.v, o)), p, kept, scratch)
}

/// What the column path's softmax keeps or reads (see [`forward_uninit_kept`]).
enum Kept<'a, T> {
    /// Nothing: the whole softmax.
    No,
    /// The whole softmax, its maxima and scales written here.
    Keep(&'a mut [T]),
    /// `exp(s − m)·r` from the maxima and scales kept here.
    Again(&'a [T]),
}

/// The entry points' checks (shape; `q`, `k`, and `v`, `o` when given; `p`; the kept
/// maxima and scales when given), then the path for the shape: the column path with `kept`, or
/// the row-major path, which keeps none.
fn checked_forward<T: Real>(
    isa: Isa,
    s: &RowsShape,
    (q, k): (Rows<T>, Rows<T>),
    vo: Option<(Rows<T>, RowsMut<T>)>,
    p: &mut [MaybeUninit<T>],
    kept: Kept<'_, T>,
    scratch: &mut RowsScratch<T>,
) -> Result<(), AttnError> {
    check_shape(s)?;
    let (hdk, hdv) = (s.heads * s.dk, s.heads * s.dv);
    fits("q", q.data.len(), q.ld, s.nq, hdk)?;
    fits("k", k.data.len(), k.ld, s.nk, hdk)?;
    if let Some((v, o)) = &vo {
        fits("v", v.data.len(), v.ld, s.nk, hdv)?;
        fits("o", o.data.len(), o.ld, s.nq, hdv)?;
    }
    check_p(p.len(), s)?;
    let kept_len = match &kept {
        Kept::No => None,
        Kept::Keep(x) => Some(x.len()),
        Kept::Again(x) => Some(x.len()),
    };
    if let Some(len) = kept_len.filter(|&len| len < s.kept_len()) {
        return Err(attn_err(
            "kept",
            vec![len],
            format!("needs {} elements", s.kept_len()),
        ));
    }
    if s.p_transposed() {
        forward_cols(isa, s, (q, k), vo, p, kept, scratch)
    } else {
        by_rows::forward_uninit(isa, s, (q, k), vo, p, scratch)
    }
}

/// The probabilities of [`forward`] alone, into a buffer not yet written: on success its first
/// [`RowsShape::p_len`] elements are all written, each the bits [`forward`] writes for the
/// same `q` and `k` (the same products, softmax and order; only `O = P·V` is skipped). With
/// what [`forward_uninit_kept`] kept for these `q` and `k`, the column path forms each element
/// as `exp(s − m)·r` from the kept maxima and scales, the operations the softmax applied to it,
/// without the reductions. The block op calls it in its backward rather than keeping `P`
/// between the passes.
///
/// # Errors
/// `keys > nk`, a non-finite scale, or `q`, `k`, `p` or `kept` too short (then `p` may be
/// partly written).
pub fn probs_uninit<T: Real>(
    isa: Isa,
    s: &RowsShape,
    q: Rows<T>,
    k: Rows<T>,
    kept: Option<&[T]>,
    p: &mut [MaybeUninit<T>],
    scratch: &mut RowsScratch<T>,
) -> Result<(), AttnError> {
    let kept = kept.map_or(Kept::No, Kept::Again);
    checked_forward(isa, s, (q, k), None, p, kept, scratch)
}

/// Backward of one sequence (see the [module docs](self)) from the forward's `P` and the
/// cotangent `d_o` (columns `[0, heads·dv)`): writes `dq` (columns `[0, heads·dk)` of `nq`
/// rows), `dk` and `dv` (of `nk` rows; 0 at rows `j ≥ keys`).
///
/// # Errors
/// As [`forward`].
pub fn backward<T: Real>(
    isa: Isa,
    s: &RowsShape,
    x: Qkv<T>,
    p: &[T],
    d_o: Rows<T>,
    grads: QkvGrads<T>,
    scratch: &mut RowsScratch<T>,
) -> Result<(), AttnError> {
    check_shape(s)?;
    let (hdk, hdv) = (s.heads * s.dk, s.heads * s.dv);
    let (Qkv { q, k, v }, QkvGrads { dq, dk, dv }) = (&x, &grads);
    fits("q", q.data.len(), q.ld, s.nq, hdk)?;
    fits("k", k.data.len(), k.ld, s.nk, hdk)?;
    fits("v", v.data.len(), v.ld, s.nk, hdv)?;
    fits("d_o", d_o.data.len(), d_o.ld, s.nq, hdv)?;
    fits("dq", dq.data.len(), dq.ld, s.nq, hdk)?;
    fits("dk", dk.data.len(), dk.ld, s.nk, hdk)?;
    fits("dv", dv.data.len(), dv.ld, s.nk, hdv)?;
    check_p(p.len(), s)?;
    if s.p_transposed() {
        backward_cols(isa, s, x, p, d_o, grads, scratch)
    } else {
        by_rows::backward(isa, s, x, p, d_o, grads, scratch)
    }
}

mod by_rows;
mod cols;
mod out;
#[cfg(test)]
mod tests;
