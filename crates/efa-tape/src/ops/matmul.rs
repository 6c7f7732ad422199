//! Batched matrix product `C = op(A)·op(B)` through `T::gemm` (efa's GEMM on strided views),
//! where `op` is the identity or a transpose of the last two axes, expressed by strides (no
//! copies).
//!
//! Shapes: `A` stored `[..., r_a, c_a]` is `m×k` after its optional transpose, `B` stored
//! `[..., r_b, c_b]` is `k×n`; batch axes equal, or `B` 2-D and shared by every batch of `A`
//! (the `x @ W` projection; its gradient is summed over the batch). Output `[..., m, n]`.
//!
//! Backward: `dA = dC·Bᵀ`, `dB = Aᵀ·dC`, each written straight into its input's storage layout
//! through the same strides that read it.
//!
//! FLOPs ([`crate::stats`]): forward `2·m·n·k` per product of the batch, backward `2·m·n·k`
//! for each input gradient computed.

use crate::error::{Result, TapeError};
use crate::op::Op;
use crate::tape::{Tape, Var};
use efa_num::{MatMut, MatRef, Real};
use ndarray::{ArrayD, IxDyn};

/// Geometry of one (validated) batched product.
struct Geom {
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    /// Elements per batch in A, B (0 if B is shared), C.
    step_a: usize,
    step_b: usize,
    step_c: usize,
    /// (row, column) strides of the logical m×k A and k×n B inside one batch.
    sa: (isize, isize),
    sb: (isize, isize),
}

impl Geom {
    /// Batch `bi`'s logical `m × k` A in the storage `a` (or, for `dA`, its gradient's).
    fn a<'a, T>(&self, a: &'a [T], bi: usize) -> MatRef<'a, T> {
        MatRef::new(&a[bi * self.step_a..], self.m, self.k, self.sa.0, self.sa.1)
    }

    /// Batch `bi`'s logical `k × n` B in the storage `b` (block 0 of a shared B).
    fn b<'a, T>(&self, b: &'a [T], bi: usize) -> MatRef<'a, T> {
        MatRef::new(&b[bi * self.step_b..], self.k, self.n, self.sb.0, self.sb.1)
    }

    /// Batch `bi`'s row-major `m × n` C in the storage `c`.
    fn c<'a, T>(&self, c: &'a [T], bi: usize) -> MatRef<'a, T> {
        MatRef::row_major(&c[bi * self.step_c..], self.m, self.n, self.n)
    }
}

/// The elements of an arena value or a fresh array (standard layout).
fn elems<T>(x: &ArrayD<T>) -> &[T] {
    x.as_slice()
        .expect("matmul: arena values and fresh arrays have standard layout")
}

fn geometry(sa: &[usize], sb: &[usize], ta: bool, tb: bool) -> Result<(Geom, Vec<usize>)> {
    let err = |msg: &str| {
        TapeError::new(
            "matmul",
            format!("{msg}: a {sa:?} (transposed: {ta}), b {sb:?} (transposed: {tb})"),
        )
    };
    if sa.len() < 2 || sb.len() < 2 {
        return Err(err("both operands need at least 2 axes"));
    }
    let (ra, ca) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let (rb, cb) = (sb[sb.len() - 2], sb[sb.len() - 1]);
    let (m, k) = if ta { (ca, ra) } else { (ra, ca) };
    let (kb, n) = if tb { (cb, rb) } else { (rb, cb) };
    if k != kb {
        return Err(err(&format!("inner dimensions differ ({k} vs {kb})")));
    }
    let batch_a = &sa[..sa.len() - 2];
    let shared = sb.len() == 2;
    if !shared && batch_a != &sb[..sb.len() - 2] {
        return Err(err(
            "batch axes differ (b must have a's batch axes or be 2-D)",
        ));
    }
    let mut batch: usize = batch_a.iter().product();
    let mut out = batch_a.to_vec();
    out.extend([m, n]);
    // A shared 2-D B with an untransposed, standard-layout A: the batch's row blocks are
    // consecutive rows of one (batch·m)×k matrix, and C's blocks likewise, so one large gemm
    // replaces `batch` small ones (whose packing would dominate; e.g. per-position
    // projections of [256, 5, 64] by [64, 32]). Forward and backward share this geometry.
    let m = if shared && !ta && batch > 1 {
        let folded = batch * m;
        batch = 1;
        folded
    } else {
        m
    };
    let geom = Geom {
        batch,
        m,
        k,
        n,
        step_a: ra * ca,
        step_b: if shared { 0 } else { rb * cb },
        step_c: m * n,
        sa: if ta {
            (1, ca as isize)
        } else {
            (ca as isize, 1)
        },
        sb: if tb {
            (1, cb as isize)
        } else {
            (cb as isize, 1)
        },
    };
    Ok((geom, out))
}

impl<T: Real> Tape<T> {
    /// `C[..., i, j] = Σ_p op(A)[..., i, p]·op(B)[..., p, j]` with `op` = transpose of the last
    /// two axes when `trans_a` / `trans_b`. `b` may be 2-D and shared across `a`'s batch.
    pub fn matmul(&mut self, a: Var, b: Var, trans_a: bool, trans_b: bool) -> Result<Var> {
        let (ia, ib) = (self.check(a, "matmul")?, self.check(b, "matmul")?);
        let (xa, xb) = (self.val(ia), self.val(ib));
        let (g, out_shape) = geometry(xa.shape(), xb.shape(), trans_a, trans_b)?;
        let mut c = efa_num::pool::full(IxDyn(&out_shape), T::ZERO);
        crate::stats::add_flops(crate::stats::gemm_flops(g.batch, g.m, g.n, g.k));
        if g.m > 0 && g.n > 0 && g.k > 0 {
            let (sa, sb) = (elems(xa), elems(xb));
            let out = c
                .as_slice_mut()
                .expect("matmul: a fresh array has standard layout");
            for bi in 0..g.batch {
                let (m, n) = (g.m, g.n);
                let cb = MatMut::row_major(&mut out[bi * g.step_c..], m, n, n);
                T::gemm(T::ONE, g.a(sa, bi), g.b(sb, bi), T::ZERO, cb);
            }
        }
        Ok(self.push(Op::Matmul { trans_a, trans_b }, vec![ia, ib], c))
    }
}

/// VJPs of `C = op(A)·op(B)` for cotangent `dC`.
pub(crate) fn backward<T: Real>(
    a: &ArrayD<T>,
    b: &ArrayD<T>,
    ta: bool,
    tb: bool,
    dc: &ArrayD<T>,
    need: &[bool],
) -> Vec<Option<ArrayD<T>>> {
    let Ok((g, _)) = geometry(a.shape(), b.shape(), ta, tb) else {
        unreachable!("matmul backward: shapes were validated in forward")
    };
    let dc = dc.as_standard_layout();
    let mut da = need[0].then(|| efa_num::pool::full(a.raw_dim(), T::ZERO));
    let mut db = need[1].then(|| efa_num::pool::full(b.raw_dim(), T::ZERO));
    let computed = u64::from(need[0]) + u64::from(need[1]);
    crate::stats::add_flops(computed * crate::stats::gemm_flops(g.batch, g.m, g.n, g.k));
    if g.m > 0 && g.n > 0 && g.k > 0 {
        let (sa, sb) = (elems(a), elems(b));
        let sc = dc
            .as_slice()
            .expect("matmul: the cotangent was made standard layout");
        for bi in 0..g.batch {
            if let Some(da) = da.as_mut() {
                // forward computed C = A·B, so dA (m×k) = dC (m×n) · Bᵀ (n×k); Bᵀ reads B with
                // swapped strides and dA is written with A's strides into a's storage layout.
                let da = da
                    .as_slice_mut()
                    .expect("matmul: a fresh array has standard layout");
                let dav = MatMut::new(&mut da[bi * g.step_a..], g.m, g.k, g.sa.0, g.sa.1);
                T::gemm(T::ONE, g.c(sc, bi), g.b(sb, bi).t(), T::ONE, dav);
            }
            if let Some(db) = db.as_mut() {
                // forward computed C = A·B, so dB (k×n) = Aᵀ (k×m) · dC (m×n); a shared B
                // (step_b = 0) accumulates over the batch through β = 1.
                let db = db
                    .as_slice_mut()
                    .expect("matmul: a fresh array has standard layout");
                let dbv = MatMut::new(&mut db[bi * g.step_b..], g.k, g.n, g.sb.0, g.sb.1);
                T::gemm(T::ONE, g.a(sa, bi).t(), g.c(sc, bi), T::ONE, dbv);
            }
        }
    }
    vec![da, db]
}

#[cfg(test)]
mod tests {
    use crate::testutil::{assert_audit, rand_array};
    use crate::Tape;
    use ndarray::{ArrayD, IxDyn};

    /// Naive triple loop for 2-D stored operands with optional transposes.
    fn naive(a: &ArrayD<f64>, b: &ArrayD<f64>, ta: bool, tb: bool) -> ArrayD<f64> {
        let at = |i: usize, p: usize| if ta { a[[p, i]] } else { a[[i, p]] };
        let bt = |p: usize, j: usize| if tb { b[[j, p]] } else { b[[p, j]] };
        let (m, k) = if ta {
            (a.shape()[1], a.shape()[0])
        } else {
            (a.shape()[0], a.shape()[1])
        };
        let n = if tb { b.shape()[0] } else { b.shape()[1] };
        ArrayD::from_shape_fn(IxDyn(&[m, n]), |ix| {
            (0..k).map(|p| at(ix[0], p) * bt(p, ix[1])).sum()
        })
    }

    fn stored(m: usize, k: usize, t: bool) -> Vec<usize> {
        if t {
            vec![k, m]
        } else {
            vec![m, k]
        }
    }

    #[test]
    fn forward_matches_naive_for_all_transposes_and_f32_agrees() {
        for (m, k, n) in [(3, 5, 2), (1, 7, 1), (4, 1, 6), (17, 13, 11)] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let a = rand_array(&stored(m, k, ta), 1, -1.0, 1.0);
                let b = rand_array(&stored(k, n, tb), 2, -1.0, 1.0);
                let mut t = Tape::<f64>::new();
                let (va, vb) = (t.constant(a.clone()), t.constant(b.clone()));
                let c = t.matmul(va, vb, ta, tb).unwrap();
                let r = naive(&a, &b, ta, tb);
                assert_eq!(t.shape(c), &[m, n]);
                for (x, y) in t.value(c).iter().zip(r.iter()) {
                    assert!((x - y).abs() < 1e-13, "{x} vs {y}");
                }
                let mut t32 = Tape::<f32>::new();
                let va = t32.constant(a.mapv(|v| v as f32));
                let vb = t32.constant(b.mapv(|v| v as f32));
                let c32 = t32.matmul(va, vb, ta, tb).unwrap();
                for (x, y) in t32.value(c32).iter().zip(r.iter()) {
                    // |error| ≤ k·2⁻²³·Σ|a||b| ≤ 13·1.2e-7·13 ≈ 2e-5
                    assert!((*x as f64 - y).abs() < 3e-5, "{x} vs {y}");
                }
            }
        }
    }

    #[test]
    fn audits_transposed_batched_shared_and_empty() {
        let cases: &[(&[usize], &[usize], bool, bool)] = &[
            (&[3, 5], &[5, 2], false, false),
            (&[5, 3], &[5, 2], true, false),
            (&[3, 5], &[2, 5], false, true),
            (&[5, 3], &[2, 5], true, true),
            (&[1, 1], &[1, 1], false, false),
            (&[2, 3, 4], &[2, 4, 5], false, false), // batched
            (&[2, 4, 3], &[2, 5, 4], true, true),   // batched, both transposed
            (&[2, 3, 3, 4], &[4, 2], false, false), // shared weight over batch [2, 3]
            (&[2, 3, 4], &[2, 4], false, true),     // shared, transposed weight
            (&[0, 3, 4], &[4, 2], false, false),    // empty batch
            (&[3, 0], &[0, 2], false, false),       // k = 0: C = 0
        ];
        for (k, &(sa, sb, ta, tb)) in cases.iter().enumerate() {
            let a = rand_array(sa, 30 + k as u64, -1.0, 1.0);
            let b = rand_array(sb, 60 + k as u64, -1.0, 1.0);
            assert_audit(&[("a", a), ("b", b)], move |t, v| {
                let c = t.matmul(v[0], v[1], ta, tb)?;
                let w = t.tanh(c)?;
                t.sum_all(w)
            });
        }
    }

    #[test]
    fn batched_forward_matches_per_batch_naive_and_shared_weight() {
        let a = rand_array(&[2, 3, 4], 5, -1.0, 1.0);
        let w = rand_array(&[4, 2], 6, -1.0, 1.0);
        let mut t = Tape::<f64>::new();
        let (va, vw) = (t.constant(a.clone()), t.constant(w.clone()));
        let c = t.matmul(va, vw, false, false).unwrap();
        for bi in 0..2 {
            let ab = a.index_axis(ndarray::Axis(0), bi).to_owned().into_dyn();
            let r = naive(&ab, &w, false, false);
            let cb = t.value(c).index_axis(ndarray::Axis(0), bi).to_owned();
            assert!(cb.iter().zip(r.iter()).all(|(x, y)| (x - y).abs() < 1e-13));
        }
    }

    #[test]
    fn shape_errors_name_op_and_shapes() {
        let mut t = Tape::<f64>::new();
        let a = t.constant(ArrayD::zeros(IxDyn(&[2, 3])));
        let b = t.constant(ArrayD::zeros(IxDyn(&[4, 5])));
        let e = t.matmul(a, b, false, false).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("matmul: inner dimensions differ (3 vs 4)"),
            "{e}"
        );
        assert!(e.to_string().contains("[2, 3]") && e.to_string().contains("[4, 5]"));
        let c = t.constant(ArrayD::zeros(IxDyn(&[3, 3, 5])));
        let a3 = t.constant(ArrayD::zeros(IxDyn(&[2, 2, 3])));
        assert!(t
            .matmul(a3, c, false, false)
            .unwrap_err()
            .message
            .contains("batch axes differ"));
        let v = t.constant(ArrayD::zeros(IxDyn(&[3])));
        assert!(t.matmul(v, a, false, false).is_err());
    }
}
