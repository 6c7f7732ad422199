//! The machine's ceiling for the criterion benches: a 2048³ sgemm, row blocks split over all
//! cores with scoped threads, reported in the same run as the kernel being measured.

use criterion::{Criterion, Throughput};
use std::time::Duration;

/// The ceiling: 2048³ sgemm, row blocks split over all cores with scoped threads.
pub fn sgemm_ceiling(c: &mut Criterion) {
    let n = 2048;
    let a: Vec<f32> = (0..n * n).map(|i| (i % 97) as f32 * 0.01).collect();
    let b: Vec<f32> = (0..n * n).map(|i| (i % 89) as f32 * 0.01).collect();
    let mut out = vec![0f32; n * n];
    let threads = std::thread::available_parallelism()
        .map(|t| t.get())
        .unwrap_or(1);
    let rows = n.div_ceil(threads);
    let mut g = c.benchmark_group("ceiling");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
    g.bench_function("sgemm_2048", |bench| {
        bench.iter(|| {
            std::thread::scope(|s| {
                for (t, cb) in out.chunks_mut(rows * n).enumerate() {
                    let (a, b) = (&a, &b);
                    s.spawn(move || {
                        let m = cb.len() / n;
                        // SAFETY: row block t of a (m×n), b (n×n) and cb (m×n) are in bounds.
                        unsafe {
                            matrixmultiply::sgemm(
                                m,
                                n,
                                n,
                                1.0,
                                a.as_ptr().add(t * rows * n),
                                n as isize,
                                1,
                                b.as_ptr(),
                                n as isize,
                                1,
                                0.0,
                                cb.as_mut_ptr(),
                                n as isize,
                                1,
                            )
                        }
                    });
                }
            })
        })
    });
    g.finish();
}
