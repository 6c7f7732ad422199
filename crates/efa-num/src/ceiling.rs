//! The machine's GEMM ceiling for benchmarks: an n³ sgemm (matrixmultiply) with its row blocks
//! split over the current rayon pool, so that a kernel's GFLOP/s can be reported as a ratio
//! to what the same threads reach on a large, perfectly shaped product in the same run.

use rayon::prelude::*;

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

    /// `C = A·B`, one row block per thread of the current rayon pool.
    pub fn run(&mut self) {
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
                // SAFETY: `a` is n×n and rows `t·rows .. t·rows + m` lie inside it; `b` is
                // n×n; `cb` is this block's m×n rows of `c`, borrowed uniquely.
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
                    );
                }
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_product_is_a_real_product() {
        let n = 5;
        let mut s = Sgemm::new(n);
        s.run();
        for i in 0..n {
            for j in 0..n {
                let want: f32 = (0..n).map(|k| s.a[i * n + k] * s.b[k * n + j]).sum();
                assert!((s.c[i * n + j] - want).abs() <= 1e-5 * (1.0 + want.abs()));
            }
        }
        assert_eq!(s.flops(), 250.0);
    }
}
