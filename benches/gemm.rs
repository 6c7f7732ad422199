//! GEMM throughput (criterion), reported as FLOP/s (`Throughput::Elements` = FLOPs, so
//! criterion's "elem/s" reads as FLOP/s):
//!
//! - `ceiling` (shared with the other benches, `common/ceiling.rs`): the FMA peak of the active
//!   variant on every thread of the pool, and the 2048³ product through efa's GEMM
//!   (`gemm_par`, rows split over the pool) and through matrixmultiply (row blocks over the
//!   pool);
//! - `fma_peak`: the measured FMA loop (`efa_num::ceiling::fma_loop`) of each supported variant,
//!   on one thread and on every thread of the pool at once;
//! - `gemm_models`: the models' products single-threaded (as the tape runs them inside rayon
//!   tasks), forward `y = x·W` (m×k·k×n) and the backward forms `dx = dy·Wᵀ` (m×n·n×k, `W`
//!   read transposed) and `dW = xᵀ·dy` (k×m·m×n, `x` read transposed), efa vs matrixmultiply;
//! - `gemm_models_f64`: the same products in f64, where efa's sums are compensated (`Dot2`,
//!   about twice f64's precision, docs/design.md §3c) and matrixmultiply's are plain: the
//!   ratio is what the audit dtype's accuracy costs.
//!
//! Quick run: `cargo bench --bench gemm -- --warm-up-time 0.5 --measurement-time 1`;
//! `RAYON_NUM_THREADS` sets the pool.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use efa_num::ceiling::{fma_loop, fma_loop_pool};
use efa_num::gemm::{gemm, reference_gemm};
use efa_num::simd::Isa;
use efa_num::{MatMut, MatRef, Real};
use std::hint::black_box;
use std::time::Duration;

#[path = "common/ceiling.rs"]
mod ceiling;

/// Rounds of the FMA loop per iteration: 12·2¹⁶ FMAs per thread, about 1 ms.
const PEAK_ITERS: usize = 1 << 16;

fn fma_peak(c: &mut Criterion) {
    let mut g = c.benchmark_group("fma_peak");
    g.sample_size(10).measurement_time(Duration::from_secs(1));
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        let flops = fma_loop(isa, PEAK_ITERS);
        g.throughput(Throughput::Elements(flops as u64));
        g.bench_function(BenchmarkId::new(isa.name(), "1_thread"), |b| {
            b.iter(|| black_box(fma_loop(isa, PEAK_ITERS)))
        });
        g.throughput(Throughput::Elements(fma_loop_pool(isa, PEAK_ITERS) as u64));
        g.bench_function(BenchmarkId::new(isa.name(), "all_threads"), |b| {
            b.iter(|| black_box(fma_loop_pool(isa, PEAK_ITERS)))
        });
    }
    g.finish();
}

/// Deterministic values in [-0.5, 0.5).
fn filled<T: Real>(len: usize, seed: u32) -> Vec<T> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            T::from_f64((s >> 8) as f64 / (1u32 << 24) as f64 - 0.5)
        })
        .collect()
}

/// One product of the models: logical `m × k` times `k × n` with the storage of a forward
/// `x [rows, d_in]`, `W [d_in, d_out]`, `dy [rows, d_out]`.
struct Product<T> {
    m: usize,
    k: usize,
    n: usize,
    a: Vec<T>,
    sa: (isize, isize),
    b: Vec<T>,
    sb: (isize, isize),
    c: Vec<T>,
}

impl<T: Real> Product<T> {
    fn run(&mut self, efa: bool) {
        let f = if efa { gemm::<T> } else { reference_gemm::<T> };
        let (m, k, n) = (self.m, self.k, self.n);
        f(
            T::ONE,
            MatRef::new(&self.a, m, k, self.sa.0, self.sa.1),
            MatRef::new(&self.b, k, n, self.sb.0, self.sb.1),
            T::ZERO,
            MatMut::row_major(&mut self.c, m, n, n),
        )
    }
}

/// The three products of a linear layer `[rows, d_in] × [d_in, d_out]`.
fn products<T: Real>(rows: usize, d_in: usize, d_out: usize) -> Vec<(&'static str, Product<T>)> {
    let x = filled::<T>(rows * d_in, 1);
    let w = filled::<T>(d_in * d_out, 2);
    let dy = filled::<T>(rows * d_out, 3);
    let (ri, ro) = (d_in as isize, d_out as isize);
    vec![
        (
            "fwd",
            Product {
                m: rows,
                k: d_in,
                n: d_out,
                a: x.clone(),
                sa: (ri, 1),
                b: w.clone(),
                sb: (ro, 1),
                c: vec![T::ZERO; rows * d_out],
            },
        ),
        (
            "dx=dy.Wt",
            Product {
                m: rows,
                k: d_out,
                n: d_in,
                a: dy.clone(),
                sa: (ro, 1),
                b: w,
                sb: (1, ro),
                c: vec![T::ZERO; rows * d_in],
            },
        ),
        (
            "dW=xt.dy",
            Product {
                m: d_in,
                k: rows,
                n: d_out,
                a: x,
                sa: (1, ri),
                b: dy,
                sb: (ro, 1),
                c: vec![T::ZERO; d_in * d_out],
            },
        ),
    ]
}

fn gemm_models(c: &mut Criterion) {
    models::<f32>(
        c,
        "gemm_models",
        &[(44, 32, 32), (128, 32, 64), (5632, 32, 96), (16896, 64, 64)],
    );
}

fn gemm_models_f64(c: &mut Criterion) {
    models::<f64>(c, "gemm_models_f64", &[(128, 32, 64), (5632, 32, 96)]);
}

fn models<T: Real>(c: &mut Criterion, group: &str, shapes: &[(usize, usize, usize)]) {
    let mut g = c.benchmark_group(group);
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(1));
    for &(rows, d_in, d_out) in shapes {
        for (form, mut p) in products::<T>(rows, d_in, d_out) {
            g.throughput(Throughput::Elements(2 * (p.m * p.k * p.n) as u64));
            let id = format!("{rows}x{d_in}x{d_out}/{form}");
            g.bench_function(BenchmarkId::new("efa", &id), |b| b.iter(|| p.run(true)));
            g.bench_function(BenchmarkId::new("matrixmultiply", &id), |b| {
                b.iter(|| p.run(false))
            });
        }
    }
    g.finish();
}

criterion_group!(
    benches,
    ceiling::sgemm_ceiling,
    fma_peak,
    gemm_models,
    gemm_models_f64
);
criterion_main!(benches);
