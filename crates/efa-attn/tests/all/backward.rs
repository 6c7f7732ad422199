//! Backward pass: against the naive f64 reference, finite differences in f64 (dq, dk, dv,
//! including d_lse), the exponential-family identity, fully masked rows, determinism and
//! every SIMD variant.

use crate::common;

use common::*;
use efa_attn::{naive, Attention, Isa, Mask, Par, BLOCK_Q, FUSED_MIN_HEADS};
use efa_num::Real;
use ndarray::ArrayView4;
use ndarray::{Array3, Array4, ArrayD, Ix4};

/// `[b, h, nq, nk, d, dv]`: batches, heads, queries, keys, and the head widths of the queries
/// and keys and of the values.
fn check_case<T: Real>([b, h, nq, nk, d, dv]: [usize; 6], isa: Isa, with_dlse: bool, seed: u64) {
    let q = rand4::<T>([b, h, nq, d], 1.0, seed);
    let k = rand4::<T>([b, h, nk, d], 1.0, seed + 1);
    let v = rand4::<T>([b, h, nk, dv], 1.0, seed + 2);
    let g = rand4::<T>([b, h, nq, dv], 1.0, seed + 3);
    let gl = rand3::<T>([b, h, nq], 1.0, seed + 4);
    let lens = lengths(b, nk);
    let dense = rand_dense(b, nq, nk, seed + 5);
    let scale = 1.0 / (d as f64).sqrt();
    let (atol, rtol) = if T::BYTES == 4 {
        (1e-4, 1e-3)
    } else {
        (1e-11, 1e-9)
    };
    for (name, mask) in masks(nq, nk, &lens, &dense) {
        let what = format!(
            "{} {} b{b} h{h} nq{nq} nk{nk} d{d} dv{dv} {name} dlse={with_dlse}",
            T::NAME,
            isa.name()
        );
        let args = Attention::new(q.view(), k.view(), v.view())
            .mask(mask)
            .scale(scale)
            .isa(isa);
        let out = args.forward().unwrap();
        let dl = if with_dlse { Some(gl.view()) } else { None };
        let got = args.backward(out.view(), g.view(), dl).unwrap();
        let want = naive::backward(&args, g.view(), dl).unwrap();
        assert_close(&got.dq, &want.dq, atol, rtol, &format!("{what} dq"));
        assert_close(&got.dk, &want.dk, atol, rtol, &format!("{what} dk"));
        assert_close(&got.dv, &want.dv, atol, rtol, &format!("{what} dv"));
    }
}

#[test]
fn two_pass_grid_matches_naive() {
    // B·H < FUSED_MIN_HEADS: key-tile pass + query-tile pass.
    let t = BLOCK_Q;
    for (n, &(nq, nk, d)) in [
        (0, 0, 3),
        (1, 1, 1),
        (2, 2, 8),
        (t - 1, t - 1, 16),
        (t + 1, t + 1, 3),
        (3 * t + 5, 3 * t + 5, 8),
        (13, 29, 32),
        (29, 13, 64),
    ]
    .iter()
    .enumerate()
    {
        check_case::<f64>(
            [2, 1, nq, nk, d, d],
            efa_num::simd::active(),
            n % 2 == 0,
            10 * n as u64,
        );
        check_case::<f32>(
            [1, 2, nq, nk, d, d.max(2) - 1],
            efa_num::simd::active(),
            n % 2 == 1,
            10 * n as u64 + 7,
        );
    }
}

#[test]
fn fused_grid_matches_naive() {
    // B·H ≥ FUSED_MIN_HEADS: one task per (batch, head).
    const _: () = assert!(2 * 4 >= FUSED_MIN_HEADS);
    let t = BLOCK_Q;
    for (n, &(nq, nk, d)) in [
        (1, 1, 3),
        (t, t, 16),
        (t + 1, 2 * t + 3, 8),
        (3 * t + 5, 3 * t + 5, 1),
        (50, 50, 16),
        (31, 17, 64),
    ]
    .iter()
    .enumerate()
    {
        check_case::<f64>(
            [2, 4, nq, nk, d, d],
            efa_num::simd::active(),
            n % 2 == 0,
            100 + 10 * n as u64,
        );
        check_case::<f32>(
            [4, 2, nq, nk, d, d],
            efa_num::simd::active(),
            n % 2 == 1,
            200 + 10 * n as u64,
        );
    }
}

#[test]
fn every_simd_variant_forced() {
    for isa in Isa::ALL {
        check_case::<f64>([1, 2, 67, 70, 8, 5], isa, true, 300);
        check_case::<f32>([2, 4, 40, 45, 16, 16], isa, false, 301);
    }
}

/// Loss `Σ g∘o + Σ gl∘lse` (over finite lse) in f64 for central differences.
fn loss(args: &Attention<ArrayView4<f64>>, g: &Array4<f64>, gl: &Array3<f64>) -> f64 {
    let out = args.clone().par(Par::Sequential).forward().unwrap();
    let a: f64 = out.o.iter().zip(g.iter()).map(|(x, y)| x * y).sum();
    let b: f64 = out
        .lse
        .iter()
        .zip(gl.iter())
        .filter(|(x, _)| x.is_finite())
        .map(|(x, y)| x * y)
        .sum();
    a + b
}

fn fd_audit(b: usize, h: usize, nq: usize, nk: usize, d: usize, seed: u64) {
    let q = rand4::<f64>([b, h, nq, d], 1.0, seed);
    let k = rand4::<f64>([b, h, nk, d], 1.0, seed + 1);
    let v = rand4::<f64>([b, h, nk, d + 1], 1.0, seed + 2);
    let g = rand4::<f64>([b, h, nq, d + 1], 1.0, seed + 3);
    let gl = rand3::<f64>([b, h, nq], 1.0, seed + 4);
    let lens = lengths(b, nk);
    let dense = rand_dense(b, nq, nk, seed + 5);
    for (name, mask) in masks(nq, nk, &lens, &dense) {
        let args = Attention::new(q.view(), k.view(), v.view())
            .mask(mask)
            .scale(0.7);
        let out = args.forward().unwrap();
        let got = args
            .backward(out.view(), g.view(), Some(gl.view()))
            .unwrap();
        let four = |x: &ArrayD<f64>| x.clone().into_dimensionality::<Ix4>().unwrap();
        let fd_q = central_diff(&q.clone().into_dyn(), |x| {
            loss(
                &args.with_inputs(four(x).view(), k.view(), v.view()),
                &g,
                &gl,
            )
        });
        let fd_k = central_diff(&k.clone().into_dyn(), |x| {
            loss(
                &args.with_inputs(q.view(), four(x).view(), v.view()),
                &g,
                &gl,
            )
        });
        let fd_v = central_diff(&v.clone().into_dyn(), |x| {
            loss(
                &args.with_inputs(q.view(), k.view(), four(x).view()),
                &g,
                &gl,
            )
        });
        assert_close(
            &got.dq.into_dyn(),
            &fd_q,
            1e-5,
            1e-3,
            &format!("fd dq {name}"),
        );
        assert_close(
            &got.dk.into_dyn(),
            &fd_k,
            1e-5,
            1e-3,
            &format!("fd dk {name}"),
        );
        assert_close(
            &got.dv.into_dyn(),
            &fd_v,
            1e-5,
            1e-3,
            &format!("fd dv {name}"),
        );
    }
}

#[test]
fn finite_differences_two_pass() {
    fd_audit(2, 1, 6, 9, 3, 400);
}

#[test]
fn finite_differences_fused() {
    fd_audit(2, 4, 5, 5, 2, 410);
}

#[test]
fn exponential_family_identity() {
    // With v = k, o = (1/scale)·∂lse/∂q: the output is the mean of the keys under the
    // exponential family whose log-partition is lse. Checked numerically and via backward.
    let (b, h, n, d) = (1, 2, 7, 3);
    let q = rand4::<f64>([b, h, n, d], 1.0, 500);
    let k = rand4::<f64>([b, h, n, d], 1.0, 501);
    let scale = 0.8;
    for mask in [Mask::none(), Mask::causal(), Mask::none().exclude_self()] {
        let args = Attention::new(q.view(), k.view(), k.view())
            .mask(mask)
            .scale(scale);
        let out = args.forward().unwrap();
        let sum_lse = |x: &ArrayD<f64>| {
            let x4 = x.clone().into_dimensionality::<Ix4>().unwrap();
            let r = args
                .with_inputs(x4.view(), k.view(), k.view())
                .par(Par::Sequential)
                .forward()
                .unwrap();
            r.lse.iter().filter(|v| v.is_finite()).sum::<f64>()
        };
        let grad = central_diff(&q.clone().into_dyn(), sum_lse);
        let o_fd = grad.mapv(|g| g / scale);
        assert_close(
            &out.o.clone().into_dyn(),
            &o_fd,
            1e-7,
            1e-6,
            "o vs (1/scale) dlse/dq",
        );
        let zero = Array4::<f64>::zeros(out.o.raw_dim());
        let ones = Array3::<f64>::ones(out.lse.raw_dim());
        let got = args
            .backward(out.view(), zero.view(), Some(ones.view()))
            .unwrap();
        let want = out.o.mapv(|x| x * scale);
        assert_close(&got.dq, &want, 1e-12, 1e-10, "dq = scale·o");
    }
}

#[test]
fn fully_masked_rows_have_zero_gradients() {
    for (bsz, h) in [(3, 1), (3, 4)] {
        let q = rand4::<f64>([bsz, h, 6, 4], 1.0, 600);
        let k = rand4::<f64>([bsz, h, 6, 4], 1.0, 601);
        let v = rand4::<f64>([bsz, h, 6, 4], 1.0, 602);
        let g = rand4::<f64>([bsz, h, 6, 4], 1.0, 603);
        let gl = rand3::<f64>([bsz, h, 6], 1.0, 604);
        let args = Attention::new(q.view(), k.view(), v.view())
            .mask(Mask::none().key_lengths([6, 0, 2]))
            .scale(1.0);
        let out = args.forward().unwrap();
        let gr = args
            .backward(out.view(), g.view(), Some(gl.view()))
            .unwrap();
        for x in [&gr.dq, &gr.dk, &gr.dv] {
            assert!(x.index_axis(ndarray::Axis(0), 1).iter().all(|&v| v == 0.0));
            assert!(x.iter().all(|v| v.is_finite()));
        }
        // Padded keys get no gradient either.
        for x in [&gr.dk, &gr.dv] {
            assert!(x
                .slice(ndarray::s![2, .., 2.., ..])
                .iter()
                .all(|&v| v == 0.0));
        }
    }
}

#[test]
fn deterministic_across_thread_counts() {
    for (bsz, h, n) in [(1, 2, 300), (4, 4, 150)] {
        let q = rand4::<f32>([bsz, h, n, 16], 1.0, 700);
        let k = rand4::<f32>([bsz, h, n, 16], 1.0, 701);
        let v = rand4::<f32>([bsz, h, n, 16], 1.0, 702);
        let g = rand4::<f32>([bsz, h, n, 16], 1.0, 703);
        let args = Attention::new(q.view(), k.view(), v.view())
            .mask(Mask::causal())
            .scale(0.25);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let out = args.forward().unwrap();
                args.backward(out.view(), g.view(), None).unwrap()
            })
        };
        let r1 = run(1);
        for r in [run(2), run(3)] {
            for (a, b) in [(&r1.dq, &r.dq), (&r1.dk, &r.dk), (&r1.dv, &r.dv)] {
                assert!(
                    a.iter()
                        .zip(b.iter())
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "bitwise"
                );
            }
        }
    }
}

#[test]
fn backward_shape_errors_name_the_tensor() {
    let q = Array4::<f64>::zeros((1, 1, 3, 4));
    let k = Array4::<f64>::zeros((1, 1, 5, 4));
    let v = Array4::<f64>::zeros((1, 1, 5, 2));
    let out = efa_attn::AttnOut {
        o: Array4::<f64>::zeros((1, 1, 3, 2)),
        lse: Array3::<f64>::zeros((1, 1, 3)),
    };
    let args = Attention::new(q.view(), k.view(), v.view());
    let bad = Array4::<f64>::zeros((1, 1, 3, 3));
    let e = args.backward(out.view(), bad.view(), None).unwrap_err();
    assert_eq!((e.tensor, e.shape.clone()), ("d_o", vec![1, 1, 3, 3]));
    let e = naive::backward(&args, bad.view(), None).unwrap_err();
    assert_eq!((e.tensor, e.shape.clone()), ("d_o", vec![1, 1, 3, 3]));
    let bad_l = Array3::<f64>::zeros((1, 1, 4));
    let e = args
        .backward(out.view(), out.o.view(), Some(bad_l.view()))
        .unwrap_err();
    assert_eq!((e.tensor, e.shape.clone()), ("d_lse", vec![1, 1, 4]));
    let e = naive::backward(&args, out.o.view(), Some(bad_l.view())).unwrap_err();
    assert_eq!(e.tensor, "d_lse");
    let mut swapped = out.view();
    swapped.o = bad.view();
    let e = args.backward(swapped, out.o.view(), None).unwrap_err();
    assert_eq!(e.tensor, "o");
}

#[test]
fn negative_and_permuted_strides_match_naive() {
    let big = rand4::<f64>([2, 2, 30, 8], 1.0, 800);
    let q = big.slice(ndarray::s![.., .., ..;-1, ..]);
    let k = big.slice(ndarray::s![.., ..;-1, .., ..;-1]);
    let vt = rand4::<f64>([2, 2, 5, 30], 1.0, 801);
    let v = vt.view().permuted_axes([0, 1, 3, 2]);
    let g = rand4::<f64>([2, 2, 30, 5], 1.0, 802);
    for mask in [Mask::causal(), Mask::none().exclude_self()] {
        let args = Attention::new(q, k, v).mask(mask).scale(0.3);
        let out = args.forward().unwrap();
        let want = naive::forward(&args).unwrap();
        assert_close(&out.o, &want.o, 1e-12, 1e-10, "o");
        let got = args.backward(out.view(), g.view(), None).unwrap();
        let want = naive::backward(&args, g.view(), None).unwrap();
        assert_close(&got.dq, &want.dq, 1e-11, 1e-9, "dq");
        assert_close(&got.dk, &want.dk, 1e-11, 1e-9, "dk");
        assert_close(&got.dv, &want.dv, 1e-11, 1e-9, "dv");
    }
}

/// The causal triangle is skipped, not computed and zeroed: the backward under a causal mask
/// (optionally with key padding) gives the same bits as under the same visibility written as
/// a dense mask, which multiplies whole tiles with exact zeros at hidden pairs. Both run on
/// the same forward results; fused and two-pass schedules, one and several tiles, offsets
/// that hide whole rows, every SIMD variant, f32 and f64.
#[test]
fn causal_skipping_gives_the_bits_of_the_dense_mask() {
    fn case<T: Real>(b: usize, h: usize, n: usize, nk: usize, off: isize, isa: Isa) {
        let (d, dv) = (16, 8);
        let q = rand4::<T>([b, h, n, d], 1.0, 70);
        let k = rand4::<T>([b, h, nk, d], 1.0, 71);
        let v = rand4::<T>([b, h, nk, dv], 1.0, 72);
        let g = rand4::<T>([b, h, n, dv], 1.0, 73);
        let gl = rand3::<T>([b, h, n], 1.0, 74);
        let lens: Vec<usize> = (0..b).map(|i| nk - (i * 7) % nk.max(1)).collect();
        for padded in [false, true] {
            let mut causal = Mask::none().causal_offset(off);
            if padded {
                causal = causal.key_lengths(&lens);
            }
            let vis = Array4::from_shape_fn((b, 1, n, nk), |(bb, _, i, j)| {
                j as isize <= i as isize + off && (!padded || j < lens[bb])
            });
            let dense = Mask::none().dense(vis);
            let args = Attention::new(q.view(), k.view(), v.view()).isa(isa);
            let out = args.clone().mask(causal.clone()).forward().unwrap();
            let grads = |m: Mask| {
                args.clone()
                    .mask(m)
                    .backward(out.view(), g.view(), Some(gl.view()))
                    .unwrap()
            };
            let (a, c) = (grads(causal), grads(dense));
            let what = format!(
                "{} {isa:?} b{b} h{h} n{n} nk{nk} off{off} pad{padded}",
                T::NAME
            );
            for (name, x, y) in [
                ("dq", &a.dq, &c.dq),
                ("dk", &a.dk, &c.dk),
                ("dv", &a.dv, &c.dv),
            ] {
                let same = x
                    .iter()
                    .zip(y.iter())
                    .all(|(u, w)| u.to_f64().to_bits() == w.to_f64().to_bits());
                assert!(same, "{what}: {name} differs");
            }
        }
    }
    for isa in Isa::ALL {
        if !isa.is_supported() {
            continue;
        }
        for (n, nk, off) in [
            (50, 50, 0),
            (13, 13, 0),
            (70, 75, 5),
            (150, 150, 0),
            (40, 40, -9),
        ] {
            // Fused (B·H ≥ FUSED_MIN_HEADS) and two-pass schedules.
            for (b, h) in [(4, 2), (1, 2)] {
                case::<f32>(b, h, n, nk, off, isa);
                case::<f64>(b, h, n, nk, off, isa);
            }
        }
    }
}

/// The kernels' outputs come from the engine's cache (`efa_num::pool`): every large one has a
/// size class's capacity, so that a caller who gives it back (the tape does when it drops)
/// has it reused by the next call of the shape instead of allocating anew at every training
/// step (the tile path's outputs were plain allocations, freed when given back). Shapes whose
/// sizes are not class sizes, for the tile path (21 keys) and the lane-batched path (11).
#[test]
fn outputs_come_from_the_engines_cache() {
    use efa_num::pool::{class_bytes, LARGE};
    fn from_cache<D: ndarray::Dimension>(a: ndarray::Array<f32, D>, what: &str) {
        let bytes = a.len() * 4;
        assert!(
            bytes >= LARGE && class_bytes(bytes) != bytes,
            "{what}: pick another shape"
        );
        let (v, _) = a.into_raw_vec_and_offset();
        // The request's class, or a larger class lent by the cache (up to twice the size).
        let cap = v.capacity() * 4;
        assert!(
            class_bytes(cap) == cap && cap >= class_bytes(bytes) && cap <= 2 * class_bytes(bytes),
            "{what}: not a cached buffer ({cap} bytes for {bytes})"
        );
        efa_num::pool::give(v);
    }
    for (b, n) in [(400, 21), (2100, 11)] {
        let q = rand4::<f32>([b, 2, n, 16], 1.0, 900);
        let k = rand4::<f32>([b, 2, n, 16], 1.0, 901);
        let v = rand4::<f32>([b, 2, n, 16], 1.0, 902);
        let g = rand4::<f32>([b, 2, n, 16], 1.0, 903);
        let args = Attention::new(q.view(), k.view(), v.view());
        let out = args.forward().unwrap();
        let grads = args.backward(out.view(), g.view(), None).unwrap();
        let at = format!("{n} keys");
        from_cache(out.o, &format!("{at}: o"));
        from_cache(out.lse, &format!("{at}: lse"));
        from_cache(grads.dq, &format!("{at}: dq"));
        from_cache(grads.dk, &format!("{at}: dk"));
        from_cache(grads.dv, &format!("{at}: dv"));
    }
}
