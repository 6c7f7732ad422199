//! The transposes of the attention's operands (`Kᵀ` for the scores, `Vᵀ` for `dP`): a head's
//! columns of a row-major matrix into the rows of a padded buffer. Only data moves, so every
//! path gives the same values.

use super::rows::Rows;
use efa_attn::micro::transpose_cols;
use efa_num::simd::Isa;
use efa_num::Real;

/// Transposes rows `[0, rows)`, columns `[c0, c0 + w)` of `src` into `dst` (`w × ldd`), zeroing
/// columns `[rows, ldd)` ([`transpose_cols`]: 16 × 16 register tiles with AVX-512 in f32).
///
/// # Panics
/// If `src` or `dst` is too short, or `ldd < rows`.
pub(super) fn transpose_block<T: Real>(
    isa: Isa,
    src: Rows<T>,
    c0: usize,
    w: usize,
    rows: usize,
    dst: &mut [T],
    ldd: usize,
) {
    transpose_cols(isa, src.data, src.ld, c0, w, rows, dst, ldd);
}

#[cfg(test)]
mod tests {
    use super::*;
    use efa_attn::micro::padded;

    fn check<T: Real>() {
        for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
            for rows in (0..=20).chain([31, 32, 33, 44, 47, 48, 50]) {
                for (c0, w) in [(0, 0), (0, 1), (3, 5), (0, 16), (16, 16), (5, 16), (2, 17)] {
                    for extra in [0, 16] {
                        let ld = c0 + w + 3;
                        let src: Vec<T> = (0..rows * ld)
                            .map(|i| T::from_f64(i as f64 * 0.5 - 7.0))
                            .collect();
                        let ldd = padded(rows.max(1)) + extra;
                        let mut got = vec![T::from_f64(f64::NAN); w * ldd];
                        transpose_block(isa, Rows { data: &src, ld }, c0, w, rows, &mut got, ldd);
                        for c in 0..w {
                            for r in 0..ldd {
                                let want = if r < rows {
                                    src[r * ld + c0 + c]
                                } else {
                                    T::ZERO
                                };
                                assert!(
                                    got[c * ldd + r].to_f64().to_bits() == want.to_f64().to_bits(),
                                    "{isa:?} rows {rows} c0 {c0} w {w} ldd {ldd} at {c},{r}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Both paths against the element-by-element definition: every instruction set, f32
    /// (the register tiles for 16 columns) and f64, rows that leave partial tiles, an offset
    /// column range and padding that must be zeroed.
    #[test]
    fn transpose_block_matches_the_definition() {
        check::<f32>();
        check::<f64>();
    }
}
