//! Forward pass against the naive f64 reference over sizes, head dims, masks, types and
//! SIMD variants.

use crate::common;

use common::*;
use efa_attn::{naive, Attention, Isa, Mask, Par, BLOCK_K, BLOCK_Q};
use efa_num::Real;
use ndarray::Array4;

const DIMS: [usize; 6] = [1, 3, 8, 16, 32, 64];

/// (nq, nk) pairs: 0, 1, 2, tile ± 1 for both tile sizes, 3·tile + 5, primes, rectangular.
fn sizes() -> Vec<(usize, usize)> {
    let t = BLOCK_Q;
    vec![
        (0, 0),
        (1, 1),
        (2, 2),
        (t - 1, t - 1),
        (t, t),
        (t + 1, t + 1),
        (BLOCK_K + 1, BLOCK_K + 1),
        (3 * t + 5, 3 * t + 5),
        (13, 13),
        (31, 31),
        (50, 50),
        (7, 19),
        (19, 7),
        (0, 5),
        (5, 0),
    ]
}

/// `[b, h, nq, nk, d, dv]`: batches, heads, queries, keys, and the head widths of the queries
/// and keys and of the values.
fn check_case<T: Real>([b, h, nq, nk, d, dv]: [usize; 6], amp: f64, isa: Isa, seed: u64) {
    let q = rand4::<T>([b, h, nq, d], amp, seed);
    let k = rand4::<T>([b, h, nk, d], amp, seed + 1);
    let v = rand4::<T>([b, h, nk, dv], 1.0, seed + 2);
    let lens = lengths(b, nk);
    let dense = rand_dense(b, nq, nk, seed + 3);
    let scale = 1.0 / (d as f64).sqrt();
    let (atol, rtol) = if T::BYTES == 4 {
        (2e-5 * amp * amp, 2e-4)
    } else {
        (1e-11 * amp * amp, 1e-10)
    };
    for (name, mask) in masks(nq, nk, &lens, &dense) {
        let what = format!(
            "{} {} b{b} h{h} nq{nq} nk{nk} d{d} dv{dv} {name}",
            T::NAME,
            isa.name()
        );
        let args = Attention::new(q.view(), k.view(), v.view())
            .mask(mask)
            .scale(scale)
            .isa(isa);
        let out = args.forward().unwrap();
        // The reference rounds the scale to T as the kernel does.
        let want = naive::forward(&args).unwrap();
        assert_close(&out.o, &want.o, atol, rtol, &format!("{what} o"));
        assert_close(&out.lse, &want.lse, atol, rtol, &format!("{what} lse"));
    }
}

#[test]
fn grid_f64_matches_naive() {
    for (n, &(nq, nk)) in sizes().iter().enumerate() {
        let d = DIMS[n % DIMS.len()];
        check_case::<f64>(
            [2, 2, nq, nk, d, d],
            1.0,
            efa_num::simd::active(),
            n as u64 * 10,
        );
    }
}

#[test]
fn grid_f32_matches_naive() {
    for (n, &(nq, nk)) in sizes().iter().enumerate() {
        let d = DIMS[(n + 3) % DIMS.len()];
        check_case::<f32>(
            [3, 1, nq, nk, d, d],
            1.0,
            efa_num::simd::active(),
            n as u64 * 10 + 5,
        );
    }
}

#[test]
fn every_head_dim_with_value_dim_differing() {
    for (n, &d) in DIMS.iter().enumerate() {
        check_case::<f64>(
            [1, 2, 37, 41, d, 5],
            1.0,
            efa_num::simd::active(),
            100 + n as u64,
        );
        check_case::<f32>(
            [1, 2, 70, 70, d, d],
            1.0,
            efa_num::simd::active(),
            200 + n as u64,
        );
    }
}

#[test]
fn every_simd_variant_forced() {
    for isa in Isa::ALL {
        check_case::<f64>([2, 1, 67, 131, 16, 16], 1.0, isa, 300);
        check_case::<f32>([2, 1, 67, 131, 3, 8], 1.0, isa, 301);
        check_case::<f32>([1, 1, 5, 5, 1, 1], 1.0, isa, 302);
    }
}

/// Short tiles with small heads (row-major accumulator, including a padded copy of `V` and
/// several key tiles), column tails narrower than a vector and the causal column groups, in
/// every SIMD variant and both element types.
#[test]
fn small_heads_every_simd_variant() {
    // (nq, nk, d, dv)
    let cases = [
        (50, 50, 16, 16),
        (50, 300, 16, 16),
        (40, 50, 8, 16),
        (17, 150, 5, 20),
        (24, 24, 16, 16),
        (13, 13, 8, 8),
        (197, 197, 32, 32),
        (9, 40, 4, 4),
    ];
    for isa in Isa::ALL {
        for (n, &(nq, nk, d, dv)) in cases.iter().enumerate() {
            check_case::<f32>([3, 2, nq, nk, d, dv], 1.0, isa, 500 + n as u64);
            check_case::<f64>([2, 1, nq, nk, d, dv], 1.0, isa, 600 + n as u64);
        }
    }
}

#[test]
fn small_heads_strided_views() {
    // Row-major accumulator with V read through a transposed view (padded copy).
    let big = rand4::<f32>([2, 4, 50, 16], 1.0, 810);
    let q = big.slice(ndarray::s![.., ..;2, .., ..]);
    let k = big.slice(ndarray::s![.., 1..;2, .., ..]);
    let vt = rand4::<f32>([2, 2, 16, 50], 1.0, 811);
    let v = vt.view().permuted_axes([0, 1, 3, 2]);
    for mask in [Mask::none(), Mask::causal()] {
        let args = Attention::new(q, k, v).mask(mask).scale(0.3);
        let (out, want) = (args.forward().unwrap(), naive::forward(&args).unwrap());
        assert_close(&out.o, &want.o, 2e-5, 2e-4, "o");
        assert_close(&out.lse, &want.lse, 2e-5, 2e-4, "lse");
    }
}

#[test]
fn large_score_magnitudes() {
    // |s| ≈ 1e3: q, k entries ≈ 30 with d = 8 and scale 1/√8 give scores in the hundreds to
    // thousands; the online softmax must not overflow and must match the reference.
    check_case::<f64>([1, 2, 65, 130, 8, 8], 30.0, efa_num::simd::active(), 400);
    let q = Array4::<f64>::from_elem((1, 1, 3, 1), 1.0);
    let mut k = Array4::<f64>::zeros((1, 1, 4, 1));
    k[[0, 0, 0, 0]] = 1000.0;
    k[[0, 0, 1, 0]] = 999.0;
    k[[0, 0, 2, 0]] = -1000.0;
    k[[0, 0, 3, 0]] = 1000.0;
    let v = Array4::<f64>::from_shape_fn((1, 1, 4, 1), |(_, _, j, _)| j as f64);
    let args = Attention::new(q.view(), k.view(), v.view())
        .scale(1.0)
        .par(Par::Sequential);
    let (out, want) = (args.forward().unwrap(), naive::forward(&args).unwrap());
    assert_close(&out.o, &want.o, 1e-12, 1e-12, "o");
    assert_close(&out.lse, &want.lse, 1e-12, 1e-12, "lse");
    assert!((out.lse[[0, 0, 0]] - (1000.0 + (2.0 + (-1.0f64).exp()).ln())).abs() < 1e-12);
}

#[test]
fn f32_agrees_with_f64() {
    let (b, h, n, d) = (2, 2, 150, 16);
    let q = rand4::<f64>([b, h, n, d], 1.0, 500);
    let k = rand4::<f64>([b, h, n, d], 1.0, 501);
    let v = rand4::<f64>([b, h, n, d], 1.0, 502);
    let (q32, k32, v32) = (
        q.mapv(|x| x as f32),
        k.mapv(|x| x as f32),
        v.mapv(|x| x as f32),
    );
    let (q64, k64, v64) = (
        q32.mapv(|x| x as f64),
        k32.mapv(|x| x as f64),
        v32.mapv(|x| x as f64),
    );
    let r64 = Attention::new(q64.view(), k64.view(), v64.view())
        .mask(Mask::causal())
        .scale(0.25)
        .forward()
        .unwrap();
    let r32 = Attention::new(q32.view(), k32.view(), v32.view())
        .mask(Mask::causal())
        .scale(0.25)
        .forward()
        .unwrap();
    assert_close(&r32.o, &r64.o, 1e-5, 1e-4, "o f32 vs f64");
    assert_close(&r32.lse, &r64.lse, 1e-5, 1e-5, "lse f32 vs f64");
}

#[test]
fn rectangular_causal_offsets() {
    for &(nq, nk, off) in &[
        (10, 30, 20isize),
        (30, 10, -5),
        (70, 200, 130),
        (129, 64, 0),
        (5, 5, -10),
        (9, 300, 1),
    ] {
        let q = rand4::<f64>([1, 2, nq, 4], 1.0, 600);
        let k = rand4::<f64>([1, 2, nk, 4], 1.0, 601);
        let v = rand4::<f64>([1, 2, nk, 3], 1.0, 602);
        for mask in [
            Mask::none().causal_offset(off),
            Mask::none().causal_offset(off).exclude_self(),
        ] {
            let args = Attention::new(q.view(), k.view(), v.view())
                .mask(mask)
                .scale(0.5);
            let (out, want) = (args.forward().unwrap(), naive::forward(&args).unwrap());
            assert_close(
                &out.o,
                &want.o,
                1e-12,
                1e-10,
                &format!("o nq{nq} nk{nk} off{off}"),
            );
            assert_close(
                &out.lse,
                &want.lse,
                1e-12,
                1e-10,
                &format!("lse nq{nq} nk{nk} off{off}"),
            );
        }
    }
}

#[test]
fn fully_masked_rows_give_zero_and_neg_infinity() {
    let q = rand4::<f32>([3, 1, 6, 4], 1.0, 700);
    let k = rand4::<f32>([3, 1, 6, 4], 1.0, 701);
    let v = rand4::<f32>([3, 1, 6, 4], 1.0, 702);
    let args = Attention::new(q.view(), k.view(), v.view()).scale(1.0);
    let out = args
        .clone()
        .mask(Mask::none().key_lengths([6, 0, 3]))
        .forward()
        .unwrap();
    let (o, lse) = (&out.o, &out.lse);
    assert!(o.index_axis(ndarray::Axis(0), 1).iter().all(|&x| x == 0.0));
    assert!(lse
        .index_axis(ndarray::Axis(0), 1)
        .iter()
        .all(|&x| x == f32::NEG_INFINITY));
    // Causal with a negative offset: the first rows see nothing.
    let out = args
        .clone()
        .mask(Mask::none().causal_offset(-2))
        .forward()
        .unwrap();
    let (o, lse) = (&out.o, &out.lse);
    for b in 0..3 {
        for i in 0..2 {
            assert_eq!(lse[[b, 0, i]], f32::NEG_INFINITY);
            assert!((0..4).all(|c| o[[b, 0, i, c]] == 0.0));
        }
        assert!(lse[[b, 0, 2]].is_finite());
    }
    // Exclude-self on a single key: nothing visible.
    let first = ndarray::s![.., .., ..1, ..];
    let out = Attention::new(q.slice(first), k.slice(first), v.slice(first))
        .mask(Mask::none().exclude_self())
        .forward()
        .unwrap();
    assert!(out.lse.iter().all(|&x| x == f32::NEG_INFINITY) && out.o.iter().all(|&x| x == 0.0));
}

#[test]
fn strided_views_are_accepted() {
    let big = rand4::<f64>([2, 4, 40, 8], 1.0, 800);
    let q = big.slice(ndarray::s![.., ..;2, .., ..]);
    let k = big.slice(ndarray::s![.., 1..;2, .., ..]);
    let vt = rand4::<f64>([2, 2, 8, 40], 1.0, 801);
    let v = vt.view().permuted_axes([0, 1, 3, 2]);
    let args = Attention::new(q, k, v).mask(Mask::causal()).scale(0.3);
    let (out, want) = (args.forward().unwrap(), naive::forward(&args).unwrap());
    assert_close(&out.o, &want.o, 1e-12, 1e-10, "o");
    assert_close(&out.lse, &want.lse, 1e-12, 1e-10, "lse");
}

#[test]
fn errors_name_tensor_shape_and_index() {
    let q = Array4::<f64>::zeros((2, 1, 3, 4));
    let k = Array4::<f64>::zeros((2, 1, 5, 3));
    let v = Array4::<f64>::zeros((2, 1, 5, 2));
    let e = Attention::new(q.view(), k.view(), v.view())
        .forward()
        .unwrap_err();
    assert_eq!(e.tensor, "k");
    assert_eq!(e.shape, vec![2, 1, 5, 3]);
    let k = Array4::<f64>::zeros((2, 1, 5, 4));
    let args = Attention::new(q.view(), k.view(), v.view());
    let with = |m: Mask| args.clone().mask(m);
    // A key length beyond Nk = 5 at batch row 1: field, shape and row named, by the kernel
    // and by the reference alike.
    let bad = with(Mask::none().key_lengths([5, 6]));
    for e in [
        bad.forward().unwrap_err(),
        naive::forward(&bad).unwrap_err(),
    ] {
        assert_eq!((e.tensor, e.shape.clone()), ("mask.key_lengths", vec![2]));
        assert!(e.to_string().contains("6 at batch row [1]"), "{e}");
    }
    let e = with(Mask::causal().key_lengths([5])).forward().unwrap_err();
    assert_eq!(e.tensor, "mask.key_lengths");
    let dense = Array4::from_elem((2, 1, 3, 4), true);
    let e = with(Mask::none().dense(dense)).forward().unwrap_err();
    assert_eq!(
        (e.tensor, e.shape.clone()),
        ("mask.dense", vec![2, 1, 3, 4])
    );
    let e = args.clone().scale(f64::NAN).forward().unwrap_err();
    assert_eq!(e.tensor, "scale");
    // Finite in f64 but not in f32.
    let q32 = q.mapv(|x| x as f32);
    let k32 = k.mapv(|x| x as f32);
    let v32 = v.mapv(|x| x as f32);
    let e = Attention::new(q32.view(), k32.view(), v32.view())
        .scale(1e300)
        .forward()
        .unwrap_err();
    assert_eq!(e.tensor, "scale");
    assert!(e.message.contains("f32"), "{e}");
}

/// The default scale is 1/√D (D = 4 here: exactly 0.5), bit for bit the explicit one; the
/// default scheduling and SIMD variant give the same bits as explicit ones.
#[test]
fn defaults_are_inverse_sqrt_dim_rayon_and_active_isa() {
    let q = rand4::<f32>([2, 2, 9, 4], 1.0, 950);
    let k = rand4::<f32>([2, 2, 11, 4], 1.0, 951);
    let v = rand4::<f32>([2, 2, 11, 3], 1.0, 952);
    let args = Attention::new(q.view(), k.view(), v.view()).mask(Mask::causal());
    assert_eq!((args.scale_for(4), args.par), (0.5, Par::Rayon));
    let explicit = args
        .clone()
        .scale(0.5)
        .par(Par::Sequential)
        .isa(efa_num::simd::active());
    assert_eq!(args.forward().unwrap(), explicit.forward().unwrap());
    // An explicit different scale changes the result.
    assert_ne!(
        args.forward().unwrap().lse,
        args.clone().scale(0.25).forward().unwrap().lse
    );
}

/// FLOPs `2·(D + Dv)` per visible pair: 4·B·H·N²·D unmasked, N(N+1)/2 pairs causal.
#[test]
fn forward_flops_count_visible_pairs() {
    let (b, h, n, d) = (3, 2, 7, 4);
    let q = Array4::<f32>::zeros((b, h, n, d));
    let v = Array4::<f32>::zeros((b, h, n, 5));
    let args = Attention::new(q.view(), q.view(), v.view());
    assert_eq!(
        args.forward_flops().unwrap(),
        (b * h * n * n * 2 * 9) as u64
    );
    let causal = args.clone().mask(Mask::causal());
    assert_eq!(
        causal.forward_flops().unwrap(),
        (b * h * (n * (n + 1) / 2) * 2 * 9) as u64
    );
    // Key lengths 7, 2, 0: 7·7 + 7·2 + 0 pairs per head.
    let padded = args.mask(Mask::none().key_lengths([7, 2, 0]));
    assert_eq!(padded.forward_flops().unwrap(), ((49 + 14) * h * 18) as u64);
}

#[test]
fn deterministic_across_thread_counts() {
    let q = rand4::<f32>([2, 3, 200, 16], 1.0, 900);
    let k = rand4::<f32>([2, 3, 200, 16], 1.0, 901);
    let v = rand4::<f32>([2, 3, 200, 16], 1.0, 902);
    let args = Attention::new(q.view(), k.view(), v.view())
        .mask(Mask::causal())
        .scale(0.25);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| args.forward().unwrap())
    };
    let r1 = run(1);
    let seq = args.clone().par(Par::Sequential).forward().unwrap();
    for r in [run(2), run(3), seq] {
        assert!(r1
            .o
            .iter()
            .zip(r.o.iter())
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        assert!(r1
            .lse
            .iter()
            .zip(r.lse.iter())
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

#[test]
fn negative_and_zero_scales_with_every_mask() {
    let (b, h, n, d) = (2, 1, 21, 4);
    let q = rand4::<f64>([b, h, n, d], 1.0, 1000);
    let k = rand4::<f64>([b, h, n, d], 1.0, 1001);
    let v = rand4::<f64>([b, h, n, d], 1.0, 1002);
    let lens = lengths(b, n);
    let dense = rand_dense(b, n, n, 1003);
    for scale in [-0.7, 0.0] {
        for (name, mask) in masks(n, n, &lens, &dense) {
            let args = Attention::new(q.view(), k.view(), v.view())
                .mask(mask)
                .scale(scale);
            let (out, want) = (args.forward().unwrap(), naive::forward(&args).unwrap());
            assert_close(
                &out.o,
                &want.o,
                1e-12,
                1e-10,
                &format!("o scale {scale} {name}"),
            );
            assert_close(
                &out.lse,
                &want.lse,
                1e-12,
                1e-10,
                &format!("lse scale {scale} {name}"),
            );
        }
    }
}

/// Causal offsets at the ends of `isize`: `isize::MAX` shows every key (bitwise the unmasked
/// result), `isize::MIN` none (o = 0, lse = −∞); `i + offset + 1` must not overflow.
#[test]
fn extreme_causal_offsets_saturate() {
    let q = rand4::<f64>([2, 1, 5, 3], 1.0, 1100);
    let k = rand4::<f64>([2, 1, 7, 3], 1.0, 1101);
    let v = rand4::<f64>([2, 1, 7, 2], 1.0, 1102);
    let g = rand4::<f64>([2, 1, 5, 2], 1.0, 1103);
    let args = Attention::new(q.view(), k.view(), v.view());
    let all = args.forward().unwrap();
    let wide = args.clone().mask(Mask::none().causal_offset(isize::MAX));
    let out = wide.forward().unwrap();
    assert_eq!(out, all);
    assert_eq!(
        wide.backward(out.view(), g.view(), None).unwrap(),
        args.backward(all.view(), g.view(), None).unwrap()
    );
    let none = args.clone().mask(Mask::none().causal_offset(isize::MIN));
    let out = none.forward().unwrap();
    assert!(out.lse.iter().all(|&x| x == f64::NEG_INFINITY) && out.o.iter().all(|&x| x == 0.0));
    let gr = none.backward(out.view(), g.view(), None).unwrap();
    assert!([&gr.dq, &gr.dk, &gr.dv]
        .iter()
        .all(|x| x.iter().all(|&v| v == 0.0)));
}

/// The prefix rules (causal, key lengths) skip hidden keys: the score product runs by bands of
/// key rows over the columns from the first group that sees them. An equal dense mask
/// computes every score and sets the hidden ones to −∞. Both give the same bits: row-major and
/// transposed accumulators (`dv` 16 and 4), one and several key tiles, two query tiles,
/// offsets that hide whole rows, every SIMD variant, f32 and f64.
#[test]
fn prefix_masks_give_the_bits_of_the_dense_mask() {
    fn case<T: Real>(nq: usize, nk: usize, dv: usize, off: Option<isize>, isa: Isa) {
        let (b, h, d) = (3, 2, 16);
        let q = rand4::<T>([b, h, nq, d], 1.5, 80);
        let k = rand4::<T>([b, h, nk, d], 1.5, 81);
        let v = rand4::<T>([b, h, nk, dv], 1.0, 82);
        let lens: Vec<usize> = (0..b).map(|i| [nk, nk / 2 + 1, 1][i % 3]).collect();
        for padded in [false, true] {
            let mut prefix = Mask::none();
            if let Some(o) = off {
                prefix = prefix.causal_offset(o);
            }
            if padded {
                prefix = prefix.key_lengths(&lens);
            }
            let vis = Array4::from_shape_fn((b, 1, nq, nk), |(bb, _, i, j)| {
                off.is_none_or(|o| j as isize <= i as isize + o) && (!padded || j < lens[bb])
            });
            let args = Attention::new(q.view(), k.view(), v.view()).isa(isa);
            let a = args.clone().mask(prefix).forward().unwrap();
            let c = args.mask(Mask::none().dense(vis)).forward().unwrap();
            let what = format!(
                "{} {isa:?} nq{nq} nk{nk} dv{dv} off{off:?} pad{padded}",
                T::NAME
            );
            let bits = |x: &T| x.to_f64().to_bits();
            assert!(
                a.o.iter().map(bits).eq(c.o.iter().map(bits)),
                "{what}: o differs"
            );
            assert!(
                a.lse.iter().map(bits).eq(c.lse.iter().map(bits)),
                "{what}: lse differs"
            );
        }
    }
    for isa in Isa::ALL {
        if !isa.is_supported() {
            continue;
        }
        for (nq, nk, off) in [
            (50, 50, Some(0)),
            (50, 50, None),
            (49, 49, Some(0)),
            (18, 18, Some(0)),
            (3, 3, Some(0)),
            (2, 7, Some(5)),
            (50, 150, Some(100)),
            (52, 300, None),
            (114, 114, Some(0)),
            (50, 50, Some(-7)),
        ] {
            for dv in [16, 4] {
                case::<f32>(nq, nk, dv, off, isa);
                case::<f64>(nq, nk, dv, off, isa);
            }
        }
    }
}
