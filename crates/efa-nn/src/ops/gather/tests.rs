//! Tests of `gather_sum` and `bag_sum`.

use super::*;
use crate::TapeNn;

fn table(r: usize, f: usize, seed: f64) -> ArrayD<f64> {
    ArrayD::from_shape_fn(IxDyn(&[r, f]), |ix| {
        ((ix[0] * 7 + ix[1] * 3) as f64 * 0.37 + seed).sin()
    })
}

#[test]
fn gather_sum_matches_a_direct_sum_and_passes_the_audit() {
    // Two 2-D parts at different columns, one with NONE entries and repeated rows, a bias,
    // and three output chunks.
    let ids_a = Array2::from_shape_vec((2, 3), vec![1, 0, 1, NONE, 2, 1]).unwrap();
    let ids_b = Array2::from_shape_vec((2, 3), vec![0, 1, 2, 0, NONE, 0]).unwrap();
    let ta = table(3, 4, 0.1);
    let tb = table(3, 6, 0.7);
    let bias = ArrayD::from_shape_fn(IxDyn(&[6]), |ix| ix[0] as f64 * 0.1 - 0.2);
    let parts = vec![
        Part {
            ids: ids_a.clone(),
            col: 2,
        },
        Part {
            ids: ids_b.clone(),
            col: 0,
        },
    ];
    let mut tape = Tape::<f64>::new();
    let a = tape.param("a", ta.clone()).unwrap();
    let b = tape.param("b", tb.clone()).unwrap();
    let c = tape.param("bias", bias.clone()).unwrap();
    let outs = tape
        .gather_sum(&[a, b], parts.clone(), Some(c), 6, 3)
        .unwrap();
    for (k, &o) in outs.iter().enumerate() {
        let v = tape.value(o);
        assert_eq!(v.shape(), [2, 3, 2]);
        for bi in 0..2 {
            for ni in 0..3 {
                for j in 0..2 {
                    let col = k * 2 + j;
                    let mut want = bias[[col]];
                    if ids_b[[bi, ni]] != NONE {
                        want += tb[[ids_b[[bi, ni]], col]];
                    }
                    if col >= 2 && ids_a[[bi, ni]] != NONE {
                        want += ta[[ids_a[[bi, ni]], col - 2]];
                    }
                    assert!((v[[bi, ni, j]] - want).abs() < 1e-15);
                }
            }
        }
    }
    efa_testkit::tape::assert_audit(&[("a", ta), ("b", tb), ("bias", bias)], |tape, vars| {
        let outs = tape.gather_sum(&vars[..2], parts.clone(), Some(vars[2]), 6, 3)?;
        // A loss that weights every output element differently.
        let s0 = tape.square(outs[0])?;
        let s1 = tape.scale(outs[1], 1.7)?;
        let s2 = tape.exp(outs[2])?;
        let a = tape.sum_all(s0)?;
        let b = tape.sum_all(s1)?;
        let c = tape.sum_all(s2)?;
        let ab = tape.add(a, b)?;
        tape.add(ab, c)
    });
}

/// The op's forward and backward against the plain loops they reorganise (part by part
/// over all positions, then the bias; each table row's and the bias's sum over its positions
/// in increasing order and `efa_num::sum`'s blocked order): bitwise equal in f32, with
/// repeated rows, NONE entries, and widths that end in partial vectors.
#[test]
fn gather_sum_is_bitwise_the_part_by_part_sum() {
    // More positions than `PARALLEL_PICKS` and than one block of rows (the parallel paths).
    let (b, n, width, chunks) = (70, 80, 90, 3);
    let cw = width / chunks;
    let val = |k: usize| ((k as f32 * 0.618).sin() * 3.0).exp() - 1.5;
    let tab = |r: usize, f: usize, s: usize| {
        ArrayD::from_shape_fn(IxDyn(&[r, f]), |ix| val(ix[0] * f + ix[1] + s))
    };
    let tables = [tab(4, 90, 11), tab(9, 70, 500), tab(3, 20, 900)];
    let cols = [0, 20, 61];
    let parts: Vec<Part> = (0..3)
        .map(|p| Part {
            ids: Array2::from_shape_fn((b, n), |(i, j)| {
                let k = (i * n + j) * (p + 3) + p;
                if k % 11 == 4 {
                    NONE
                } else {
                    k % (tables[p].shape()[0] - usize::from(p == 1))
                }
            }),
            col: cols[p],
        })
        .collect();
    let bias = ArrayD::from_shape_fn(IxDyn(&[width]), |ix| val(ix[0] + 2000));
    let mut op = GatherSumOp {
        parts: parts.clone(),
        width,
        chunks,
        bias: true,
    };
    let inputs = [&tables[0], &tables[1], &tables[2], &bias];
    let outs = FusedOp::<f32>::forward(&mut op, &inputs).unwrap();
    // Reference forward.
    let mut want = vec![0.0f32; b * n * width];
    for (p, part) in parts.iter().enumerate() {
        let f = tables[p].shape()[1];
        for (r, &id) in part.ids.iter().enumerate() {
            if id != NONE {
                for c in 0..f {
                    want[r * width + part.col + c] += tables[p][[id, c]];
                }
            }
        }
    }
    for row in want.chunks_mut(width) {
        for (x, &v) in row.iter_mut().zip(bias.iter()) {
            *x += v;
        }
    }
    for (c, o) in outs.iter().enumerate() {
        for (r, row) in o.as_slice().unwrap().chunks(cw).enumerate() {
            for (j, &x) in row.iter().enumerate() {
                assert_eq!(x.to_bits(), want[r * width + c * cw + j].to_bits());
            }
        }
    }
    // Reference backward (chunk 1 without a cotangent).
    let d: Vec<ArrayD<f32>> = (0..chunks)
        .map(|c| {
            ArrayD::from_shape_fn(IxDyn(&[b, n, cw]), |ix| {
                val(ix[1] * 31 + ix[2] + ix[0] * 977 + c * 7)
            })
        })
        .collect();
    let d_out = [Some(&d[0]), None, Some(&d[2])];
    let outs_ref: Vec<&ArrayD<f32>> = outs.iter().collect();
    let g = FusedOp::<f32>::backward(&op, &inputs, &outs_ref, &d_out, &[true; 4]).unwrap();
    let dfull =
        |r: usize, col: usize| d_out[col / cw].map(|d| d.as_slice().unwrap()[r * cw + col % cw]);
    for (p, part) in parts.iter().enumerate() {
        let f = tables[p].shape()[1];
        let mut want = vec![0.0f32; tables[p].len()];
        let ids = part.ids.as_slice().unwrap();
        for (id, row) in want.chunks_mut(f).enumerate() {
            let picked: Vec<usize> = (0..ids.len()).filter(|&r| ids[r] == id).collect();
            efa_num::sum::terms_into(row, picked.len(), |k, acc| {
                for (c, a) in acc.iter_mut().enumerate() {
                    if let Some(x) = dfull(picked[k], part.col + c) {
                        *a += x;
                    }
                }
            });
        }
        let got = g[p].as_ref().unwrap();
        for (x, w) in got.iter().zip(&want) {
            assert_eq!(x.to_bits(), w.to_bits(), "part {p}");
        }
    }
    let mut want = vec![0.0f32; width];
    efa_num::sum::terms_into(&mut want, b * n, |r, acc| {
        for (col, w) in acc.iter_mut().enumerate() {
            if let Some(x) = dfull(r, col) {
                *w += x;
            }
        }
    });
    for (x, w) in g[3].as_ref().unwrap().iter().zip(&want) {
        assert_eq!(x.to_bits(), w.to_bits(), "bias");
    }
}

#[test]
fn out_of_range_rows_are_errors_naming_the_position() {
    let mut tape = Tape::<f64>::new();
    let a = tape.param("a", table(3, 2, 0.0)).unwrap();
    let ids = Array2::from_shape_vec((1, 2), vec![0, 3]).unwrap();
    let e = tape
        .gather_sum(&[a], vec![Part { ids, col: 0 }], None, 2, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("index 3 at [0, 1] outside 0..3"), "{e}");
    // A 1-D table, a bias of the wrong width, and a part that overflows the output.
    let v = tape.param("v", ArrayD::zeros(IxDyn(&[3]))).unwrap();
    let one = Array2::from_shape_vec((1, 1), vec![0]).unwrap();
    let part = |col| {
        vec![Part {
            ids: one.clone(),
            col,
        }]
    };
    let e = tape
        .gather_sum(&[v], part(0), None, 1, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("table 0 must be at least 2-D, got [3]"), "{e}");
    let bias = tape.param("bias", ArrayD::zeros(IxDyn(&[3]))).unwrap();
    let e = tape
        .gather_sum(&[a], part(0), Some(bias), 2, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("bias must be [2], got [3]"), "{e}");
    let e = tape
        .gather_sum(&[a], part(1), None, 2, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("columns 1..3 do not fit [1, 1, 2]"), "{e}");
    // bag_sum: an out-of-range row and weights of the wrong shape.
    let ids = Array2::from_shape_vec((1, 2), vec![1, 5]).unwrap();
    let e = tape.bag_sum(a, ids.clone(), None).unwrap_err().to_string();
    assert!(e.contains("index 5 at [0, 1] outside 0..3"), "{e}");
    let e = tape
        .bag_sum(a, ids, Some(Array2::zeros((2, 2))))
        .unwrap_err()
        .to_string();
    assert!(e.contains("weights must have the shape of ids"), "{e}");
}

#[test]
fn bag_sum_matches_a_direct_sum_and_passes_the_audit() {
    let ids =
        Array2::from_shape_vec((3, 3), vec![1, 2, 1, NONE, 0, NONE, NONE, NONE, NONE]).unwrap();
    let w = Array2::from_shape_fn((3, 3), |(i, j)| (i * 3 + j) as f64 * 0.3 - 0.5);
    let t = table(3, 4, 0.3);
    for weights in [None, Some(w.clone())] {
        let mut tape = Tape::<f64>::new();
        let tv = tape.param("t", t.clone()).unwrap();
        let out = tape.bag_sum(tv, ids.clone(), weights.clone()).unwrap();
        let v = tape.value(out);
        assert_eq!(v.shape(), [3, 4]);
        for b in 0..3 {
            for c in 0..4 {
                let want: f64 = (0..3)
                    .filter(|&j| ids[[b, j]] != NONE)
                    .map(|j| weights.as_ref().map_or(1.0, |w| w[[b, j]]) * t[[ids[[b, j]], c]])
                    .sum();
                assert!((v[[b, c]] - want).abs() < 1e-15);
            }
        }
        efa_testkit::tape::assert_audit(&[("t", t.clone())], |tape, v| {
            let o = tape.bag_sum(v[0], ids.clone(), weights.clone())?;
            let o = tape.square(o)?;
            tape.sum_all(o)
        });
    }
}
