//! The sixteen-head packs of the lane-batched attention on AVX2 (`transpose8::pack16_f32` and
//! `unpack16_f32`) against the element loops. (With AVX-512 the attention packs through
//! `transpose16_at_f32` per block: a loop kernel like these measured no faster there.)

use super::transpose8::{pack16_f32, unpack16_f32};

/// Column counts with and without a partial last block of 8, sources whose row stride is
/// longer than their rows; nothing written past the packed block or past each output's rows.
#[test]
fn sixteen_heads_pack_and_unpack_as_the_element_loops() {
    if !is_x86_feature_detected!("avx2") {
        return;
    }
    for cols in [1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 40] {
        for rows in [1, 2, 5] {
            let rs = cols + 3;
            let src: Vec<f32> = (0..16 * rows * rs).map(|i| i as f32 * 0.25 - 9.0).collect();
            let from: [*const f32; 16] =
                std::array::from_fn(|g| src.as_ptr().wrapping_add(g * rows * rs));
            let n = rows * cols * 16;
            let mut packed = vec![f32::NAN; n + 16];
            // SAFETY: AVX2 is present; each source has `rows` rows of
            // `cols` at stride `rs`; `packed` holds rows·cols·16 elements and more.
            unsafe { pack16_f32(&from, rs as isize, (rows, cols), 4, packed.as_mut_ptr()) };
            for r in 0..rows {
                for c in 0..cols {
                    for g in 0..16 {
                        let want = src[g * rows * rs + r * rs + c];
                        let got = packed[(r * cols + c) * 16 + g];
                        assert_eq!(got, want, "pack {rows}×{cols}: ({r}, {c}) head {g}");
                    }
                }
            }
            assert!(
                packed[n..].iter().all(|x| x.is_nan()),
                "pack {rows}×{cols} overran"
            );
            let len = rows * cols + 5;
            let mut out = vec![f32::NAN; 16 * len];
            let to: [*mut f32; 16] =
                std::array::from_fn(|g| out.as_mut_ptr().wrapping_add(g * len));
            // SAFETY: AVX2 is present; `packed` holds rows·cols·16
            // elements; each output has rows·cols elements and more, none overlapping.
            unsafe { unpack16_f32(packed.as_ptr(), (rows, cols), &to) };
            for g in 0..16 {
                for idx in 0..len {
                    let got = out[g * len + idx];
                    if idx < rows * cols {
                        let want = src[g * rows * rs + idx / cols * rs + idx % cols];
                        assert_eq!(got, want, "unpack {rows}×{cols}: head {g} at {idx}");
                    } else {
                        assert!(got.is_nan(), "unpack {rows}×{cols}: head {g} wrote {idx}");
                    }
                }
            }
        }
    }
}
