//! The lane-batched path against the tile kernel, bit for bit.

use super::{applies, DISABLED, MAX_CAUSAL_KEYS, MAX_KEYS};
use crate::problem::Problem;
use crate::{Attention, Isa, Mask, Par};
use efa_num::Real;
use ndarray::{s, Array3, Array4, ArrayView4, Dimension};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn rand4<T: Real>(shape: [usize; 4], amp: f64, rng: &mut StdRng) -> Array4<T> {
    Array4::from_shape_fn(shape, |_| T::from_f64(rng.random_range(-amp..amp)))
}

/// Runs `f` with the lane-batched path off (the tile kernel).
fn tiles<R>(f: impl FnOnce() -> R) -> R {
    DISABLED.with(|d| d.set(true));
    let r = f();
    DISABLED.with(|d| d.set(false));
    r
}

fn same_bits<T: Real, D: Dimension>(
    a: &ndarray::Array<T, D>,
    b: &ndarray::Array<T, D>,
    what: &str,
) {
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
        let (x, y) = (x.to_f64(), y.to_f64());
        assert!(
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
            "{what}: element {i}: {x:e} (lanes) vs {y:e} (tiles)"
        );
    }
}

/// One problem on both paths: outputs, log-normalisers and the three gradients (with and
/// without a `d_lse` cotangent) must carry the same bits.
fn case<T: Real>(args: &Attention<ArrayView4<T>>, seed: u64, what: &str) {
    let p = Problem::new(args).unwrap();
    assert!(applies(&p), "{what}: the lane path should apply");
    let fast = args.forward().unwrap();
    let slow = tiles(|| args.forward().unwrap());
    same_bits(&fast.o, &slow.o, &format!("{what} o"));
    same_bits(&fast.lse, &slow.lse, &format!("{what} lse"));
    let mut rng = StdRng::seed_from_u64(seed);
    let g = rand4::<T>([p.batch, p.heads, p.nq, p.dv], 1.0, &mut rng);
    let gl = Array3::from_shape_fn((p.batch, p.heads, p.nq), |_| {
        T::from_f64(rng.random_range(-1.0..1.0))
    });
    for dl in [None, Some(gl.view())] {
        let a = args.backward(fast.view(), g.view(), dl).unwrap();
        let b = tiles(|| args.backward(slow.view(), g.view(), dl).unwrap());
        let w = format!("{what} d_lse={}", dl.is_some());
        same_bits(&a.dq, &b.dq, &format!("{w} dq"));
        same_bits(&a.dk, &b.dk, &format!("{w} dk"));
        same_bits(&a.dv, &b.dv, &format!("{w} dv"));
    }
}

fn grid<T: Real>(isa: Isa) {
    let mut rng = StdRng::seed_from_u64(7);
    // (B, H, Nq, Nk, D, Dv): the synthetic model's shapes (one query and all five), widths
    // around the vector lengths, one key, a full group of keys, the fewest heads, several
    // groups with a partial last one, the most queries, and empty head widths and key sets;
    // then causal only: the attention bench's short shape, the most queries and keys, more
    // keys than queries and fewer.
    let shapes = [
        (64, 2, 5, 5, 16, 16),
        (64, 2, 1, 5, 16, 16),
        (9, 3, 7, 16, 7, 3),
        (16, 1, 3, 1, 1, 1),
        (6, 3, 4, 9, 33, 17),
        (40, 1, 2, 12, 8, 24),
        (8, 2, crate::BLOCK_Q, 5, 16, 16),
        (16, 1, 3, 4, 0, 5),
        (16, 1, 3, 4, 5, 0),
        (16, 1, 3, 0, 5, 5),
        (17, 2, 50, 50, 16, 16),
        (16, 1, crate::BLOCK_Q, MAX_CAUSAL_KEYS, 8, 9),
        (20, 1, 33, 40, 5, 7),
        (8, 2, 20, 17, 16, 16),
    ];
    for (n, &(b, h, nq, nk, d, dv)) in shapes.iter().enumerate() {
        let q = rand4::<T>([b, h, nq, d], 2.0, &mut rng);
        let k = rand4::<T>([b, h, nk, d], 2.0, &mut rng);
        let v = rand4::<T>([b, h, nk, dv], 1.0, &mut rng);
        let lens: Vec<usize> = (0..b).map(|i| (i * 7 + n) % (nk + 1)).collect();
        let causal = [
            ("causal", Mask::causal()),
            ("causal lengths", Mask::causal().key_lengths(lens.clone())),
            ("causal -3", Mask::causal().causal_offset(-3)),
            (
                "causal +4 lengths",
                Mask::causal().causal_offset(4).key_lengths(lens.clone()),
            ),
        ];
        let uniform = [
            ("none", Mask::none()),
            ("lengths", Mask::none().key_lengths(lens.clone())),
        ];
        let masks = if nk <= MAX_KEYS {
            uniform.iter().chain(&causal)
        } else {
            [].iter().chain(&causal)
        };
        for (mname, mask) in masks {
            for (scale, par) in [(None, Par::Rayon), (Some(-0.7), Par::Sequential)] {
                let mut args = Attention::new(q.view(), k.view(), v.view())
                    .mask(mask.clone())
                    .isa(isa)
                    .par(par);
                if let Some(s) = scale {
                    args = args.scale(s);
                }
                let what = format!(
                    "{} {} b{b} h{h} nq{nq} nk{nk} d{d} dv{dv} {mname} scale {scale:?}",
                    T::NAME,
                    isa.name()
                );
                case(&args, n as u64, &what);
            }
        }
    }
}

#[test]
fn lanes_give_the_bits_of_the_tile_kernel_on_every_variant() {
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        if !isa.is_supported() {
            continue;
        }
        grid::<f32>(isa);
        grid::<f64>(isa);
    }
}

/// The tape op's layout (`[B, N, H, K]` read as `[B, H, N, K]` through strides), large
/// scores (exponentials that underflow), and special values: a NaN query element and an
/// infinite key element in two heads, a row of −∞ scores.
#[test]
fn strided_inputs_and_special_values_keep_the_bits() {
    let mut rng = StdRng::seed_from_u64(11);
    let (b, h, n, d) = (20, 2, 5, 16);
    let q = rand4::<f32>([b, n, h, d], 30.0, &mut rng);
    let mut k = rand4::<f32>([b, n, h, d], 30.0, &mut rng);
    let v = rand4::<f32>([b, n, h, d], 1.0, &mut rng);
    let mut q2 = q.clone();
    q2[[3, 1, 0, 4]] = f32::NAN;
    k[[6, 2, 1, 0]] = f32::INFINITY;
    // Batch row 9: keys −∞·q in every score of head 0 (q = +∞ at one element, keys negative).
    for j in 0..n {
        k[[9, j, 0, 0]] = -1.0;
    }
    q2[[9, 0, 0, 0]] = f32::INFINITY;
    let mut v2 = v.clone();
    v2[[12, 3, 1, 5]] = f32::NAN;
    let perm = |x: &Array4<f32>| x.clone().permuted_axes([0, 2, 1, 3]);
    let (qp, kp, vp) = (perm(&q2), perm(&k), perm(&v2));
    let lens: Vec<usize> = (0..b).map(|i| 1 + i % n).collect();
    let rev: Vec<usize> = lens.iter().rev().copied().collect();
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        let args = Attention::new(qp.view(), kp.view(), vp.view())
            .mask(Mask::none().key_lengths(lens.clone()))
            .isa(isa);
        case(&args, 3, &format!("strided {}", isa.name()));
        // Negative strides: batch rows and head widths reversed.
        let flip = |x: &Array4<f32>| x.slice(s![..;-1, .., .., ..;-1]).to_owned();
        let (qf, kf, vf) = (flip(&qp), flip(&kp), flip(&vp));
        let (qn, kn, vn) = (
            qp.slice(s![..;-1, .., .., ..;-1]),
            kp.slice(s![..;-1, .., .., ..;-1]),
            vp.slice(s![..;-1, .., .., ..;-1]),
        );
        let args = Attention::new(qn, kn, vn)
            .mask(Mask::none().key_lengths(rev.clone()))
            .isa(isa);
        case(&args, 4, &format!("negative strides {}", isa.name()));
        // The same values contiguous give the same bits.
        let contiguous = Attention::new(qf.view(), kf.view(), vf.view())
            .mask(Mask::none().key_lengths(rev.clone()))
            .isa(isa);
        same_bits(
            &args.forward().unwrap().o,
            &contiguous.forward().unwrap().o,
            "negative strides against a contiguous copy",
        );
    }
}

/// The same problem on pools of 1, 2 and 3 threads, and sequentially: the same bits.
#[test]
fn thread_count_does_not_change_the_bits() {
    let mut rng = StdRng::seed_from_u64(5);
    let (b, h, n, d) = (150, 2, 5, 16);
    let q = rand4::<f32>([b, h, n, d], 2.0, &mut rng);
    let k = rand4::<f32>([b, h, n, d], 2.0, &mut rng);
    let v = rand4::<f32>([b, h, n, d], 1.0, &mut rng);
    let g = rand4::<f32>([b, h, n, d], 1.0, &mut rng);
    let lens: Vec<usize> = (0..b).map(|i| (i * 3) % (n + 1)).collect();
    let args = Attention::new(q.view(), k.view(), v.view()).mask(Mask::none().key_lengths(lens));
    let run = |a: &Attention<ArrayView4<f32>>| {
        let out = a.forward().unwrap();
        let gr = a.backward(out.view(), g.view(), None).unwrap();
        (out, gr)
    };
    let (o0, g0) = run(&args.clone().par(Par::Sequential));
    for threads in [1, 2, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let (o, gr) = pool.install(|| run(&args));
        let w = format!("{threads} threads");
        same_bits(&o.o, &o0.o, &format!("{w} o"));
        same_bits(&o.lse, &o0.lse, &format!("{w} lse"));
        same_bits(&gr.dq, &g0.dq, &format!("{w} dq"));
        same_bits(&gr.dk, &g0.dk, &format!("{w} dk"));
        same_bits(&gr.dv, &g0.dv, &format!("{w} dv"));
    }
}

#[test]
fn the_path_applies_only_to_short_prefix_masks() {
    let mut rng = StdRng::seed_from_u64(1);
    let x = rand4::<f64>([8, 2, 4, 3], 1.0, &mut rng);
    let long = rand4::<f64>([8, 2, MAX_KEYS + 1, 3], 1.0, &mut rng);
    let many = rand4::<f64>([8, 2, crate::BLOCK_Q + 1, 3], 1.0, &mut rng);
    let few = rand4::<f64>([5, 3, 4, 3], 1.0, &mut rng);
    let yes = |a: &Attention<ArrayView4<f64>>| applies(&Problem::new(a).unwrap());
    assert!(yes(&Attention::new(x.view(), x.view(), x.view())));
    assert!(yes(&Attention::new(x.view(), x.view(), x.view())
        .mask(Mask::none().key_lengths([4, 0, 1, 2, 3, 4, 0, 1]))));
    assert!(!yes(&Attention::new(many.view(), x.view(), x.view())));
    assert!(!yes(&Attention::new(few.view(), few.view(), few.view())));
    assert!(yes(
        &Attention::new(x.view(), x.view(), x.view()).mask(Mask::causal())
    ));
    let causal_long = rand4::<f64>([8, 2, MAX_CAUSAL_KEYS, 3], 1.0, &mut rng);
    let causal_longer = rand4::<f64>([8, 2, MAX_CAUSAL_KEYS + 1, 3], 1.0, &mut rng);
    for (k, fits) in [(&causal_long, true), (&causal_longer, false)] {
        let args = Attention::new(x.view(), k.view(), k.view()).mask(Mask::causal());
        assert_eq!(yes(&args), fits);
    }
    assert!(!yes(&Attention::new(
        x.view(),
        causal_long.view(),
        causal_long.view()
    )));
    assert!(!yes(
        &Attention::new(x.view(), x.view(), x.view()).mask(Mask::none().exclude_self())
    ));
    assert!(!yes(&Attention::new(x.view(), long.view(), long.view())));
}

/// Probabilities in the subnormal range, where the vector widths' exponentials round
/// differently (AVX-512 scales by 2ⁿ in one rounding, narrower vectors in two): the outputs
/// of heads whose largest-score key has value 0 are sums of subnormal products only. Query
/// counts put rows in the tile kernel's full and narrow column blocks; unmasked and causal.
#[test]
fn subnormal_probabilities_keep_the_bits() {
    fn run<T: Real>(far: f64) {
        for nq in [5, 16, 20, 27] {
            let (b, h, nk, d) = (12, 2, 6, 16);
            let scale = 0.25;
            let q = Array4::from_shape_fn((b, h, nq, d), |(_, _, i, c)| {
                T::from_f64(if c == 0 { 10.0 + 0.01 * i as f64 } else { 0.0 })
            });
            // Key 0 scores 0; key j scores about −(far + j + 0.37·b) (below e^far: subnormal).
            let k = Array4::from_shape_fn((b, h, nk, d), |(bb, _, j, c)| {
                let s = if j == 0 {
                    0.0
                } else {
                    -(far + j as f64 + 0.37 * bb as f64)
                };
                T::from_f64(if c == 0 { s / (10.0 * scale) } else { 0.0 })
            });
            let v = Array4::from_shape_fn((b, h, nk, d), |(_, hh, j, c)| {
                T::from_f64(if j == 0 {
                    0.0
                } else {
                    1.0 + 0.1 * (c + hh) as f64
                })
            });
            for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
                for (mname, mask) in [("none", Mask::none()), ("causal", Mask::causal())] {
                    let args = Attention::new(q.view(), k.view(), v.view())
                        .mask(mask)
                        .scale(scale)
                        .isa(isa);
                    case(
                        &args,
                        5,
                        &format!("subnormal {} {} nq{nq} {mname}", T::NAME, isa.name()),
                    );
                }
            }
        }
    }
    run::<f32>(88.0);
    run::<f64>(709.0);
}

/// Causal masks with non-finite inputs (a NaN value element, an infinite key element, a NaN
/// query element, each in its own head): the forward rows that cannot see the key holding the
/// special value keep the bits of the same problem with that value made finite (a hidden key
/// never reaches them), and the rows that see it keep the tile kernel's bits. In the backward
/// the lane path carries NaN to no element the tile kernel leaves finite, and every element the
/// tile kernel has finite carries its bits.
#[test]
fn causal_special_values_reach_only_the_rows_that_see_them() {
    let mut rng = StdRng::seed_from_u64(13);
    let (b, h, n, d) = (10, 2, 30, 16);
    let q = rand4::<f32>([b, h, n, d], 2.0, &mut rng);
    let k = rand4::<f32>([b, h, n, d], 2.0, &mut rng);
    let v = rand4::<f32>([b, h, n, d], 1.0, &mut rng);
    let g = rand4::<f32>([b, h, n, d], 1.0, &mut rng);
    // (tensor, batch row, head, row, column, value): the key row of `k`/`v` or query row of `q`.
    let specials = [
        ("v", 3, 1, 7, 2, f32::NAN),
        ("k", 5, 0, 12, 0, f32::INFINITY),
        ("q", 8, 1, 20, 3, f32::NAN),
    ];
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        for &(t, bb, hh, r, c, x) in &specials {
            let (mut qs, mut ks, mut vs) = (q.clone(), k.clone(), v.clone());
            match t {
                "q" => qs[[bb, hh, r, c]] = x,
                "k" => ks[[bb, hh, r, c]] = x,
                _ => vs[[bb, hh, r, c]] = x,
            }
            let what = format!("{} {t}[{bb},{hh},{r},{c}] = {x}", isa.name());
            let args = Attention::new(qs.view(), ks.view(), vs.view())
                .mask(Mask::causal())
                .isa(isa);
            let clean = Attention::new(q.view(), k.view(), v.view())
                .mask(Mask::causal())
                .isa(isa);
            assert!(applies(&Problem::new(&args).unwrap()), "{what}");
            let fast = args.forward().unwrap();
            let slow = tiles(|| args.forward().unwrap());
            let base = clean.forward().unwrap();
            // Query row i sees keys 0..=i: a key row r reaches rows i ≥ r, a query row itself.
            let sees = |i: usize| if t == "q" { i == r } else { i >= r };
            let mut reached = 0;
            for ((bi, hi, i, e), &o) in fast.o.indexed_iter() {
                let want = if (bi, hi) == (bb, hh) && sees(i) {
                    slow.o[[bi, hi, i, e]]
                } else {
                    base.o[[bi, hi, i, e]]
                };
                reached += usize::from(o.is_nan());
                assert!(
                    o.to_bits() == want.to_bits() || (o.is_nan() && want.is_nan()),
                    "{what}: o[{bi},{hi},{i},{e}] = {o:e}, want {want:e}"
                );
            }
            assert!(reached > 0, "{what}: the special value reached no output");
            let a = args.backward(fast.view(), g.view(), None).unwrap();
            let s = tiles(|| args.backward(slow.view(), g.view(), None).unwrap());
            for (name, x, y) in [
                ("dq", &a.dq, &s.dq),
                ("dk", &a.dk, &s.dk),
                ("dv", &a.dv, &s.dv),
            ] {
                for (i, (&x, &y)) in x.iter().zip(y.iter()).enumerate() {
                    assert!(
                        x.to_bits() == y.to_bits() || y.is_nan(),
                        "{what}: {name} element {i}: {x:e} (lanes) vs {y:e} (tiles)"
                    );
                    assert!(
                        !x.is_nan() || y.is_nan(),
                        "{what}: {name} element {i}: NaN only in lanes"
                    );
                }
            }
        }
    }
}

/// A job reuses the scratch a previous job of the same shape left on its thread: a problem run
/// after an unmasked one full of non-finite values (whose scratch then holds NaN and ∞ in
/// every slot) gives the bits it gives on a thread with no spare scratch, forward and
/// backward, causal and not.
#[test]
fn reused_scratch_keeps_the_bits() {
    let mut rng = StdRng::seed_from_u64(17);
    let shape = [20, 2, 12, 16];
    let (q, k, v, g) = (
        rand4::<f32>(shape, 2.0, &mut rng),
        rand4::<f32>(shape, 2.0, &mut rng),
        rand4::<f32>(shape, 1.0, &mut rng),
        rand4::<f32>(shape, 1.0, &mut rng),
    );
    let junk = Array4::from_shape_fn(shape, |(b, h, i, c)| match (b + h + i + c) % 3 {
        0 => f32::NAN,
        1 => f32::INFINITY,
        _ => -3e38,
    });
    for mask in [Mask::none(), Mask::causal()] {
        let run = |before: Option<&Array4<f32>>| {
            if let Some(x) = before {
                // Unmasked: every score, probability and gradient slot of the scratch written.
                let args = Attention::new(x.view(), x.view(), x.view()).par(Par::Sequential);
                let out = args.forward().unwrap();
                let _ = args.backward(out.view(), x.view(), None).unwrap();
            }
            let args = Attention::new(q.view(), k.view(), v.view())
                .mask(mask.clone())
                .par(Par::Sequential);
            let out = args.forward().unwrap();
            let gr = args.backward(out.view(), g.view(), None).unwrap();
            (out, gr)
        };
        let (fresh, reused) = std::thread::scope(|s| {
            let a = s.spawn(|| run(None)).join().unwrap();
            let b = s.spawn(|| run(Some(&junk))).join().unwrap();
            (a, b)
        });
        same_bits(
            &reused.0.o,
            &fresh.0.o,
            "reused (left) vs fresh (right) scratch: o",
        );
        same_bits(
            &reused.0.lse,
            &fresh.0.lse,
            "reused (left) vs fresh (right) scratch: lse",
        );
        same_bits(
            &reused.1.dq,
            &fresh.1.dq,
            "reused (left) vs fresh (right) scratch: dq",
        );
        same_bits(
            &reused.1.dk,
            &fresh.1.dk,
            "reused (left) vs fresh (right) scratch: dk",
        );
        same_bits(
            &reused.1.dv,
            &fresh.1.dv,
            "reused (left) vs fresh (right) scratch: dv",
        );
    }
}
