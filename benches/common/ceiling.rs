//! The machine's ceilings for the criterion benches, measured in the same run as the kernel
//! being judged, on all threads of the pool (group `ceiling`, FLOP/s as elements/s):
//! `fma_peak` (the measured FMA loop of the active SIMD variant on every thread at once: the
//! arithmetic peak), `sgemm_2048/efa` (efa's own GEMM, `efa_num::ceiling::Sgemm::run`) and
//! `sgemm_2048/matrixmultiply` (the reference, `Sgemm::run_reference`). GFLOP/s fractions are
//! of the peak.

use criterion::{BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;

pub fn sgemm_ceiling(c: &mut Criterion) {
    let mut g = c.benchmark_group("ceiling");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    let isa = efa_num::simd::active();
    let iters = 1 << 16;
    let flops = efa_num::ceiling::fma_loop_pool(isa, iters);
    g.throughput(Throughput::Elements(flops as u64));
    g.bench_function(BenchmarkId::new("fma_peak", isa.name()), |bench| {
        bench.iter(|| black_box(efa_num::ceiling::fma_loop_pool(isa, iters)))
    });
    let mut s = efa_num::ceiling::Sgemm::new(2048);
    g.throughput(Throughput::Elements(s.flops() as u64));
    g.bench_function(BenchmarkId::new("sgemm_2048", "efa"), |bench| {
        bench.iter(|| s.run())
    });
    g.bench_function(BenchmarkId::new("sgemm_2048", "matrixmultiply"), |bench| {
        bench.iter(|| s.run_reference())
    });
    g.finish();
}
