//! Matrix product through the tape versus raw `matrixmultiply::sgemm`, f32, square sizes.
//!
//! Group `matmul_fwd`: `C = A·B` (2n³ FLOP) raw vs `Tape::matmul` (tape built each iteration).
//! Group `matmul_fwd_bwd`: raw forward plus the two backward products `dA = dC·Bᵀ`,
//! `dB = Aᵀ·dC` (6n³ FLOP) vs tape forward + `backward_with(C, dC)`.
//! Throughput is in elements = FLOP, so criterion's "elem/s" reads as FLOP/s.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use efa_tape::Tape;
use ndarray::{ArrayD, IxDyn};
use std::hint::black_box;

fn filled(n: usize, seed: u32) -> ArrayD<f32> {
    let mut s = seed;
    ArrayD::from_shape_simple_fn(IxDyn(&[n, n]), || {
        s = s.wrapping_mul(1664525).wrapping_add(1013904223);
        (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
    })
}

/// `C = α·A·B + β·C` for row-major n×n matrices, optionally reading A or B transposed.
fn sgemm(n: usize, a: &[f32], ta: bool, b: &[f32], tb: bool, c: &mut [f32]) {
    let (rsa, csa) = if ta { (1, n as isize) } else { (n as isize, 1) };
    let (rsb, csb) = if tb { (1, n as isize) } else { (n as isize, 1) };
    // SAFETY: all three buffers hold n·n f32 and `c` is distinct from `a` and `b`.
    unsafe {
        matrixmultiply::sgemm(
            n,
            n,
            n,
            1.0,
            a.as_ptr(),
            rsa,
            csa,
            b.as_ptr(),
            rsb,
            csb,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        )
    }
}

fn bench(c: &mut Criterion) {
    for n in [64usize, 256, 512] {
        let a = filled(n, 1);
        let b = filled(n, 2);
        let dc = filled(n, 3);
        let (sa, sb, sdc) = (
            a.as_slice().unwrap(),
            b.as_slice().unwrap(),
            dc.as_slice().unwrap(),
        );
        let flop = 2 * n * n * n;

        let mut g = c.benchmark_group("matmul_fwd");
        g.throughput(Throughput::Elements(flop as u64));
        let mut out = vec![0f32; n * n];
        g.bench_with_input(BenchmarkId::new("raw_sgemm", n), &n, |bch, &n| {
            bch.iter(|| {
                sgemm(n, sa, false, sb, false, &mut out);
                black_box(&out);
            })
        });
        g.bench_with_input(BenchmarkId::new("tape", n), &n, |bch, _| {
            bch.iter(|| {
                let mut t = Tape::<f32>::new();
                let (va, vb) = (t.constant(a.clone()), t.constant(b.clone()));
                let y = t.matmul(va, vb, false, false).unwrap();
                black_box(t.value(y)[[0, 0]]);
            })
        });
        g.finish();

        let mut g = c.benchmark_group("matmul_fwd_bwd");
        g.throughput(Throughput::Elements(3 * flop as u64));
        let (mut o, mut da, mut db) = (vec![0f32; n * n], vec![0f32; n * n], vec![0f32; n * n]);
        g.bench_with_input(BenchmarkId::new("raw_sgemm", n), &n, |bch, &n| {
            bch.iter(|| {
                sgemm(n, sa, false, sb, false, &mut o);
                sgemm(n, sdc, false, sb, true, &mut da);
                sgemm(n, sa, true, sdc, false, &mut db);
                black_box((&o, &da, &db));
            })
        });
        g.bench_with_input(BenchmarkId::new("tape", n), &n, |bch, _| {
            bch.iter(|| {
                let mut t = Tape::<f32>::new();
                let (va, vb) = (t.input(a.clone()), t.input(b.clone()));
                let y = t.matmul(va, vb, false, false).unwrap();
                let grads = t.backward_with(y, dc.clone()).unwrap();
                black_box(grads.wrt(va).unwrap()[[0, 0]]);
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
