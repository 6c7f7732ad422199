//! The fused ops, one per module, each an [`efa_tape::FusedOp`] with its forward, backward,
//! FLOP count, docs and tests, recorded through [`crate::TapeNn`]:
//!
//! - [`linear`]: `y = x·W + b` over the last axis;
//! - [`gather`]: `gather_sum` (rows of several tables summed into column ranges) and
//!   `bag_sum` (an embedding bag), with its row kernels in `gather_rows`;
//! - [`attention`]: the `efa-attn` kernel, `o` and `lse` as two outputs;
//! - [`nll`]: exponential-family negative log-likelihoods from `efa-expfam`, per row;
//! - [`link`]: the families' links from a model output to natural parameters;
//! - [`block`]: the post-norm transformer block as one node, with its attention kernel
//!   ([`block::rows`]);
//! - [`shared_attention`]: attention for samples sharing a context up to one replaced row
//!   each (per group leave-one-out sums), `shared_context_attention`.

/// `fn $name<T: Real>(args) -> R` running `$body(args)` (an `#[inline(always)]` function)
/// compiled for the instruction set `$isa` when the CPU supports it: the same code, with its
/// element-wise loops free to use the wider registers. Each element's arithmetic and every
/// sum's order stay as written (floating-point operations are never reassociated or
/// contracted), so the results are the same bits.
macro_rules! isa_compiled {
    ($name:ident => $body:ident, $isa:expr, ($($a:ident : $t:ty),*) -> $r:ty) => {
        fn $name<T: Real>($($a: $t),*) -> $r {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx2,fma")]
                unsafe fn v512<T: Real>($($a: $t),*) -> $r {
                    $body($($a),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn v256<T: Real>($($a: $t),*) -> $r {
                    $body($($a),*)
                }
                let isa: ::efa_num::simd::Isa = $isa;
                match isa {
                    // SAFETY: the CPU supports the instruction set (checked in the guard).
                    ::efa_num::simd::Isa::Avx512 if isa.is_supported() => {
                        return unsafe { v512($($a),*) }
                    }
                    // SAFETY: as above.
                    ::efa_num::simd::Isa::Avx2 if isa.is_supported() => {
                        return unsafe { v256($($a),*) }
                    }
                    _ => {}
                }
            }
            $body($($a),*)
        }
    };
}

pub mod attention;
pub mod block;
pub mod gather;
mod gather_rows;
pub mod linear;
pub mod link;
pub mod nll;
pub mod shared_attention;
