//! The column path: the score-shaped blocks kept transposed (one row per key, one column per
//! query: `Sᵀ = scale·K·Qᵀ`, `P` as `nk` rows of `padded(nq)` per head, `dPᵀ = V·dOᵀ`), the
//! softmax and its backward down the columns, one query per vector lane (see the
//! [module docs](super)).

use super::out::{dq_dk_out, dv_out, head_do, pv_out, zero_head_grads};
use super::*;

/// The column path's forward: `P` kept transposed ([`cols_p_len`] elements), and `O = P·V`
/// when the values and the output rows are given; the softmax's maxima and scales kept, or
/// read, as `kept` says (per head, `2·p_stride` of them).
pub(super) fn forward_cols<T: Real>(
    isa: Isa,
    s: &RowsShape,
    (q, k): (Rows<T>, Rows<T>),
    mut vo: Option<(Rows<T>, RowsMut<T>)>,
    p: &mut [MaybeUninit<T>],
    mut kept: Kept<'_, T>,
    scratch: &mut RowsScratch<T>,
) -> Result<(), AttnError> {
    let isa = isa.or_scalar();
    let (ps, keys, nq, nk) = (cols_p_stride(s), s.keys, s.nq, s.nk);
    let dvp = padded(s.dv.max(1));
    let scale = T::from_f64(s.scale);
    let whole = whole_heads(s);
    let qt = grow(&mut scratch.a, s.dk * ps);
    let vb = grow(&mut scratch.b, if whole { 0 } else { keys * dvp });
    let ob = grow(&mut scratch.c, nq * dvp);
    for h in 0..s.heads {
        let at = h * 2 * ps..(h + 1) * 2 * ps;
        if let Kept::Keep(st) = &mut kept {
            // Every element written: the columns the softmax's blocks do not reach (and a head
            // without visible keys) keep zeros.
            st[at.clone()].fill(T::ZERO);
        }
        let ph = &mut p[h * nk * ps..(h + 1) * nk * ps];
        // Rows [keys, nk) of Pᵀ: zeros (no probability on hidden keys).
        for x in &mut ph[keys * ps..] {
            x.write(T::ZERO);
        }
        if keys == 0 {
            if let Some((_, o)) = vo.as_mut() {
                put_block(ob, dvp, 0, nq, o, h * s.dv, s.dv);
            }
            continue;
        }
        // Sᵀ = scale·K·Qᵀ (keys × nq) straight into Pᵀ's rows: each element the sum of
        // S = scale·Q·Kᵀ (the products over the head's columns in index order from zero, then
        // the scale). Each row's last PAD columns (which hold [nq, ps)) are zeroed first; the
        // product then writes columns [0, nq), perhaps a few more (finite: Qᵀ's padding is 0).
        transpose_block(isa, q, h * s.dk, s.dk, nq, qt, ps);
        let pk = &mut ph[..keys * ps];
        for row in pk.chunks_exact_mut(ps) {
            row[ps - PAD..].copy_from_slice(&[MaybeUninit::new(T::ZERO); PAD]);
        }
        gemm_checked_into(
            isa,
            (keys, nq, s.dk),
            (&k.data[h * s.dk..], (k.ld, 1)),
            (qt, ps),
            (pk, ps),
            scale,
        );
        // SAFETY: the product wrote columns [0, nq) of every row, the loop above the rest.
        let pk = unsafe { written(pk) };
        // Pᵀ: per query column, the softmax over its visible keys with the row kernel's
        // operations in its order (one query per lane; the padding columns end as zeros).
        match &mut kept {
            Kept::No => softmax_cols(isa, pk, ps, keys, nq),
            Kept::Keep(st) => softmax_cols_keep(isa, pk, ps, keys, nq, &mut st[at]),
            Kept::Again(st) => softmax_cols_again(isa, pk, ps, keys, nq, &st[at]),
        }
        // O = P·V, P read through Pᵀ's strides.
        if let Some((v, o)) = vo.as_mut() {
            pv_out(isa, s, h, (pk, 1, ps), *v, o, (&mut *vb, &mut *ob));
        }
    }
    Ok(())
}

/// The column path's backward from the transposed `P` of [`forward_cols`].
pub(super) fn backward_cols<T: Real>(
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
    let (ps, keys, nq, nk) = (cols_p_stride(s), s.keys, s.nq, s.nk);
    let (dkp, dvp) = (padded(s.dk.max(1)), padded(s.dv.max(1)));
    // Operands: dO (nq × dvp), dOᵀ (dv × ps), K (keys × dkp), Q (nq × dkp); products: dPᵀ
    // then dSᵀ (keys × ps) and one output block at a time.
    let whole = whole_heads(s);
    let part = |n: usize| if whole { 0 } else { n };
    let dob = grow(&mut scratch.a, part(nq * dvp));
    let dot = grow(&mut scratch.b, s.dv * ps);
    let kq = grow(&mut scratch.c, part(keys.max(nq) * dkp));
    let ds = grow(&mut scratch.d, keys * ps);
    let out = grow(&mut scratch.e, part(nq.max(keys) * dkp.max(dvp)));
    for h in 0..s.heads {
        if keys == 0 {
            zero_head_grads(s, h, (&mut dq, &mut dk, &mut dv), out);
            continue;
        }
        // Pᵀ's visible rows (keys × nq at stride ps).
        let pt = &p[h * nk * ps..h * nk * ps + keys * ps];
        let cv = h * s.dv;
        // forward computed O = P·V, so dV = Pᵀ·dO and dPᵀ = V·dOᵀ. With whole padded head
        // widths the products read dO, K, Q and write dV, dQ, dK in place (same sums).
        let (dob, ldo) = head_do(s, h, d_o, &mut *dob);
        dv_out(isa, s, h, (pt, ps, 1), (dob, ldo), &mut dv, &mut *out);
        // dPᵀ = V·dOᵀ: each element the sum of dP = dO·Vᵀ (V's head read in place as A).
        transpose_block(isa, d_o, cv, s.dv, nq, dot, ps);
        let vh = (&v.data[cv..], v.ld, 1);
        product(isa, (keys, nq, s.dv), vh, (dot, ps), (&mut *ds, ps), T::ONE);
        // forward computed P = softmax(S) per query, so dS = P ∘ (dP − Σⱼ P dP), here down
        // the columns of the transposes with the row kernel's operations and order.
        ds_cols(isa, pt, ds, ps, keys, nq);
        // forward computed S = scale·Q·Kᵀ, so dQ = scale·dS·K and dK = scale·dSᵀ·Q (dSᵀ read
        // through transposed strides).
        let ds: &[T] = ds;
        dq_dk_out(
            isa,
            s,
            h,
            (ds, 1, ps),
            (q, k),
            (&mut dq, &mut dk),
            (&mut *kq, &mut *out),
        );
    }
    Ok(())
}
