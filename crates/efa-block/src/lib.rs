//! The kernels of the fused-block forward plan, without a tape: functions and kernel objects
//! over arrays and slices, with their own error type. `efa-nn` wraps each as a `FusedOp`
//! (`TapeNn::post_norm_block`, `TapeNn::shared_context_attention`); this crate never sees the
//! tape.
//!
//! - [`block`]: one post-norm transformer block (`x = LN₁(x + MHA(x)); x = LN₂(x + FFN(x))`)
//!   forward and backward in one pass per chunk of samples, with its attention row kernels
//!   ([`block::rows`]);
//! - [`shared`]: attention for samples that share a context up to one replaced row each,
//!   computed once per context with leave-one-out sums.
//!
//! Chain: `efa-num` → `efa-attn` → `efa-block` → `efa-nn`.

pub mod block;
pub mod shared;

/// An error of a kernel: which kernel, and what is wrong (shapes named with their values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelError {
    /// The kernel (`fused:post_norm_block`, `fused:shared_context_attention`).
    pub op: &'static str,
    /// What is wrong.
    pub message: String,
}

impl KernelError {
    /// An error of kernel `op`.
    pub fn new(op: &'static str, message: impl Into<String>) -> Self {
        KernelError {
            op,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for KernelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.op, self.message)
    }
}

impl std::error::Error for KernelError {}

/// `2·batch·m·n·k`, saturating: the floating-point operations of `batch` products of an
/// `m × k` and a `k × n` matrix.
pub(crate) fn gemm_flops(batch: usize, m: usize, n: usize, k: usize) -> u64 {
    [batch, m, n, k]
        .iter()
        .fold(2u64, |acc, &x| acc.saturating_mul(x as u64))
}
