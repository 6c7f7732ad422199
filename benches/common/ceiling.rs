//! The machine's ceiling for the criterion benches: a 2048³ sgemm over all cores
//! (`efa::num::ceiling::Sgemm`), reported in the same run as the kernel being measured.

use criterion::{Criterion, Throughput};
use std::time::Duration;

pub fn sgemm_ceiling(c: &mut Criterion) {
    let mut s = efa::num::ceiling::Sgemm::new(2048);
    let mut g = c.benchmark_group("ceiling");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(s.flops() as u64));
    g.bench_function("sgemm_2048", |bench| bench.iter(|| s.run()));
    g.finish();
}
