//! The output products both layouts share, one head at a time: `O = P·V`, `dV = Pᵀ·dO`,
//! `dQ = scale·dS·K` and `dK = scale·dSᵀ·Q`, each one [`product`] call with `P` or `dS` read
//! through the strides of its layout (row-major or transposed).

use super::*;

/// `O = P·V` for head `h` (`nq × dv`, sums over the visible keys), `P` given as
/// `(p, rsp, csp)`, read at `p[i·rsp + j·csp]` (row-major or transposed, the two paths'
/// layouts): with whole padded
/// head widths straight from V's rows into O's rows, otherwise through the padded scratch
/// `vb` (V's head) and `ob` (the output block).
pub(super) fn pv_out<T: Real>(
    isa: Isa,
    s: &RowsShape,
    h: usize,
    p: Strided<'_, T>,
    v: Rows<T>,
    o: &mut RowsMut<T>,
    (vb, ob): (&mut [T], &mut [T]),
) {
    let (c0, mnk) = (h * s.dv, (s.nq, s.dv, s.keys));
    if whole_heads(s) {
        let (b, c) = (&v.data[c0..], &mut o.data[c0..]);
        product(isa, mnk, p, (b, v.ld), (c, o.ld), T::ONE);
    } else {
        let dvp = padded(s.dv.max(1));
        copy_block(v, c0, s.dv, s.keys, vb, dvp);
        product(isa, mnk, p, (vb, dvp), (&mut *ob, dvp), T::ONE);
        put_block(ob, dvp, s.nq, s.nq, o, c0, s.dv);
    }
}

/// `dV = Pᵀ·dO` for head `h` (`keys × dv`; zeros on rows `keys..nk`), `Pᵀ` given as
/// `(p, rsp, csp)`, read at `p[j·rsp + i·csp]`, `dO` rows at `dob[i·ldo]` (the head's columns in place or a padded
/// copy); through the padded scratch `out` when the head widths are not whole padded rows.
pub(super) fn dv_out<T: Real>(
    isa: Isa,
    s: &RowsShape,
    h: usize,
    pt: Strided<'_, T>,
    (dob, ldo): (&[T], usize),
    dv: &mut RowsMut<T>,
    out: &mut [T],
) {
    let (cv, mnk) = (h * s.dv, (s.keys, s.dv, s.nq));
    if whole_heads(s) {
        let c = &mut dv.data[cv..];
        product(isa, mnk, pt, (dob, ldo), (c, dv.ld), T::ONE);
        zero_rows(dv, s.keys, s.nk, cv, s.dv);
    } else {
        let dvp = padded(s.dv.max(1));
        product(isa, mnk, pt, (dob, ldo), (&mut *out, dvp), T::ONE);
        put_block(out, dvp, s.keys, s.nk, dv, cv, s.dv);
    }
}

/// `dQ = scale·dS·K` (`nq × dk`) and `dK = scale·dSᵀ·Q` (`keys × dk`; zeros on rows
/// `keys..nk`) for head `h`, `dS` read at `ds[i·rsd + j·csd]` (the row path's `dS` or the
/// column path's `dSᵀ`): K and Q read in place with whole padded head widths, otherwise
/// copied into the padded scratch `kq` and written through `out`.
pub(super) fn dq_dk_out<T: Real>(
    isa: Isa,
    s: &RowsShape,
    h: usize,
    (ds, rsd, csd): Strided<'_, T>,
    (q, k): (Rows<T>, Rows<T>),
    (dq, dk): (&mut RowsMut<T>, &mut RowsMut<T>),
    (kq, out): (&mut [T], &mut [T]),
) {
    let (ck, nq, keys) = (h * s.dk, s.nq, s.keys);
    let scale = T::from_f64(s.scale);
    if whole_heads(s) {
        let (kb, qb) = (&k.data[ck..], &q.data[ck..]);
        let c = &mut dq.data[ck..];
        product(
            isa,
            (nq, s.dk, keys),
            (ds, rsd, csd),
            (kb, k.ld),
            (c, dq.ld),
            scale,
        );
        let c = &mut dk.data[ck..];
        // dSᵀ: `dS` read with swapped strides.
        product(
            isa,
            (keys, s.dk, nq),
            (ds, csd, rsd),
            (qb, q.ld),
            (c, dk.ld),
            scale,
        );
        zero_rows(dk, keys, s.nk, ck, s.dk);
    } else {
        let dkp = padded(s.dk.max(1));
        copy_block(k, ck, s.dk, keys, kq, dkp);
        let kb = (&*kq, dkp);
        product(
            isa,
            (nq, s.dk, keys),
            (ds, rsd, csd),
            kb,
            (&mut *out, dkp),
            scale,
        );
        put_block(out, dkp, nq, nq, dq, ck, s.dk);
        copy_block(q, ck, s.dk, nq, kq, dkp);
        let qb = (&*kq, dkp);
        product(
            isa,
            (keys, s.dk, nq),
            (ds, csd, rsd),
            qb,
            (&mut *out, dkp),
            scale,
        );
        put_block(out, dkp, keys, s.nk, dk, ck, s.dk);
    }
}

/// Head `h`'s columns `[h·dv, (h+1)·dv)` of the `nq` rows of `d_o` as a product operand:
/// in place with whole padded head widths, otherwise copied into the padded scratch `dob`.
pub(super) fn head_do<'a, T: Real>(
    s: &RowsShape,
    h: usize,
    d_o: Rows<'a, T>,
    dob: &'a mut [T],
) -> (&'a [T], usize) {
    let cv = h * s.dv;
    if whole_heads(s) {
        (&d_o.data[cv..], d_o.ld)
    } else {
        let dvp = padded(s.dv.max(1));
        copy_block(d_o, cv, s.dv, s.nq, dob, dvp);
        (dob, dvp)
    }
}

/// Head `h`'s gradients when it sees no key: zeros in its columns of every row of `dq`, `dk`
/// and `dv` (through the zeroed scratch `out`, as the other writes).
pub(super) fn zero_head_grads<T: Real>(
    s: &RowsShape,
    h: usize,
    (dq, dk, dv): (&mut RowsMut<T>, &mut RowsMut<T>, &mut RowsMut<T>),
    out: &[T],
) {
    let (dkp, dvp) = (padded(s.dk.max(1)), padded(s.dv.max(1)));
    put_block(out, dvp, 0, s.nk, dv, h * s.dv, s.dv);
    put_block(out, dkp, 0, s.nk, dk, h * s.dk, s.dk);
    put_block(out, dkp, 0, s.nq, dq, h * s.dk, s.dk);
}
