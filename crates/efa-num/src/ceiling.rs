//! The machine's ceilings for benchmarks, measured on the threads of the current rayon pool in
//! the same run as the kernel being judged:
//!
//! - [`fma_peak`]: the arithmetic peak, from a loop of independent vector FMAs on every
//!   thread at once (GFLOP/s = threads × FMAs × lanes × 2 / time). Fractions of this are
//!   fractions of the machine.
//! - [`Sgemm::run`]: an n³ sgemm through efa's own GEMM ([`crate::gemm::gemm_par`]), the best
//!   product efa has.
//! - [`Sgemm::run_reference`]: the same product through `matrixmultiply` (row blocks split
//!   over the pool), the portable reference, reported beside it.
//!
//! [`Ceiling::measure`] takes all three at once.

use crate::mat::{MatMut, MatRef};
use crate::simd::{self, Isa, SimdVec};
use rayon::prelude::*;
use std::time::Instant;

/// Operands of one n×n×n sgemm, allocated once.
pub struct Sgemm {
    n: usize,
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl Sgemm {
    /// Deterministic n×n operands.
    pub fn new(n: usize) -> Self {
        Self {
            n,
            a: (0..n * n).map(|i| (i % 97) as f32 * 0.01).collect(),
            b: (0..n * n).map(|i| (i % 89) as f32 * 0.01).collect(),
            c: vec![0.0; n * n],
        }
    }

    /// FLOPs of one [`Sgemm::run`]: 2n³.
    pub fn flops(&self) -> f64 {
        2.0 * (self.n as f64).powi(3)
    }

    /// `C = A·B` through efa's GEMM, split over the current rayon pool
    /// ([`crate::gemm::gemm_par`], the variant of [`simd::active`]).
    pub fn run(&mut self) {
        let n = self.n;
        crate::gemm::gemm_par(
            1.0,
            MatRef::row_major(&self.a, n, n, n),
            MatRef::row_major(&self.b, n, n, n),
            0.0,
            MatMut::row_major(&mut self.c, n, n, n),
        );
    }

    /// `C = A·B` through `matrixmultiply`, one row block per thread of the current rayon pool.
    pub fn run_reference(&mut self) {
        let n = self.n;
        if n == 0 {
            return;
        }
        let rows = n.div_ceil(rayon::current_num_threads().max(1));
        let (a, b) = (&self.a, &self.b);
        self.c
            .par_chunks_mut(rows * n)
            .enumerate()
            .for_each(|(t, cb)| {
                let m = cb.len() / n;
                crate::gemm::reference_gemm(
                    1.0,
                    MatRef::row_major(&a[t * rows * n..], m, n, n),
                    MatRef::row_major(b, n, n, n),
                    0.0,
                    MatMut::row_major(cb, m, n, n),
                );
            });
    }
}

/// Independent accumulators of the peak loop: 12 covers two FMA ports × 4 cycles of latency
/// (8) with room, and with the two constants fits the 16 AVX2 registers.
const PEAK_ACC: usize = 12;

/// `iters` rounds of [`PEAK_ACC`] independent FMAs `acc ← acc·x + y`; returns a lane sum so
/// the work cannot be dropped.
#[inline(always)]
unsafe fn peak_body<V: SimdVec<Elem = f32>>(iters: usize) -> f32 {
    // SAFETY: the caller runs this where `V`'s instruction set is available.
    unsafe {
        // Opaque constants: with known values the compiler could fold the recurrence away.
        let bb = std::hint::black_box;
        let x = V::splat(bb(0.999_999));
        let y = V::splat(bb(1e-6));
        let mut acc = [V::splat(bb(1.0)); PEAK_ACC];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = a.fma(x, y);
            }
        }
        let mut s = V::splat(0.0);
        for a in acc {
            s = s.add(a);
        }
        s.reduce_sum()
    }
}

/// The portable loop: the same recurrence with a separate multiply and add (two FLOPs), as the
/// scalar GEMM computes.
fn peak_scalar(iters: usize) -> f32 {
    let bb = std::hint::black_box;
    let (x, y) = (bb(0.999_999f32), bb(1e-6f32));
    let mut acc = [bb(1.0f32); PEAK_ACC];
    for _ in 0..iters {
        for a in acc.iter_mut() {
            *a = *a * x + y;
        }
    }
    acc.iter().sum()
}

/// The FMA loop on this thread: `iters` rounds of 12 independent vector FMAs
/// `acc ← acc·x + y` on variant `isa` (the scalar path, with a separate multiply and add, if
/// the CPU lacks it); returns the FLOPs done, `iters × 12 × lanes × 2`.
pub fn fma_loop(isa: Isa, iters: usize) -> f64 {
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn v512(iters: usize) -> f32 {
        // SAFETY: AVX-512F is enabled here.
        unsafe { peak_body::<simd::Avx512F32>(iters) }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn v256(iters: usize) -> f32 {
        // SAFETY: AVX2 and FMA are enabled here.
        unsafe { peak_body::<simd::Avx2F32>(iters) }
    }
    let (r, lanes) = match isa.or_scalar() {
        // SAFETY: `or_scalar` returned a supported variant.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => (unsafe { v512(iters) }, 16),
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => (unsafe { v256(iters) }, 8),
        _ => (peak_scalar(iters), 1),
    };
    std::hint::black_box(r);
    (iters * PEAK_ACC * lanes * 2) as f64
}

/// [`fma_loop`] on every thread of the current rayon pool at once; returns the total FLOPs
/// (threads × the FLOPs of one loop).
pub fn fma_loop_pool(isa: Isa, iters: usize) -> f64 {
    rayon::broadcast(|_| fma_loop(isa, iters)).iter().sum()
}

/// GFLOP/s of the FMA loop on this thread: calibrated to about 2 ms per timing, the best of
/// 25 timings (a peak is what the core can do; other load on a shared machine only lowers a
/// timing's rate, and short timings, like those of small products, can fall between its time
/// slices). Each timing starts
/// when every thread of the pool has reached `barrier`.
fn peak_thread(isa: Isa, barrier: &std::sync::Barrier) -> f64 {
    let t = Instant::now();
    let probe = 1 << 16;
    let f = fma_loop(isa, probe);
    let rate = f / t.elapsed().as_secs_f64().max(1e-9);
    let iters = ((0.002 * rate / f) * probe as f64).clamp(1.0, 1e10) as usize;
    (0..25)
        .map(|_| {
            barrier.wait();
            let t = Instant::now();
            let f = fma_loop(isa, iters);
            f / t.elapsed().as_secs_f64().max(1e-9) / 1e9
        })
        .fold(0.0, f64::max)
}

/// Measured f32 FMA peak of variant `isa` (the scalar path if unsupported) in GFLOP/s, over
/// all threads of the current rayon pool running the loop at the same time: the sum of the
/// per-thread rates (each the best of 25 timings of about 2 ms, started together). Each thread runs 12
/// independent FMA chains (`acc ← acc·x + y`, lanes × 2 FLOPs per FMA), enough to saturate
/// two FMA ports of latency 4.
pub fn fma_peak(isa: Isa) -> f64 {
    let threads = rayon::current_num_threads().max(1);
    let barrier = std::sync::Barrier::new(threads);
    rayon::broadcast(|_| peak_thread(isa, &barrier))
        .iter()
        .sum()
}

/// The ceilings of one run on the current rayon pool.
#[derive(Clone, Copy, Debug)]
pub struct Ceiling {
    /// Threads of the pool.
    pub threads: usize,
    /// The variant of efa's kernels ([`simd::active`]).
    pub isa: Isa,
    /// Size of the n³ products.
    pub n: usize,
    /// [`fma_peak`] of `isa`, GFLOP/s.
    pub peak_gflops: f64,
    /// n³ sgemm through efa's GEMM ([`Sgemm::run`]), GFLOP/s.
    pub efa_gflops: f64,
    /// n³ sgemm through matrixmultiply ([`Sgemm::run_reference`]), GFLOP/s.
    pub reference_gflops: f64,
}

impl Ceiling {
    /// Measures the FMA peak and both n³ sgemms (each the median of 3 timings after a
    /// warm-up) on the current rayon pool.
    pub fn measure(n: usize) -> Ceiling {
        let isa = simd::active();
        let peak_gflops = fma_peak(isa);
        let mut s = Sgemm::new(n);
        let mut gflops = |f: fn(&mut Sgemm)| {
            f(&mut s);
            let mut t: Vec<f64> = (0..3)
                .map(|_| {
                    let t = Instant::now();
                    f(&mut s);
                    t.elapsed().as_secs_f64()
                })
                .collect();
            t.sort_by(|a, b| a.total_cmp(b));
            s.flops() / t[1].max(1e-12) / 1e9
        };
        let efa_gflops = gflops(Sgemm::run);
        let reference_gflops = gflops(Sgemm::run_reference);
        Ceiling {
            threads: rayon::current_num_threads(),
            isa,
            n,
            peak_gflops,
            efa_gflops,
            reference_gflops,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_products_are_real_products() {
        let n = 37;
        let mut s = Sgemm::new(n);
        for reference in [false, true] {
            s.c.fill(f32::NAN);
            if reference {
                s.run_reference();
            } else {
                s.run();
            }
            for i in 0..n {
                for j in 0..n {
                    let want: f32 = (0..n).map(|k| s.a[i * n + k] * s.b[k * n + j]).sum();
                    assert!((s.c[i * n + j] - want).abs() <= 1e-4 * (1.0 + want.abs()));
                }
            }
        }
        assert_eq!(Sgemm::new(5).flops(), 250.0);
    }

    #[test]
    fn the_peak_loop_runs_on_every_variant() {
        for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
            assert!(fma_loop(isa, 10) > 0.0);
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool");
        assert!(pool.install(|| fma_peak(simd::active())) > 0.0);
    }
}
