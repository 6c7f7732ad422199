//! Error budget of `gather_sum`'s sums (docs/design.md §3c) at adversarial inputs: one table
//! row picked by 18,000 of 20,000 positions (a site or [MASK] row of a full temperature batch),
//! cotangents of 1e4 scale whose running sum climbs to ~1e8 and cancels to ~1e-4 of that, and
//! the bias's gradient over every position. In f32 and f64 the op's table and bias gradients
//! are held against the same model composed from the tape's `embedding` and a broadcast add,
//! computed in double-double: within twice the composition's own error (or 32 units of the
//! type's round-off of the largest entry), in f64 within 1e-11 of the largest entry, and every
//! element within the bound of blocked summation (`efa_num::sum`), `γ_{127 + ⌈log₂ blocks⌉}`
//! times the sum of its terms' magnitudes. Measured: 3.6e-4 (table) and 3.0e-4 (bias) in f32,
//! 6.5e-13 and 5.6e-13 in f64; before the sums were blocked, 1.0e-2 and 1.2e-2, 1.8e-11 and
//! 2.0e-11.

use super::*;
use crate::TapeNn;
use efa_num::Dd;
use efa_testkit::rel_err;
use ndarray::Dimension;

const B: usize = 40;
const N: usize = 500;
const F: usize = 40;
const ROWS: usize = 3;

/// Position `k` of the first half of the sequences and position `k` of the second half
/// mirror each other (the same row, opposite cotangents).
fn mirror(b: usize, n: usize) -> usize {
    (b % (B / 2)) * N + n
}

/// Row 0 at 90% of the positions, row 1 at 8%, row 2 at 2%.
fn ids() -> Array2<usize> {
    Array2::from_shape_fn((B, N), |(b, n)| match mirror(b, n) % 50 {
        0..=44 => 0,
        45..=48 => 1,
        _ => 2,
    })
}

/// The cotangent of the output, `[B, N, F]`: 1e4-scale values, positive in the first half of
/// the sequences and their mirror images negative in the second, plus a small column offset,
/// so that a sum in position order climbs to ~1e8 and cancels back to ~1e-4 of that. With
/// `f32` every value is rounded to an f32 (so the f32 run and its reference see the same
/// inputs); else the values keep all of f64's digits (f32 values would sum exactly in f64).
fn cotangent(f32: bool) -> ArrayD<f64> {
    ArrayD::from_shape_fn(IxDyn(&[B, N, F]), |ix| {
        let s = if ix[0] < B / 2 { 1.0 } else { -1.0 };
        let m = mirror(ix[0], ix[1]) as f64;
        let x =
            s * 1e4 * (1.0 + 0.3 * (m * 0.618 + ix[2] as f64).sin()) + 0.05 * (ix[2] + 1) as f64;
        if f32 {
            x as f32 as f64
        } else {
            x
        }
    })
}

/// The gradients of `Σ out ⊙ cot` with respect to the table and the bias, `out` the fused op
/// (`fused`) or `embedding` plus a broadcast add.
fn grads<T: Real>(fused: bool, cot: &ArrayD<f64>) -> [ArrayD<f64>; 2] {
    let mut t = Tape::<T>::new();
    let table = ArrayD::from_shape_fn(IxDyn(&[ROWS, F]), |ix| (ix[0] * F + ix[1]) as f64 * 0.01);
    let tab = t.param("table", table.mapv(T::from_f64)).unwrap();
    let bias = t
        .param("bias", ArrayD::from_elem(IxDyn(&[F]), T::from_f64(0.5)))
        .unwrap();
    let y = if fused {
        let parts = vec![Part { ids: ids(), col: 0 }];
        t.gather_sum(&[tab], parts, Some(bias), F, 1).unwrap()[0]
    } else {
        let e = t.embedding(tab, &ids().into_dyn()).unwrap();
        t.add(e, bias).unwrap()
    };
    let c = t.constant(cot.mapv(T::from_f64));
    let l = t.mul(y, c).unwrap();
    let l = t.sum_all(l).unwrap();
    let g = t.backward(l).unwrap();
    [tab, bias].map(|v| g.wrt(v).unwrap().mapv(|x| x.to_f64()))
}

/// `Σ|x|` of the terms of every table-gradient element (`[ROWS, F]`) and bias-gradient element
/// (`[F]`), and their counts.
fn abs_sums(cot: &ArrayD<f64>) -> ([ArrayD<f64>; 2], [Vec<usize>; 2]) {
    let ids = ids();
    let mut table = ArrayD::zeros(IxDyn(&[ROWS, F]));
    let mut bias = ArrayD::zeros(IxDyn(&[F]));
    let mut counts = vec![0; ROWS];
    for ((b, n), &r) in ids.indexed_iter() {
        counts[r] += 1;
        for j in 0..F {
            table[[r, j]] += cot[[b, n, j]].abs();
            bias[[j]] += cot[[b, n, j]].abs();
        }
    }
    ([table, bias], [counts, vec![B * N; 1]])
}

fn check<T: Real>() {
    let cot = cotangent(T::EPSILON.to_f64() > 1e-10);
    let want = grads::<Dd>(false, &cot);
    let fused = grads::<T>(true, &cot);
    let composed = grads::<T>(false, &cot);
    let (sums, counts) = abs_sums(&cot);
    let u = T::EPSILON.to_f64() / 2.0;
    for (k, name) in ["table", "bias"].into_iter().enumerate() {
        let (ef, ec) = (
            rel_err(&fused[k], &want[k]),
            rel_err(&composed[k], &want[k]),
        );
        // Both sum in `efa_num::sum`'s order (blocks of 128 positions, then a pairwise tree):
        // before, the op summed the bias over every position in order (350× the tape's error).
        assert!(
            ef.is_finite() && ef <= (2.0 * ec).max(32.0 * T::EPSILON.to_f64()),
            "{}: {name}: gather_sum's error {ef:.3e} of the largest entry, the composition's \
             {ec:.3e}",
            T::NAME
        );
        // Item 4's f64 budget: 1e-11 of the parameter's largest entry.
        if T::EPSILON.to_f64() < 1e-10 {
            assert!(ef <= 1e-11, "f64: {name}: error {ef:.3e} above 1e-11");
        }
        for ((ix, &g), &w) in fused[k].indexed_iter().zip(&want[k]) {
            // γ_m·Σ|x|, γ_m = m·u / (1 − m·u), with m = BLOCK − 1 + ⌈log₂ blocks⌉: the bound of
            // blocked sums of `n` terms (a term meets at most BLOCK − 1 additions in its block
            // and one per level of the tree); for n ≤ BLOCK it is γ_{n−1}.
            let n = counts[k][if k == 0 { ix[0] } else { 0 }];
            let nb = efa_num::sum::blocks(n);
            let adds = n.min(efa_num::sum::BLOCK).saturating_sub(1)
                + (nb.max(1) as f64).log2().ceil() as usize;
            let m = adds as f64 * u;
            let bound = m / (1.0 - m) * sums[k][&ix];
            assert!(
                (g - w).abs() <= bound,
                "{}: {name} {:?}: error {:.3e} above the blocked-summation bound {bound:.3e}",
                T::NAME,
                ix.as_array_view().to_vec(),
                (g - w).abs()
            );
        }
        // The inputs are adversarial: the sum cancels to well below its terms.
        let big = sums[k].iter().fold(0.0f64, |m, &x| m.max(x));
        assert!(want[k].iter().all(|x| x.abs() < 1e-3 * big));
    }
}

#[test]
fn table_and_bias_sums_within_budget_at_cancelling_1e4_scale_cotangents() {
    check::<f32>();
    check::<f64>();
}
