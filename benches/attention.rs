//! Fused attention throughput (criterion): forward and forward+backward in GFLOP/s, counted
//! as FLOPs through `Throughput::Elements` (forward 4·B·H·N²·D, causal the useful half;
//! forward+backward 3.5× that), beside the naive f64 kernel on small shapes and a
//! matrixmultiply sgemm 2048³ ceiling measured in the same run.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use efa_attn::{naive, Attention, Mask};
use ndarray::Array4;
use std::hint::black_box;
use std::time::Duration;

#[path = "common/ceiling.rs"]
mod ceiling;

fn filled(shape: [usize; 4], seed: u64) -> Array4<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    Array4::from_shape_fn(shape, |_| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    })
}

/// (batch, heads, len, dim, causal): the synthetic model's shape (5 keys: the lane-batched
/// short-sequence path), the EFA model's shape, a mid-size and a long sequence.
const SHAPES: [(usize, usize, usize, usize, bool); 6] = [
    (256, 2, 5, 16, false),
    (256, 2, 50, 16, false),
    (256, 2, 50, 16, true),
    (8, 8, 512, 64, true),
    (1, 8, 4096, 64, true),
    (1, 1, 16384, 64, true),
];

fn attention(c: &mut Criterion) {
    let mut g = c.benchmark_group("attention");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for &(b, h, n, d, causal) in &SHAPES {
        let (q, k, v, dout) = (
            filled([b, h, n, d], 1),
            filled([b, h, n, d], 2),
            filled([b, h, n, d], 3),
            filled([b, h, n, d], 4),
        );
        let mask = if causal { Mask::causal() } else { Mask::none() };
        // Defaults: scale 1/√D, Par::Rayon, the detected SIMD variant.
        let args = Attention::new(q.view(), k.view(), v.view()).mask(mask);
        let flops = args.forward_flops().unwrap() as f64;
        let id = format!(
            "b{b}_h{h}_n{n}_d{d}_{}",
            if causal { "causal" } else { "none" }
        );
        g.throughput(Throughput::Elements(flops as u64));
        g.bench_function(BenchmarkId::new("forward", &id), |bench| {
            bench.iter(|| black_box(args.forward().unwrap()))
        });
        g.throughput(Throughput::Elements((3.5 * flops) as u64));
        g.bench_function(BenchmarkId::new("forward_backward", &id), |bench| {
            bench.iter(|| {
                let out = args.forward().unwrap();
                black_box(args.backward(out.view(), dout.view(), None).unwrap())
            })
        });
        if n <= 64 {
            g.throughput(Throughput::Elements(flops as u64));
            g.bench_function(BenchmarkId::new("naive_forward_f64", &id), |bench| {
                bench.iter(|| black_box(naive::forward(&args).unwrap()))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, ceiling::sgemm_ceiling, attention);
criterion_main!(benches);
