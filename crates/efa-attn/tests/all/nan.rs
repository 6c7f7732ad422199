//! A NaN query or key element reaches every output that reads it, in the forward and the
//! backward, for every mask, type, size class and SIMD variant: it is never mistaken for a
//! masked score (o = 0, lse = −∞) nor dropped by the running maximum.
//!
//! The expected NaN pattern is derived independently of both the kernel and the naive
//! reference's NaN handling: score `(i, j)` is NaN exactly when `(i, j)` is visible (read from
//! the probabilities of the same problem without NaN) and `qᵢ` or `kⱼ` holds a NaN; a row with
//! a NaN score has NaN `o` and `lse`; every other row stays finite.

use crate::common;

use common::*;
use efa_attn::{naive, Attention, Isa};
use efa_num::Real;
use ndarray::{Array4, Axis};

/// Where an array is NaN, as a flat boolean list.
fn nan_pattern<T: Real, D: ndarray::Dimension>(a: &ndarray::Array<T, D>) -> Vec<bool> {
    a.iter().map(|x| x.is_nan()).collect()
}

fn check_case<T: Real>(b: usize, nq: usize, nk: usize, d: usize, isa: Isa, seed: u64) {
    let h = 2;
    let clean_q = rand4::<T>([b, h, nq, d], 1.0, seed);
    let clean_k = rand4::<T>([b, h, nk, d], 1.0, seed + 1);
    let v = rand4::<T>([b, h, nk, 3], 1.0, seed + 2);
    let g = rand4::<T>([b, h, nq, 3], 1.0, seed + 3);
    let lens = lengths(b, nk);
    let dense = rand_dense(b, nq, nk, seed + 4);
    // A NaN in query row nq−2 of (batch 0, head 0) and in key row nk/2 of (batch b−1, head 1)
    // (the last key tile holds it when nk spans several tiles).
    let (qi, kj) = (nq - 2, nk / 2);
    let mut q = clean_q.clone();
    let mut k = clean_k.clone();
    q[[0, 0, qi, d - 1]] = T::NAN;
    k[[b - 1, 1, kj, 0]] = T::NAN;
    for (name, mask) in masks(nq, nk, &lens, &dense) {
        let what = format!("{} {} nq{nq} nk{nk} d{d} {name}", T::NAME, isa.name());
        let clean = Attention::new(clean_q.view(), clean_k.view(), v.view())
            .mask(mask.clone())
            .isa(isa);
        let visible = naive::probabilities(&clean).unwrap().mapv(|p| p > 0.0);
        let row_nan = Array4::from_shape_fn((b, h, nq, 1), |(bb, hh, i, _)| {
            (0..nk).any(|j| {
                visible[[bb, hh, i, j]]
                    && ((bb, hh, i) == (0, 0, qi) || (bb, hh, j) == (b - 1, 1, kj))
            })
        });
        let args = Attention::new(q.view(), k.view(), v.view())
            .mask(mask)
            .isa(isa);
        let out = args.forward().unwrap();
        let want_o: Vec<bool> = out
            .o
            .indexed_iter()
            .map(|((bb, hh, i, _), _)| row_nan[[bb, hh, i, 0]])
            .collect();
        let want_lse: Vec<bool> = row_nan.iter().copied().collect();
        assert_eq!(nan_pattern(&out.o), want_o, "{what}: NaN pattern of o");
        assert_eq!(
            nan_pattern(&out.lse),
            want_lse,
            "{what}: NaN pattern of lse"
        );
        // The backward never hides a NaN the reference has. It may spread one further inside
        // the (batch, head) that holds it: the kernel multiplies whole tiles, and a masked
        // pair's zero weight times a NaN key is NaN (IEEE 0·NaN), where the reference skips
        // masked pairs. Slices without a NaN input stay finite, and every value the
        // reference has finite and the kernel too agrees with it.
        let got = args.backward(out.view(), g.view(), None).unwrap();
        let want = naive::backward(&args, g.view(), None).unwrap();
        let tol = if T::BYTES == 4 { 1e-3 } else { 1e-9 };
        for (label, a, r) in [
            ("dq", &got.dq, &want.dq),
            ("dk", &got.dk, &want.dk),
            ("dv", &got.dv, &want.dv),
        ] {
            for ((ix, x), y) in a.indexed_iter().zip(r) {
                let (bb, hh) = (ix.0, ix.1);
                let poisoned = (bb, hh) == (0, 0) || (bb, hh) == (b - 1, 1);
                if y.is_nan() {
                    assert!(x.is_nan(), "{what}: {label}{ix:?} hides a NaN");
                } else if !poisoned {
                    assert!(
                        !x.is_nan(),
                        "{what}: {label}{ix:?} NaN outside the poisoned slices"
                    );
                }
                if !x.is_nan() && !y.is_nan() {
                    assert!(
                        (x.to_f64() - y).abs() <= tol * (1.0 + y.abs()),
                        "{what}: {label}{ix:?} {} vs {y}",
                        x.to_f64()
                    );
                }
            }
        }
        // The rows that read the NaN are really poisoned in the gradient too: the query row
        // that holds it has a NaN dq whenever it sees any key.
        if row_nan[[0, 0, qi, 0]] {
            assert!(
                got.dq
                    .index_axis(Axis(0), 0)
                    .index_axis(Axis(0), 0)
                    .index_axis(Axis(0), qi)
                    .iter()
                    .all(|x| x.is_nan()),
                "{what}: dq of the NaN query row"
            );
        }
    }
}

#[test]
fn nan_scores_propagate_every_variant() {
    for isa in Isa::ALL {
        // One tile, and several tiles in both directions.
        check_case::<f64>(3, 5, 6, 4, isa, 10);
        check_case::<f32>(3, 5, 6, 4, isa, 11);
        check_case::<f64>(3, 70, 75, 8, isa, 12);
        check_case::<f32>(2, 40, 140, 16, isa, 13);
    }
}
