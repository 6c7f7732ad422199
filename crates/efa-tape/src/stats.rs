//! Process-wide count of executed floating-point operations, for throughput reports
//! (`efa bench train`, `benches/train.rs`).
//!
//! Counted: **matmul and attention FLOPs** — the tape's matrix products (forward `2·m·n·k`
//! per (batched) product, backward `2·m·n·k` for each input gradient actually computed) and
//! whatever fused ops report through [`crate::FusedOp::flops`] (the attention op: `4·B·H·K`
//! per visible query–key pair forward, 2.5× that backward). Elementwise ops, reductions,
//! gathers, layer norms and the optimizer are not counted, so a model's GFLOP/s from this
//! counter is a lower bound on the arithmetic it executes.
//!
//! The counter is one global `AtomicU64` with `Relaxed` ordering (a handful of increments per
//! op, never per element). It is the tape's only global state and it is write-only for the
//! tape: nothing it computes depends on it. Concurrent tapes (rayon tasks, parallel tests)
//! all add to the same counter, so measure deltas around work that owns the process.

use std::sync::atomic::{AtomicU64, Ordering};

static FLOPS: AtomicU64 = AtomicU64::new(0);

/// Floating-point operations counted since the start of the process (or the last
/// [`reset_flops`]).
pub fn flops() -> u64 {
    FLOPS.load(Ordering::Relaxed)
}

/// Sets the counter back to zero.
pub fn reset_flops() {
    FLOPS.store(0, Ordering::Relaxed);
}

/// Adds `n` operations to the counter.
pub fn add_flops(n: u64) {
    if n > 0 {
        FLOPS.fetch_add(n, Ordering::Relaxed);
    }
}

/// FLOPs of `batch` products of an `m×k` by a `k×n` matrix: `2·batch·m·n·k` (saturating).
pub fn gemm_flops(batch: usize, m: usize, n: usize, k: usize) -> u64 {
    [batch, m, n, k]
        .iter()
        .fold(2u64, |acc, &x| acc.saturating_mul(x as u64))
}

#[cfg(test)]
mod tests {
    use super::gemm_flops;

    #[test]
    fn gemm_flops_is_two_mnk_per_batch() {
        assert_eq!(gemm_flops(1, 3, 4, 5), 120);
        assert_eq!(gemm_flops(7, 3, 4, 5), 840);
        assert_eq!(gemm_flops(2, 0, 4, 5), 0);
    }
}
