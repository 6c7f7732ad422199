//! The row-major path: `S`, `P` and `dP` as one row per query (`P` kept as `nq` rows of
//! `padded(nk)` per head), one [`efa_attn::micro::gemm`] call per product, `Kᵀ` and `Vᵀ`
//! through scratch, [`softmax_rows`] and [`ds_rows`] between products. Used when there are
//! too few queries to fill the column path's vector lanes (see [`RowsShape::p_transposed`]);
//! it is also the bitwise reference of the column path's tests (the code as it was before
//! that path; the output products, the same calls in both, are shared in `out.rs`).

use super::out::{dq_dk_out, dv_out, head_do, pv_out, zero_head_grads};
use super::*;
use efa_attn::micro::{ds_rows, gemm_checked_into, softmax_rows};

/// The row stride of the row-major `P` (`nq` rows of `padded(nk)` per head) these kernels keep.
pub(super) fn p_stride(s: &RowsShape) -> usize {
    padded(s.nk.max(1))
}

/// The length of that `P`: `heads · nq · p_stride`.
pub(super) fn p_len(s: &RowsShape) -> usize {
    s.heads * s.nq * p_stride(s)
}

/// [`forward`] into a probability buffer not yet written (no zero-fill first): on success its
/// first [`p_len`] elements are all written, each exactly as [`forward`] writes it; `O = P·V`
/// only when the values and the output rows are given ([`probs_uninit`] passes `None`).
///
/// # Errors
/// As [`forward`] (then `p` may be partly written).
pub(super) fn forward_uninit<T: Real>(
    isa: Isa,
    s: &RowsShape,
    (q, k): (Rows<T>, Rows<T>),
    mut vo: Option<(Rows<T>, RowsMut<T>)>,
    p: &mut [MaybeUninit<T>],
    scratch: &mut RowsScratch<T>,
) -> Result<(), AttnError> {
    let isa = isa.or_scalar();
    let (ps, keys) = (p_stride(s), s.keys);
    let dvp = padded(s.dv.max(1));
    let scale = T::from_f64(s.scale);
    let whole = whole_heads(s);
    let kt = grow(&mut scratch.a, s.dk * ps);
    let vb = grow(&mut scratch.b, if whole { 0 } else { keys * dvp });
    let ob = grow(&mut scratch.c, s.nq * dvp);
    for h in 0..s.heads {
        let ph = &mut p[h * s.nq * ps..(h + 1) * s.nq * ps];
        if keys == 0 {
            for x in ph.iter_mut() {
                x.write(T::ZERO);
            }
            if let Some((_, o)) = vo.as_mut() {
                put_block(ob, dvp, 0, s.nq, o, h * s.dv, s.dv);
            }
            continue;
        }
        // Sᵀ operand: Kᵀ (dk × keys, padded); S = scale·Q·Kᵀ straight into P's rows (columns
        // [0, keys) of each, perhaps a few more; every column from `keys` on is written as a
        // zero below, before the row is read).
        transpose_block(isa, k, h * s.dk, s.dk, keys, kt, ps);
        gemm_checked_into(
            isa,
            (s.nq, keys, s.dk),
            (&q.data[h * s.dk..], (q.ld, 1)),
            (kt, ps),
            (ph, ps),
            scale,
        );
        for row in ph.chunks_exact_mut(ps) {
            for x in &mut row[keys..] {
                x.write(T::ZERO);
            }
        }
        // SAFETY: the product wrote at least columns [0, keys) of every row, the loop above the
        // rest.
        let ph = unsafe { written(ph) };
        // Pᵢ = softmax of row i's first `keys` entries (max, exponentials and their sum, scale).
        softmax_rows(isa, ph, ps, s.nq, keys);
        // O = P·V (when the values and the output rows are given).
        if let Some((v, o)) = vo.as_mut() {
            pv_out(isa, s, h, (ph, ps, 1), *v, o, (&mut *vb, &mut *ob));
        }
    }
    Ok(())
}

/// Backward of one sequence (see the [module docs](self)) from the forward's `P` and the
/// cotangent `d_o` (columns `[0, heads·dv)`): writes `dq` (columns `[0, heads·dk)` of `nq`
/// rows), `dk` and `dv` (of `nk` rows; 0 at rows `j ≥ keys`).
///
/// # Errors
/// As [`forward`].
pub(super) fn backward<T: Real>(
    isa: Isa,
    s: &RowsShape,
    Qkv { q, k, v }: Qkv<T>,
    p: &[T],
    d_o: Rows<T>,
    QkvGrads {
        mut dq,
        mut dk,
        mut dv,
    }: QkvGrads<T>,
    scratch: &mut RowsScratch<T>,
) -> Result<(), AttnError> {
    let isa = isa.or_scalar();
    let (ps, keys, nq) = (p_stride(s), s.keys, s.nq);
    let (dkp, dvp) = (padded(s.dk.max(1)), padded(s.dv.max(1)));
    // Operands: dO (nq × dvp), Vᵀ (dv × ps), K (keys × dkp), Q (nq × dkp); products: dS
    // (nq × ps) and one output block at a time.
    let whole = whole_heads(s);
    let part = |n: usize| if whole { 0 } else { n };
    let dob = grow(&mut scratch.a, part(nq * dvp));
    let vt = grow(&mut scratch.b, s.dv * ps);
    let kq = grow(&mut scratch.c, part(keys.max(nq) * dkp));
    let ds = grow(&mut scratch.d, nq * ps);
    let out = grow(&mut scratch.e, part(nq.max(keys) * dkp.max(dvp)));
    for h in 0..s.heads {
        if keys == 0 {
            zero_head_grads(s, h, (&mut dq, &mut dk, &mut dv), out);
            continue;
        }
        let ph = &p[h * nq * ps..(h + 1) * nq * ps];
        let cv = h * s.dv;
        // forward computed O = P·V, so dV = Pᵀ·dO and dP = dO·Vᵀ. With whole padded head
        // widths the products read dO, K, Q and write dV, dQ, dK in place (same sums).
        let (dob, ldo) = head_do(s, h, d_o, &mut *dob);
        dv_out(isa, s, h, (ph, 1, ps), (dob, ldo), &mut dv, &mut *out);
        transpose_block(isa, v, cv, s.dv, keys, vt, ps);
        product(
            isa,
            (nq, keys, s.dv),
            (dob, ldo, 1),
            (vt, ps),
            (ds, ps),
            T::ONE,
        );
        // forward computed P = softmax(S) per row, so dS = P ∘ (dP − Σⱼ P dP).
        ds_rows(isa, ph, ds, ps, nq, keys);
        // forward computed S = scale·Q·Kᵀ, so dQ = scale·dS·K and dK = scale·dSᵀ·Q.
        let ds: &[T] = ds;
        dq_dk_out(
            isa,
            s,
            h,
            (ds, ps, 1),
            (q, k),
            (&mut dq, &mut dk),
            (&mut *kq, &mut *out),
        );
    }
    Ok(())
}
