use super::*;

fn variants() -> Vec<Isa> {
    [Isa::Scalar, Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|i| i.is_supported())
        .collect()
}

fn val(k: usize) -> f32 {
    ((k as f32 * 0.618).sin() * 4.0).exp() - 2.0
}

/// Every variant against the plain loops, bitwise: three sources with repeated and NONE
/// rows over segments that start mid-chunk and end in a partial vector, and a bias.
#[test]
fn gather_rows_every_variant_is_the_plain_loop() {
    // More rows than one task of the pool takes (rows split over tasks).
    let (rows, cw, chunks) = (2 * GATHER_ROWS + 13, 75, 3);
    let tables: Vec<Vec<f32>> = [(5, 225), (4, 88), (7, 9)]
        .iter()
        .map(|&(r, f)| (0..r * f).map(|k| val(k + 31 * f)).collect())
        .collect();
    let fs = [225, 88, 9];
    let segs: Vec<Vec<(usize, usize, usize, usize)>> = vec![
        vec![(0, 0, 75, 0), (1, 0, 75, 75), (2, 0, 75, 150)],
        vec![(0, 20, 75, 0), (1, 0, 33, 55)],
        vec![(2, 3, 12, 0)],
    ];
    let ids: Vec<Vec<usize>> = (0..3)
        .map(|p| {
            (0..rows)
                .map(|r| match (r * (p + 2) + p) % 9 {
                    8 => NONE,
                    k => k % (tables[p].len() / fs[p]),
                })
                .collect()
        })
        .collect();
    let bias: Vec<f32> = (0..chunks * cw).map(|k| val(k + 7000)).collect();
    // All three sources with the bias; the last two alone (columns no source covers)
    // without it.
    for (first, with_bias) in [(0, true), (1, false)] {
        let mut want = vec![vec![0.0f32; rows * cw]; chunks];
        for r in 0..rows {
            for p in first..3 {
                if ids[p][r] == NONE {
                    continue;
                }
                for &(c, lo, hi, off) in &segs[p] {
                    for j in lo..hi {
                        want[c][r * cw + j] += tables[p][ids[p][r] * fs[p] + off + j - lo];
                    }
                }
            }
            if with_bias {
                for c in 0..chunks {
                    for j in 0..cw {
                        want[c][r * cw + j] += bias[c * cw + j];
                    }
                }
            }
        }
        for isa in variants() {
            let srcs: Vec<Source<f32>> = (first..3)
                .map(|p| Source {
                    table: &tables[p],
                    f: fs[p],
                    ids: &ids[p],
                    segs: &segs[p],
                })
                .collect();
            let b = with_bias.then_some(bias.as_slice());
            let outs = gather_rows(isa, chunks, rows, cw, &srcs, b);
            assert_eq!(outs.len(), chunks);
            for (o, w) in outs.iter().zip(&want) {
                assert_eq!(o.len(), w.len());
                for (x, y) in o.iter().zip(w) {
                    assert_eq!(x.to_bits(), y.to_bits(), "{isa:?} from {first}");
                }
            }
        }
    }
}

/// f64, an empty segment, a chunk no source reaches, and no rows: every variant against
/// the plain loop, bitwise (the f32 test above covers the general layout).
#[test]
fn gather_rows_f64_and_empty_shapes() {
    let (cw, chunks, f) = (19, 3, 40);
    let table: Vec<f64> = (0..4 * f).map(|k| val(k) as f64 * 1.3).collect();
    // Chunk 0: columns 2..19 from offset 5; chunk 1: an empty segment; chunk 2: nothing.
    let segs = [(0, 2, 19, 5), (1, 7, 7, 0)];
    for rows in [0, 1, 5] {
        let ids: Vec<usize> = (0..rows)
            .map(|r| if r == 3 { NONE } else { r % 4 })
            .collect();
        let bias: Vec<f64> = (0..chunks * cw).map(|k| val(k + 900) as f64).collect();
        let mut want = vec![vec![0.0f64; rows * cw]; chunks];
        for (r, &id) in ids.iter().enumerate() {
            for &(c, lo, hi, off) in &segs {
                if id != NONE {
                    for j in lo..hi {
                        want[c][r * cw + j] += table[id * f + off + j - lo];
                    }
                }
            }
            for (c, w) in want.iter_mut().enumerate() {
                for j in 0..cw {
                    w[r * cw + j] += bias[c * cw + j];
                }
            }
        }
        for isa in variants() {
            let src = Source {
                table: &table,
                f,
                ids: &ids,
                segs: &segs,
            };
            let outs = gather_rows(isa, chunks, rows, cw, &[src], Some(&bias));
            assert_eq!(outs.len(), chunks);
            for (o, w) in outs.iter().zip(&want) {
                assert_eq!(o.len(), w.len(), "{isa:?} rows {rows}");
                for (x, y) in o.iter().zip(w) {
                    assert_eq!(x.to_bits(), y.to_bits(), "{isa:?} rows {rows}");
                }
            }
        }
    }
}

/// Every variant against the definition (`efa_num::sum`'s order), bitwise, in f32 and
/// f64, for widths around the vector blocks and repeated rows in a non-sorted order: 20
/// picks (one block: the plain loop) and 300 (three blocks and their tree).
#[test]
fn sum_rows_every_variant_is_the_definition() {
    let stride = 140;
    let src32: Vec<f32> = (0..stride * 9).map(val).collect();
    let src64: Vec<f64> = (0..stride * 9).map(|k| val(k) as f64 * 1.1).collect();
    // More picked rows than the prefetch looks ahead.
    let few = [3, 0, 8, 3, 5, 1, 3, 7, 2, 6, 0, 4, 8, 8, 1, 5, 3, 2, 7, 6];
    let many: Vec<usize> = (0..300).map(|k| (k * 7 + k / 13) % 9).collect();
    for picked in [&few[..], &many[..]] {
        for isa in variants() {
            for w in [0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 70, 129] {
                let mut got = vec![f32::NAN; w];
                sum_rows(isa, &mut got, &src32, picked, stride);
                let mut want = vec![f32::NAN; w];
                sum::terms_into(&mut want, picked.len(), |k, acc| {
                    for (j, a) in acc.iter_mut().enumerate() {
                        *a += src32[picked[k] * stride + j];
                    }
                });
                let mut got64 = vec![f64::NAN; w];
                let p64 = &picked[..picked.len() - 7];
                sum_rows(isa, &mut got64, &src64, p64, stride);
                let mut want64 = vec![f64::NAN; w];
                sum::terms_into(&mut want64, p64.len(), |k, acc| {
                    for (j, a) in acc.iter_mut().enumerate() {
                        *a += src64[p64[k] * stride + j];
                    }
                });
                for j in 0..w {
                    assert_eq!(got[j].to_bits(), want[j].to_bits(), "{isa:?} w {w}");
                    assert_eq!(got64[j].to_bits(), want64[j].to_bits(), "{isa:?} w {w}");
                }
            }
        }
    }
}
