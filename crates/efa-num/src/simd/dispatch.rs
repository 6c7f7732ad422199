//! The dispatch macros of kernels outside this crate, so that every `#[target_feature]` and
//! instruction-set choice of the workspace is made here (beside [`crate::simd_variants!`] and
//! [`crate::simd_by_kind!`] in `kernels.rs`).

/// Like [`crate::simd_variants!`], but the body takes a second vector type `H` of the same
/// element for partial column tails: AVX-512 bodies get the AVX2 register (half the width; on
/// cores that split 512-bit operations in two it costs half), the others their own type.
/// Generates `unsafe fn $disp::<E: SimdElem>(isa, args…)` (attention's tile products and
/// online softmax, `efa-attn`).
#[macro_export]
macro_rules! simd_tail_variants {
    ($body:ident, $disp:ident, ($($a:ident : $t:ty),*) -> $r:ty) => {
        /// Dispatches to the variant `isa`.
        ///
        /// # Safety
        /// `isa` must be supported by the CPU; pointers valid for the stated lengths.
        #[inline]
        unsafe fn $disp<E: $crate::simd::SimdElem>(isa: $crate::simd::Isa, $($a: $t),*) -> $r {
            /// # Safety
            /// AVX-512F must be supported; the body's own contract.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f")]
            unsafe fn v512<E: $crate::simd::SimdElem>($($a: $t),*) -> $r {
                // SAFETY: AVX-512F implies AVX2 and FMA, so both register types are usable;
                // the body's contract is this function's.
                unsafe { $body::<E::Avx512, E::Avx2>($($a),*) }
            }
            /// # Safety
            /// AVX2 and FMA must be supported; the body's own contract.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn v256<E: $crate::simd::SimdElem>($($a: $t),*) -> $r {
                // SAFETY: AVX2 and FMA are enabled here; the body's contract is this
                // function's.
                unsafe { $body::<E::Avx2, E::Avx2>($($a),*) }
            }
            // SAFETY: the caller guarantees `isa` is supported and the body's contract.
            unsafe {
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    $crate::simd::Isa::Avx512 => v512::<E>($($a),*),
                    #[cfg(target_arch = "x86_64")]
                    $crate::simd::Isa::Avx2 => v256::<E>($($a),*),
                    _ => $body::<E::One, E::One>($($a),*),
                }
            }
        }
    };
}

/// `fn $name<T: Real>(args) -> R` running `$body(args)` (an `#[inline(always)]` function)
/// compiled for the instruction set `$isa` when the CPU supports it: the same code, with its
/// element-wise loops free to use the wider registers. Each element's arithmetic and every
/// sum's order stay as written (floating-point operations are never reassociated or
/// contracted), so the results are the same bits (the fused block's and shared-context
/// attention's chunk bodies, `efa-nn`).
#[macro_export]
macro_rules! isa_compiled {
    ($name:ident => $body:ident, $isa:expr, ($($a:ident : $t:ty),*) -> $r:ty) => {
        fn $name<T: $crate::Real>($($a: $t),*) -> $r {
            #[cfg(target_arch = "x86_64")]
            {
                /// # Safety
                /// AVX-512F, AVX2 and FMA must be supported.
                #[target_feature(enable = "avx512f,avx2,fma")]
                unsafe fn v512<T: $crate::Real>($($a: $t),*) -> $r {
                    $body($($a),*)
                }
                /// # Safety
                /// AVX2 and FMA must be supported.
                #[target_feature(enable = "avx2,fma")]
                unsafe fn v256<T: $crate::Real>($($a: $t),*) -> $r {
                    $body($($a),*)
                }
                let isa: $crate::simd::Isa = $isa;
                match isa {
                    // SAFETY: the CPU supports the instruction set (checked in the guard).
                    $crate::simd::Isa::Avx512 if isa.is_supported() => {
                        return unsafe { v512($($a),*) }
                    }
                    // SAFETY: as above.
                    $crate::simd::Isa::Avx2 if isa.is_supported() => {
                        return unsafe { v256($($a),*) }
                    }
                    _ => {}
                }
            }
            $body($($a),*)
        }
    };
}
