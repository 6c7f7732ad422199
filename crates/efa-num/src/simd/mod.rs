//! SIMD row kernels with run-time dispatch.
//!
//! The CPU is probed once ([`detected`], cached): AVX-512F, else AVX2 + FMA, else the scalar
//! path (always compiled). The environment variable `EFA_SIMD=scalar|avx2|avx512` forces a
//! variant; a variant the CPU lacks (or an unknown value) falls back to the scalar path with a
//! note on stderr. Every kernel is one `#[inline(always)]` body generic over [`SimdVec`],
//! instantiated in `#[target_feature]` wrappers; the `*_with` forms take an explicit [`Isa`] so
//! tests can call each variant directly.
//!
//! Reduction order is fixed per variant (four vector accumulators, pairwise lane reduction,
//! then the tail in index order), so results are reproducible run to run.
//!
//! The double-double reference type [`crate::Dd`] has no SIMD kernels: every typed front end
//! (`dot`, `axpy`, `scale`, `max`, `sum`, `sum_exp`, `exp_sub_sum`, `exp_slice` and their
//! `_with` forms) checks for it first and runs a plain loop in index order in Dd arithmetic
//! (sums accumulated in Dd, `Dd::exp`); `isa` is then ignored. Code that dispatches with
//! [`crate::simd_by_kind!`] runs its bodies for Dd on a one-lane double-double "vector"
//! (`dd_lane`: every lane operation the Dd one, the exponential `Dd::exp`), whatever the
//! instruction set: scalar code with the kernel's order of operations.

mod dd_lane;
mod dd_path;
mod dispatch;
mod kernels;
mod strided;
mod vector;

#[cfg(target_arch = "x86_64")]
pub mod ln16;
#[cfg(target_arch = "x86_64")]
pub mod row16;
#[cfg(target_arch = "x86_64")]
pub mod transpose16;
#[cfg(target_arch = "x86_64")]
pub mod transpose8;

use crate::Real;
use std::any::TypeId;
use std::sync::OnceLock;

#[cfg(target_arch = "x86_64")]
pub use vector::{Avx2F32, Avx2F64, Avx512F32, Avx512F64};
pub use vector::{Lane, SimdElem, SimdVec};

/// Asks for the cache line holding `p` in the first-level cache: a hint with no effect on any
/// value, for any address (a prefetch never faults; nothing happens off x86-64).
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86-64, and a prefetch neither faults nor changes memory,
    // whatever the address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks for every cache line that holds part of `s` in the second-level cache (a hint, as
/// [`prefetch`]): for data a kernel will read soon but not at once, such as saved activations
/// a backward pass would otherwise read from main memory.
#[inline]
pub fn prefetch_l2<T>(s: &[T]) {
    let bytes = std::mem::size_of_val(s);
    #[cfg(target_arch = "x86_64")]
    if bytes > 0 {
        const LINE: usize = 64;
        let first = s.as_ptr().cast::<u8>();
        let end = first.wrapping_add(bytes);
        // From the start of the line holding the first byte, one address per line.
        let mut at = first.wrapping_sub(first as usize % LINE);
        while at < end {
            // SAFETY: SSE is part of x86-64, and a prefetch neither faults nor changes
            // memory, whatever the address.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
                _mm_prefetch::<_MM_HINT_T1>(at.cast());
            }
            at = at.wrapping_add(LINE);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// An instruction-set variant of the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable scalar code (always available).
    Scalar,
    /// AVX2 with FMA (256-bit).
    Avx2,
    /// AVX-512F (512-bit).
    Avx512,
}

impl Isa {
    /// All variants, slowest first.
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

    /// Lower-case name as accepted by `EFA_SIMD`.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Whether this CPU can run the variant (probed once, cached).
    pub fn is_supported(self) -> bool {
        let best = *DETECTED.get_or_init(detect);
        match self {
            Isa::Scalar => true,
            Isa::Avx2 => best != Isa::Scalar,
            Isa::Avx512 => best == Isa::Avx512,
        }
    }

    /// Parses an `EFA_SIMD` value (`scalar`, `avx2`, `avx512`; case and surrounding blanks
    /// ignored).
    pub fn parse(s: &str) -> Option<Isa> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Some(Isa::Scalar),
            "avx2" => Some(Isa::Avx2),
            "avx512" => Some(Isa::Avx512),
            _ => None,
        }
    }

    /// This variant if supported, otherwise [`Isa::Scalar`].
    pub fn or_scalar(self) -> Isa {
        if self.is_supported() {
            self
        } else {
            Isa::Scalar
        }
    }
}

static DETECTED: OnceLock<Isa> = OnceLock::new();
static ACTIVE: OnceLock<Isa> = OnceLock::new();

fn detect() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            return Isa::Avx512;
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            return Isa::Avx2;
        }
    }
    Isa::Scalar
}

/// The best variant this CPU supports (probed once).
pub fn detected() -> Isa {
    *DETECTED.get_or_init(detect)
}

/// The variant the dispatching kernels use: `EFA_SIMD` if set and supported, else
/// [`detected`]. Decided once per process.
pub fn active() -> Isa {
    *ACTIVE.get_or_init(|| match std::env::var("EFA_SIMD") {
        Err(_) => detected(),
        Ok(v) => match Isa::parse(&v) {
            Some(isa) if isa.is_supported() => isa,
            Some(isa) => {
                eprintln!(
                    "note: EFA_SIMD={} is not supported by this CPU; using scalar",
                    isa.name()
                );
                Isa::Scalar
            }
            None => {
                eprintln!("note: EFA_SIMD={v:?} is not one of scalar|avx2|avx512; using scalar");
                Isa::Scalar
            }
        },
    })
}

/// Which of the three element types `T` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElemKind {
    /// `f32`
    F32,
    /// `f64`
    F64,
    /// [`crate::Dd`], the double-double reference type: no SIMD kernels (the front ends of
    /// this module and of [`crate::gemm`] run scalar double-double loops instead, and
    /// [`crate::simd_by_kind!`] panics).
    Dd,
}

/// The element kind of `T` (a compile-time constant after monomorphisation).
#[inline(always)]
pub fn elem_kind<T: Real>() -> ElemKind {
    let t = TypeId::of::<T>();
    if t == TypeId::of::<f32>() {
        ElemKind::F32
    } else if t == TypeId::of::<f64>() {
        ElemKind::F64
    } else if t == TypeId::of::<crate::Dd>() {
        ElemKind::Dd
    } else {
        unreachable!("efa-num: Real is sealed to f32, f64 and Dd")
    }
}

pub use kernels::{
    axpy, axpy_with, dot, dot_with, exp_slice, exp_slice_with, exp_sub_sum, exp_sub_sum_with, max,
    max_with, scale, scale_with, sum, sum_exp, sum_exp_with, sum_with,
};

/// The row kernels' generic bodies, for fused kernels elsewhere that run several of them in one
/// dispatched call (inside their own `#[target_feature]` variants) and must give exactly the
/// values of the separate calls: the same operations in the same order.
pub mod bodies {
    pub use super::kernels::{dot_body, exp_sub_sum_body, max_body, scale_body, sum_body};
    pub use super::strided::{exp_shift_strided, SIDE};
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_dd;
#[cfg(test)]
mod tests_exp;
#[cfg(test)]
mod tests_lanes;
#[cfg(all(test, target_arch = "x86_64"))]
mod tests_pack;
