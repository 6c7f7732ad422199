//! Measures efa's GEMM against matrixmultiply and the FMA peak, f32, on the current rayon
//! pool (`RAYON_NUM_THREADS`): the 2048³ product (rows split over the pool) and the models'
//! products single-threaded, each figure the median over interleaved rounds, every ratio
//! taken within a round. Run pinned: `taskset -c 0,1 cargo run --release -p efa-num
//! --example gemm_table -- [rounds]`.

use efa_num::ceiling::{fma_peak, Sgemm};
use efa_num::gemm::{gemm, reference_gemm};
use efa_num::simd::active;
use efa_num::{MatMut, MatRef};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn best(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

fn seconds(f: &mut dyn FnMut()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let threads = rayon::current_num_threads();
    let isa = active();
    let mut s = Sgemm::new(2048);
    s.run();
    s.run_reference();
    let (mut peak, mut efa, mut mm) = (vec![], vec![], vec![]);
    for _ in 0..rounds {
        peak.push(fma_peak(isa));
        efa.push(s.flops() / seconds(&mut || s.run()) / 1e9);
        mm.push(s.flops() / seconds(&mut || s.run_reference()) / 1e9);
    }
    let ratio = |x: &[f64], y: &[f64]| median(x.iter().zip(y).map(|(a, b)| a / b).collect());
    println!(
        "2048³ f32, {threads} thread(s), {}: FMA peak {:.1} GFLOP/s (best {:.1}) | efa {:.1} \
         (best {:.1}, {:.0} % of peak) | matrixmultiply {:.1} (best {:.1}, {:.0} % of peak) | \
         efa/mm {:.2}  [medians over {rounds} rounds; % and efa/mm: median of per-round ratios]",
        isa.name(),
        median(peak.clone()),
        best(&peak),
        median(efa.clone()),
        best(&efa),
        100.0 * ratio(&efa, &peak),
        median(mm.clone()),
        best(&mm),
        100.0 * ratio(&mm, &peak),
        ratio(&efa, &mm)
    );
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    let peak1 = best(
        &(0..rounds)
            .map(|_| one.install(|| fma_peak(isa)))
            .collect::<Vec<_>>(),
    );
    println!("models' products, 1 thread (FMA peak, best of {rounds} rounds: {peak1:.1} GFLOP/s; medians, best in brackets):");
    for (rows, di, dout) in [(44, 32, 32), (128, 32, 64), (5632, 32, 96), (16896, 64, 64)] {
        let x: Vec<f32> = (0..rows * di).map(|i| (i % 97) as f32 * 0.01).collect();
        let w: Vec<f32> = (0..di * dout).map(|i| (i % 89) as f32 * 0.01).collect();
        let dy: Vec<f32> = (0..rows * dout).map(|i| (i % 83) as f32 * 0.01).collect();
        let (xv, wv) = (
            MatRef::row_major(&x, rows, di, di),
            MatRef::row_major(&w, di, dout, dout),
        );
        let dyv = MatRef::row_major(&dy, rows, dout, dout);
        // (name, A, B): the transposes read the same storage with swapped strides.
        let forms = [
            ("fwd x·W", xv, wv),
            ("dx=dy·Wᵀ", dyv, wv.t()),
            ("dW=xᵀ·dy", xv.t(), dyv),
        ];
        for (name, a, b) in forms {
            let (m, k, n) = (a.rows(), a.cols(), b.cols());
            let mut c = vec![0f32; m * n];
            let flops = 2.0 * (m * k * n) as f64;
            let reps = ((5e7 / flops) as usize).max(1);
            let mut run = |efa: bool| {
                let f = if efa {
                    gemm::<f32>
                } else {
                    reference_gemm::<f32>
                };
                let t = seconds(&mut || {
                    for _ in 0..reps {
                        f(1.0, a, b, 0.0, MatMut::row_major(&mut c, m, n, n));
                    }
                });
                flops * reps as f64 / t / 1e9
            };
            run(true);
            run(false);
            let (mut e, mut r) = (vec![], vec![]);
            for _ in 0..rounds {
                e.push(run(true));
                r.push(run(false));
            }
            println!(
                "  {rows:>5}×{di}×{dout} {name:<10} m×k×n {m}×{k}×{n}: efa {:6.1} [{:6.1}] GFLOP/s ({:3.0} % of peak), \
                 matrixmultiply {:6.1} [{:6.1}] ({:3.0} %), efa/mm {:.2}",
                median(e.clone()),
                best(&e),
                100.0 * median(e.clone()) / peak1,
                median(r.clone()),
                best(&r),
                100.0 * median(r.clone()) / peak1,
                ratio(&e, &r)
            );
        }
    }
}
