//! The double-double GEMM: a plain triple loop, each `C[i,j] ← α·(Σ_p A[i,p]·B[p,j]) + β·C[i,j]`
//! with the sum accumulated in [`Dd`] in index order. The reference type needs accuracy, not
//! speed: no packing, no tiles, one thread (so every entry point gives the same bits).

use crate::dd::Dd;
use crate::mat::{MatMut, MatRef};
use crate::Real;

/// `C ← α·A·B + β·C` in double-double with the contract of [`super::gemm`] (shapes already
/// checked to agree): β = 0 does not read `C`; `k = 0` or α = 0 gives `C ← β·C` without
/// reading `A` or `B`.
pub(super) fn gemm_dd(
    alpha: Dd,
    a: MatRef<'_, Dd>,
    b: MatRef<'_, Dd>,
    beta: Dd,
    mut c: MatMut<'_, Dd>,
) {
    let (m, k, n) = (a.rows(), a.cols(), b.cols());
    let (a, rsa, csa) = (a.as_ptr(), a.rs(), a.cs());
    let (b, rsb, csb) = (b.as_ptr(), b.rs(), b.cs());
    let (rsc, csc, c) = (c.rs(), c.cs(), c.as_mut_ptr());
    let product = k > 0 && alpha != Dd::ZERO;
    for i in 0..m as isize {
        for j in 0..n as isize {
            // SAFETY: (i, j) is inside the view C (m × n), which overlaps neither A nor B (a
            // unique borrow); (i, p) and (p, j) are inside the views A (m × k) and B (k × n).
            unsafe {
                let cij = c.offset(i * rsc + j * csc);
                *cij = if product {
                    let mut s = Dd::ZERO;
                    for p in 0..k as isize {
                        s += *a.offset(i * rsa + p * csa) * *b.offset(p * rsb + j * csb);
                    }
                    let ab = alpha * s;
                    if beta == Dd::ZERO {
                        ab
                    } else {
                        ab + beta * *cij
                    }
                } else if beta == Dd::ZERO {
                    Dd::ZERO
                } else {
                    beta * *cij
                };
            }
        }
    }
}
