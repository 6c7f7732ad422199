//! One Adam step over 10⁷ f32 parameters: the fused in-place loop of efa-optim (parallel and
//! sequential) against a naive unfused multi-pass loop written here.
//!
//! Throughput is the logical traffic of one step, 28 bytes per parameter: read w, g, m, v
//! (4 × 4 B) and write w, m, v (3 × 4 B). The naive loop moves more than that (scratch
//! buffers, repeated passes), which is the point of the comparison.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use efa_optim::{Adam, AdamConfig, EpsPlacement, Param};

const N: usize = 10_000_000;
const BYTES_PER_PARAM: u64 = 28;

/// Textbook Adam as separate whole-array passes through scratch buffers.
#[allow(clippy::too_many_arguments)]
fn naive_step(
    w: &mut [f32],
    g: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    s1: &mut [f32],
    s2: &mut [f32],
    t: i32,
    lr: f32,
) {
    let (b1, b2, eps) = (0.9f32, 0.999f32, 1e-7f32);
    for x in m.iter_mut() {
        *x *= b1;
    }
    for (x, &gi) in m.iter_mut().zip(g) {
        *x += (1.0 - b1) * gi;
    }
    for x in v.iter_mut() {
        *x *= b2;
    }
    for (s, &gi) in s1.iter_mut().zip(g) {
        *s = gi * gi;
    }
    for (x, &s) in v.iter_mut().zip(s1.iter()) {
        *x += (1.0 - b2) * s;
    }
    let (bc1, bc2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
    for (s, &mi) in s1.iter_mut().zip(m.iter()) {
        *s = mi / bc1;
    }
    for (s, &vi) in s2.iter_mut().zip(v.iter()) {
        *s = (vi / bc2).sqrt() + eps;
    }
    for ((wi, &a), &b) in w.iter_mut().zip(s1.iter()).zip(s2.iter()) {
        *wi -= lr * a / b;
    }
}

fn bench(c: &mut Criterion) {
    let mut grp = c.benchmark_group("adam_step_1e7_f32");
    grp.sample_size(10);
    grp.throughput(Throughput::Bytes(BYTES_PER_PARAM * N as u64));
    let g: Vec<f32> = (0..N).map(|i| ((i % 1000) as f32 - 500.0) * 1e-3).collect();

    for (label, parallel, placement) in [
        ("fused_parallel_keras", true, EpsPlacement::Keras),
        ("fused_sequential_keras", false, EpsPlacement::Keras),
        ("fused_sequential_textbook", false, EpsPlacement::Textbook),
    ] {
        let mut w = vec![0.5f32; N];
        let mut adam = Adam::<f32>::new(AdamConfig {
            parallel,
            placement,
            ..AdamConfig::keras(1e-4)
        })
        .expect("valid config");
        grp.bench_function(label, |b| {
            b.iter(|| {
                adam.step(&mut [Param::new("w", &mut w, Some(&g))])
                    .expect("step");
                black_box(&w);
            })
        });
    }

    let (mut w, mut m, mut v) = (vec![0.5f32; N], vec![0.0f32; N], vec![0.0f32; N]);
    let (mut s1, mut s2) = (vec![0.0f32; N], vec![0.0f32; N]);
    let mut t = 0;
    grp.bench_function("naive_multipass_textbook", |b| {
        b.iter(|| {
            t += 1;
            naive_step(&mut w, &g, &mut m, &mut v, &mut s1, &mut s2, t, 1e-4);
            black_box(&w);
        })
    });
    grp.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
