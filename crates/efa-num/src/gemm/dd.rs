//! The double-double GEMM: a plain triple loop, each `C[i,j] ← α·(Σ_p A[i,p]·B[p,j]) + β·C[i,j]`
//! with the sum accumulated in [`Dd`] in index order. The reference type needs accuracy, not
//! speed: no packing, no tiles, one thread (so every entry point gives the same bits).

use crate::dd::Dd;
use crate::Real;

/// `C ← α·A·B + β·C` in double-double with the contract of [`super::gemm`]: β = 0 does not
/// read `C`; `k = 0` or α = 0 gives `C ← β·C` without reading `A` or `B`.
///
/// # Safety
/// As for [`super::gemm`].
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm_dd(
    m: usize,
    k: usize,
    n: usize,
    alpha: Dd,
    a: *const Dd,
    rsa: isize,
    csa: isize,
    b: *const Dd,
    rsb: isize,
    csb: isize,
    beta: Dd,
    c: *mut Dd,
    rsc: isize,
    csc: isize,
) {
    let product = k > 0 && alpha != Dd::ZERO;
    for i in 0..m as isize {
        for j in 0..n as isize {
            // SAFETY: (i, j) is inside C (m × n), which overlaps neither A nor B; (i, p) and
            // (p, j) are inside A (m × k) and B (k × n).
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
