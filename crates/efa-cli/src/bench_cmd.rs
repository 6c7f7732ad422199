//! `efa bench …`: kernel and training benchmarks with same-run baselines (the naive reference
//! kernel; on the same thread pool, the measured FMA peak and a 2048³ sgemm through efa's own
//! GEMM and through matrixmultiply, `efa_num::ceiling::Ceiling`).

use crate::CliError;
use clap::{Args, Subcommand, ValueEnum};
use efa_attn::{naive, Attention, Mask};
use ndarray::Array4;
use std::time::Instant;

// `efa bench train` lives in its own file beside this one (src/bench_train.rs).
#[path = "bench_train.rs"]
mod bench_train;

/// Arguments of `efa bench`.
#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

/// What to benchmark.
#[derive(Subcommand)]
enum BenchCommand {
    /// Fused attention forward (and backward) throughput in GFLOP/s.
    Attention(AttentionArgs),
    /// Steady-state training epochs of an experiment's EFA models: samples/s and GFLOP/s
    /// (matmul and attention FLOPs) beside an sgemm ceiling.
    Train(bench_train::TrainBenchArgs),
}

/// Mask of the attention benchmark.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum BenchMask {
    /// Every key visible: 4·B·H·N²·D forward FLOPs.
    None,
    /// Causal: the useful half, 4·B·H·N(N+1)/2·D forward FLOPs.
    Causal,
}

/// Element type of the attention benchmark.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Dtype {
    F32,
    F64,
}

/// `efa bench attention` options.
#[derive(Args)]
struct AttentionArgs {
    /// Batch size B.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Heads H.
    #[arg(long, default_value_t = 8)]
    heads: usize,
    /// Sequence length N (queries = keys).
    #[arg(long, default_value_t = 512)]
    len: usize,
    /// Head dimension D (= value dimension).
    #[arg(long, default_value_t = 64)]
    dim: usize,
    /// Mask.
    #[arg(long, value_enum, default_value_t = BenchMask::None)]
    mask: BenchMask,
    /// Also time forward + backward.
    #[arg(long)]
    backward: bool,
    /// Threads of the rayon pool (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Print exactly one JSON object.
    #[arg(long)]
    json: bool,
    /// Timed repetitions (the median is reported; 1 to 10,000).
    #[arg(long, default_value_t = 20)]
    reps: usize,
    /// Element type.
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    dtype: Dtype,
    /// Skip the naive kernel and the ceilings (for profiling the kernel alone).
    #[arg(long)]
    no_baselines: bool,
}

/// Runs `efa bench`.
pub fn run(args: BenchArgs) -> Result<(), CliError> {
    match args.command {
        BenchCommand::Attention(a) => attention(a),
        BenchCommand::Train(a) => bench_train::run(a),
    }
}

fn median_ms(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(|a, b| a.total_cmp(b));
    t[t.len() / 2]
}

/// Seconds of untimed calls before a timing: the pool's threads awake and the cores at their
/// steady clock (two calls of a sub-millisecond kernel left the second thread's first timed
/// calls slow, and a 20-call median measured that instead of the kernel).
const WARM_UP_S: f64 = 0.3;

/// Calls `f` at least twice and for at least [`WARM_UP_S`] seconds; the first error stops it.
fn warm_up<E>(mut f: impl FnMut() -> Result<(), E>) -> Result<(), E> {
    let start = Instant::now();
    let mut calls = 0;
    while calls < 2 || start.elapsed().as_secs_f64() < WARM_UP_S {
        f()?;
        calls += 1;
    }
    Ok(())
}

/// Deterministic values in [-1, 1) (a fixed linear congruential sequence).
fn filled<T: efa_num::Real>(shape: [usize; 4], seed: u64) -> Array4<T> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    Array4::from_shape_fn(shape, |_| {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        T::from_f64(((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0)
    })
}

struct Timings {
    /// Forward FLOPs of the shape under the mask ([`Attention::forward_flops`]).
    flops: f64,
    fwd_ms: f64,
    fwdbwd_ms: Option<f64>,
    naive_ms: Option<f64>,
}

fn time_attention<T: efa_num::Real>(a: &AttentionArgs, mask: &Mask) -> Result<Timings, CliError> {
    let (b, h, n, d) = (a.batch, a.heads, a.len, a.dim);
    let q = filled::<T>([b, h, n, d], 1);
    let k = filled::<T>([b, h, n, d], 2);
    let v = filled::<T>([b, h, n, d], 3);
    let g = filled::<T>([b, h, n, d], 4);
    // Defaults: scale 1/√D, Par::Rayon, the detected SIMD variant.
    let args = Attention::new(q.view(), k.view(), v.view()).mask(mask.clone());
    let err = |e: efa_attn::AttnError| CliError::new(e.to_string());
    let flops = args.forward_flops().map_err(err)? as f64;
    let fwd = || args.forward();
    warm_up(|| fwd().map(|_| ())).map_err(err)?;
    let fwd_ms = median_ms(a.reps, || {
        std::hint::black_box(fwd().expect("checked in warm-up"));
    });
    let fwdbwd_ms = if a.backward {
        let step = || -> Result<_, efa_attn::AttnError> {
            let out = fwd()?;
            args.backward(out.view(), g.view(), None)
        };
        warm_up(|| step().map(|_| ())).map_err(err)?;
        Some(median_ms(a.reps, || {
            std::hint::black_box(step().expect("checked in warm-up"));
        }))
    } else {
        None
    };
    // The naive f64 reference only where it finishes in about a second.
    let work = (b * h) as f64 * (n as f64) * (n as f64) * d as f64;
    let naive_ms = if work <= 1.5e8 && !a.no_baselines {
        let nreps = if work <= 2e7 { 3 } else { 1 };
        Some(median_ms(nreps, || {
            std::hint::black_box(naive::forward(&args).expect("checked"));
        }))
    } else {
        None
    };
    Ok(Timings {
        flops,
        fwd_ms,
        fwdbwd_ms,
        naive_ms,
    })
}

/// The ceilings on the current rayon pool: the measured FMA peak and a 2048³ sgemm through
/// efa's GEMM and through matrixmultiply.
fn sgemm_ceiling() -> efa_num::ceiling::Ceiling {
    sgemm_ceiling_n(2048)
}

/// The ceilings with an n³ sgemm (each product the median of 3 after one warm-up; the peak
/// the sum over the pool's threads of each thread's best FMA-loop rate).
pub(crate) fn sgemm_ceiling_n(n: usize) -> efa_num::ceiling::Ceiling {
    efa_num::ceiling::Ceiling::measure(n)
}

/// `x` as a percentage of the measured FMA peak `peak`.
pub(crate) fn pct_of_peak(x: f64, peak: f64) -> f64 {
    100.0 * x / peak
}

/// Most FLOPs one `efa bench attention` run may ask for: 10¹³ (the forward's FLOPs, times
/// 4.5 with `--backward`, times the timed repetitions plus two warm-ups): minutes on a
/// small machine, not days.
const MAX_BENCH_FLOPS: f64 = 1e13;

/// Most `--reps` of `efa bench attention`: 10,000 (a median of more timings says nothing
/// new, and every repetition's time is kept).
const MAX_BENCH_REPS: usize = 10_000;

/// Checks the `efa bench attention` sizes before anything is allocated: every size positive,
/// `B·H·N·D` formed with overflow-safe products, the arrays (q, k, v, the cotangent, the
/// output and with `--backward` three gradients, `B·H·N·D` elements each, plus the
/// log-partition rows) within the available memory, and the work within
/// [`MAX_BENCH_FLOPS`], `--reps` in `1..=MAX_BENCH_REPS`. Errors name the flags.
/// Most elements of one benchmark array: `isize::MAX / 8`, so that an f64 array of them has a
/// byte size the allocator can represent.
const MAX_ARRAY_ELEMENTS: u64 = (isize::MAX as u64) / 8;

fn check_attention_sizes(a: &AttentionArgs) -> Result<(), CliError> {
    if a.batch == 0 || a.heads == 0 || a.len == 0 || a.dim == 0 {
        return Err(CliError::new(
            "efa bench attention: --batch, --heads, --len and --dim must be positive",
        ));
    }
    if a.reps == 0 || a.reps > MAX_BENCH_REPS {
        return Err(CliError::new(format!(
            "efa bench attention: --reps {}: must be in 1..={MAX_BENCH_REPS}",
            a.reps
        )));
    }
    let sizes = format!(
        "--batch {} × --heads {} × --len {} × --dim {}",
        a.batch, a.heads, a.len, a.dim
    );
    let elems = [a.batch, a.heads, a.len, a.dim]
        .iter()
        .try_fold(1u64, |acc, &x| acc.checked_mul(x as u64))
        .filter(|&n| n <= MAX_ARRAY_ELEMENTS)
        .ok_or_else(|| {
            CliError::new(format!(
                "efa bench attention: {sizes} overflows the largest array \
                 ({MAX_ARRAY_ELEMENTS} elements)"
            ))
        })?;
    let width: u64 = if a.dtype == Dtype::F32 { 4 } else { 8 };
    let arrays: u64 = if a.backward { 8 } else { 5 };
    let rows = (a.batch as u64) * (a.heads as u64) * (a.len as u64);
    let bytes = elems
        .saturating_mul(arrays)
        .saturating_add(rows.saturating_mul(2))
        .saturating_mul(width);
    let (available, source) = efa_train::memory::available_memory();
    if bytes > available {
        return Err(CliError::new(format!(
            "efa bench attention: {sizes} = {elems} elements per array needs about {} ({arrays} \
             arrays), but {} is available ({source})",
            efa_train::memory::human_bytes(bytes),
            efa_train::memory::human_bytes(available)
        )));
    }
    let (b, h, n, d) = (a.batch as f64, a.heads as f64, a.len as f64, a.dim as f64);
    let per_rep = 4.0 * b * h * n * n * d * if a.backward { 4.5 } else { 1.0 };
    let total = per_rep * (a.reps as f64 + 2.0);
    if total > MAX_BENCH_FLOPS {
        return Err(CliError::new(format!(
            "efa bench attention: {sizes} with --reps {} is about {total:.2e} FLOPs, above the \
             limit of {MAX_BENCH_FLOPS:.0e}; lower the sizes or --reps",
            a.reps
        )));
    }
    Ok(())
}

fn attention(a: AttentionArgs) -> Result<(), CliError> {
    check_attention_sizes(&a)?;
    let threads = a.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    crate::common::check_threads(threads, "efa bench attention: ")?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| CliError::new(format!("efa bench attention: thread pool: {e}")))?;
    let causal = a.mask == BenchMask::Causal;
    let mask = if causal { Mask::causal() } else { Mask::none() };
    let (t, sgemm) = pool.install(|| -> Result<_, CliError> {
        let t = match a.dtype {
            Dtype::F32 => time_attention::<f32>(&a, &mask)?,
            Dtype::F64 => time_attention::<f64>(&a, &mask)?,
        };
        Ok((t, (!a.no_baselines).then(sgemm_ceiling)))
    })?;
    let flops = t.flops;
    let gf = |ms: f64, mult: f64| mult * flops / (ms * 1e-3) / 1e9;
    let dtype = if a.dtype == Dtype::F32 { "f32" } else { "f64" };
    let mask_name = if causal { "causal" } else { "none" };
    if a.json {
        let mut obj = serde_json::json!({
            "batch": a.batch, "heads": a.heads, "len": a.len, "dim": a.dim, "mask": mask_name,
            "threads": threads, "dtype": dtype, "fwd_ms": t.fwd_ms, "fwd_gflops": gf(t.fwd_ms, 1.0),
        });
        if let Some(ms) = t.fwdbwd_ms {
            obj["fwdbwd_ms"] = serde_json::json!(ms);
            obj["fwdbwd_gflops"] = serde_json::json!(gf(ms, 3.5));
        }
        obj["naive_fwd_ms"] = serde_json::json!(t.naive_ms);
        obj["sgemm_gflops"] = serde_json::json!(sgemm.map(|c| c.efa_gflops));
        obj["matrixmultiply_gflops"] = serde_json::json!(sgemm.map(|c| c.reference_gflops));
        obj["fma_peak_gflops"] = serde_json::json!(sgemm.map(|c| c.peak_gflops));
        outln!("{obj}")?;
    } else {
        outln!(
            "attention {dtype} B={} H={} N={} D={} mask={mask_name} threads={threads} simd={}",
            a.batch,
            a.heads,
            a.len,
            a.dim,
            efa_num::simd::active().name()
        )?;
        outln!(
            "  forward           {:9.3} ms  {:7.1} GFLOP/s",
            t.fwd_ms,
            gf(t.fwd_ms, 1.0)
        )?;
        if let Some(ms) = t.fwdbwd_ms {
            outln!(
                "  forward+backward  {:9.3} ms  {:7.1} GFLOP/s (3.5× forward FLOPs)",
                ms,
                gf(ms, 3.5)
            )?;
        }
        match t.naive_ms {
            Some(ms) => outln!(
                "  naive f64 forward {:9.3} ms  ({:.1}× slower)",
                ms,
                ms / t.fwd_ms
            )?,
            None if a.no_baselines => outln!("  naive f64 forward skipped (--no-baselines)")?,
            None => outln!("  naive f64 forward skipped (too large)")?,
        }
        match sgemm {
            None => outln!("  FMA peak and sgemm 2048³ ceilings skipped (--no-baselines)")?,
            Some(c) => {
                let p = c.peak_gflops;
                outln!(
                    "  FMA peak          {p:9.1} GFLOP/s ({}, measured on the same pool); forward \
                     {:.1} % of it",
                    c.isa.name(),
                    pct_of_peak(gf(t.fwd_ms, 1.0), p)
                )?;
                outln!(
                    "  sgemm 2048³ efa   {:9.1} GFLOP/s ({:.1} % of peak)",
                    c.efa_gflops,
                    pct_of_peak(c.efa_gflops, p)
                )?;
                outln!(
                    "  sgemm 2048³ mm    {:9.1} GFLOP/s ({:.1} % of peak, matrixmultiply)",
                    c.reference_gflops,
                    pct_of_peak(c.reference_gflops, p)
                )?;
            }
        }
    }
    Ok(())
}
