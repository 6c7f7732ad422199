//! SIMD row kernels (criterion): each variant on a 4096-element row, elements per second.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use efa_num::simd::{dot_with, exp_sub_sum_with, max_with, sum_exp_with, Isa};
use std::hint::black_box;
use std::time::Duration;

fn kernels(c: &mut Criterion) {
    let n = 4096;
    let x: Vec<f32> = (0..n)
        .map(|i| ((i * 37 % 101) as f32) * 0.05 - 2.5)
        .collect();
    let y: Vec<f32> = (0..n)
        .map(|i| ((i * 53 % 89) as f32) * 0.03 - 1.3)
        .collect();
    let mut g = c.benchmark_group("simd_f32_4096");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(n as u64));
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        g.bench_function(BenchmarkId::new("dot", isa.name()), |b| {
            b.iter(|| black_box(dot_with(isa, &x, &y)))
        });
        g.bench_function(BenchmarkId::new("max", isa.name()), |b| {
            b.iter(|| black_box(max_with(isa, &x)))
        });
        g.bench_function(BenchmarkId::new("sum_exp", isa.name()), |b| {
            b.iter(|| black_box(sum_exp_with(isa, &x, 2.5)))
        });
        let mut z = x.clone();
        g.bench_function(BenchmarkId::new("exp_sub_sum", isa.name()), |b| {
            b.iter(|| {
                z.copy_from_slice(&x);
                black_box(exp_sub_sum_with(isa, &mut z, 2.5))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, kernels);
criterion_main!(benches);
