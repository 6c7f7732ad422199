//! The fused-block plan's kernels at the temperature model's shape (criterion):
//!
//! - `shared_context_attention`: the shared-context attention op on the tape (186 days of 44
//!   cities, 2 heads of 16, f32; forward, and backward of `Σ w∘o`) against the same attention
//!   on the materialised samples (`attention_heads` on `[B, N, H·K]`), in samples/s;
//! - `block_products`: the six products of the column path's attention (one head: 44 keys,
//!   16 dims) through `efa_attn::micro::gemm_checked`, in FLOP/s, beside a plain triple loop
//!   of the first one;
//! - `cols_softmax`: the column softmax and its backward on one 44×44 head, in elements/s,
//!   beside a plain row softmax;
//!
//! and the `ceiling` group (FMA peak, sgemm 2048³) of the same run, so results are ratios.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use efa_nn::ops::shared_attention::SharedContextAttention;
use efa_nn::prelude::*;
use ndarray::{ArrayD, IxDyn};
use std::hint::black_box;
use std::time::Duration;

#[path = "common/ceiling.rs"]
mod ceiling;

/// Values in [−amp, amp] from a xorshift stream.
fn filled(n: usize, seed: u64, amp: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0) * amp
        })
        .collect()
}

fn array(shape: &[usize], seed: u64) -> ArrayD<f32> {
    let n = shape.iter().product();
    ArrayD::from_shape_vec(IxDyn(shape), filled(n, seed, 1.0)).unwrap()
}

fn shared_context_attention(c: &mut Criterion) {
    let (g, n, heads, kd) = (186, 44, 2, 16);
    let (b, hk) = (g * n, heads * kd);
    let group: Vec<usize> = (0..b).map(|s| s / n).collect();
    let target: Vec<usize> = (0..b).map(|s| s % n).collect();
    let base: Vec<ArrayD<f32>> = (0..3).map(|i| array(&[g, n, hk], 1 + i)).collect();
    let rows: Vec<ArrayD<f32>> = (0..3).map(|i| array(&[b, hk], 4 + i)).collect();
    let w = array(&[b, n, hk], 7);
    // The samples' own rows, materialised: the target row replaced in its day's rows.
    let full: Vec<ArrayD<f32>> = (0..3)
        .map(|k| {
            ArrayD::from_shape_fn(IxDyn(&[b, n, hk]), |ix| {
                let (s, i, c) = (ix[0], ix[1], ix[2]);
                if i == target[s] {
                    rows[k][[s, c]]
                } else {
                    base[k][[group[s], i, c]]
                }
            })
        })
        .collect();
    let mut grp = c.benchmark_group("shared_context_attention");
    grp.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(b as u64));
    grp.bench_function(BenchmarkId::new("forward_backward", "shared"), |bench| {
        bench.iter(|| {
            let mut t = Tape::<f32>::new();
            let v: Vec<Var> = ["q", "k", "v", "q_t", "k_t", "v_t"]
                .iter()
                .zip(base.iter().chain(&rows))
                .map(|(name, a)| t.param(name, a.clone()).unwrap())
                .collect();
            let y = t
                .shared_context_attention(SharedContextAttention {
                    q: v[0],
                    k: v[1],
                    v: v[2],
                    q_t: v[3],
                    k_t: v[4],
                    v_t: v[5],
                    heads,
                    scale: 1.0 / (kd as f64).sqrt(),
                    group: group.clone(),
                    target: target.clone(),
                    lengths: vec![n; g],
                })
                .unwrap();
            let wv = t.constant(w.clone());
            let l = t.mul(y, wv).unwrap();
            let l = t.sum_all(l).unwrap();
            black_box(t.backward(l).unwrap());
        })
    });
    grp.bench_function(
        BenchmarkId::new("forward_backward", "materialised"),
        |bench| {
            bench.iter(|| {
                let mut t = Tape::<f32>::new();
                let v: Vec<Var> = ["q", "k", "v"]
                    .iter()
                    .zip(&full)
                    .map(|(name, a)| t.param(name, a.clone()).unwrap())
                    .collect();
                let y = t
                    .attention_heads(efa_attn::Attention::new(v[0], v[1], v[2]), heads)
                    .unwrap()
                    .o;
                let wv = t.constant(w.clone());
                let l = t.mul(y, wv).unwrap();
                let l = t.sum_all(l).unwrap();
                black_box(t.backward(l).unwrap());
            })
        },
    );
    grp.finish();
}

/// `C = A·B` by three loops (`A` with strides `(rsa, csa)`, `B` row-major with `ldb`).
fn naive_product(
    (m, n, k): (usize, usize, usize),
    a: &[f32],
    (rsa, csa): (usize, usize),
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) {
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0;
            for l in 0..k {
                s += a[i * rsa + l * csa] * b[l * ldb + j];
            }
            c[i * ldc + j] = s;
        }
    }
}

fn block_products(c: &mut Criterion) {
    use efa_attn::micro::gemm_checked;
    let isa = efa_num::simd::active();
    let a = filled(64 * 64, 1, 1.0);
    let b = filled(64 * 64, 2, 1.0);
    let mut out = vec![0f32; 64 * 64];
    // (name, m, n, k, rsa, csa, ldb): the column path's products on one head.
    let cases = [
        ("S^T=K.Q^T", 44, 44, 16, 64, 1, 48),
        ("O=P.V", 44, 16, 44, 1, 48, 64),
        ("dV=P^T.dO", 44, 16, 44, 48, 1, 32),
        ("dP^T=V.dO^T", 44, 44, 16, 64, 1, 48),
        ("dQ=dS.K", 44, 16, 44, 1, 48, 64),
        ("dK=dS^T.Q", 44, 16, 44, 48, 1, 32),
    ];
    let mut g = c.benchmark_group("block_products");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for (name, m, n, k, rsa, csa, ldb) in cases {
        g.throughput(Throughput::Elements(2 * (m * n * k) as u64));
        g.bench_function(BenchmarkId::new(name, isa.name()), |bench| {
            bench.iter(|| {
                gemm_checked(
                    isa,
                    (m, n, k),
                    (black_box(&a), (rsa, csa)),
                    (&b, ldb),
                    (&mut out, 64),
                    false,
                    1.0,
                );
            })
        });
    }
    let (name, m, n, k, rsa, csa, ldb) = cases[0];
    g.throughput(Throughput::Elements(2 * (m * n * k) as u64));
    g.bench_function(BenchmarkId::new(name, "naive"), |bench| {
        bench.iter(|| naive_product((m, n, k), black_box(&a), (rsa, csa), &b, ldb, &mut out, 64))
    });
    g.finish();
}

fn cols_softmax(c: &mut Criterion) {
    use efa_attn::micro::{ds_cols, softmax_cols};
    let isa = efa_num::simd::active();
    let (n, ld) = (44, 48);
    let x = filled(n * ld, 1, 3.0);
    let dp = filled(n * ld, 2, 1.0);
    let (mut y, mut dq) = (x.clone(), dp.clone());
    softmax_cols(isa, &mut y, ld, n, n);
    let probs = y.clone();
    let mut g = c.benchmark_group("cols_softmax");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .throughput(Throughput::Elements((n * n) as u64));
    g.bench_function(BenchmarkId::new("softmax_cols", isa.name()), |bench| {
        bench.iter(|| {
            y.copy_from_slice(&x);
            softmax_cols(isa, black_box(&mut y), ld, n, n);
        })
    });
    g.bench_function(BenchmarkId::new("ds_cols", isa.name()), |bench| {
        bench.iter(|| {
            dq.copy_from_slice(&dp);
            ds_cols(isa, &probs, black_box(&mut dq), ld, n, n);
        })
    });
    // Baseline: a plain softmax over each of the n rows (the same element count).
    g.bench_function(BenchmarkId::new("softmax_rows", "naive"), |bench| {
        bench.iter(|| {
            y.copy_from_slice(&x);
            for row in black_box(&mut y).chunks_mut(ld) {
                let row = &mut row[..n];
                let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut s = 0.0;
                for v in row.iter_mut() {
                    *v = (*v - m).exp();
                    s += *v;
                }
                for v in row.iter_mut() {
                    *v /= s;
                }
            }
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    shared_context_attention,
    block_products,
    cols_softmax,
    ceiling::sgemm_ceiling
);
criterion_main!(benches);
