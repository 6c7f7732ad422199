//! `linear`: `y = x·W + b` over the last axis as one tape node (one GEMM with the bias as
//! its initial value; backward: `dx = dy·Wᵀ`, `dW = xᵀ·dy` over all leading axes at once,
//! `db = Σ dy` in `efa_num::sum`'s order), instead of a matmul node, a broadcast add node and its reduction.

use efa_num::{MatMut, MatRef, Real};
use efa_tape::{FusedOp, Tape, TapeError, Var};
use ndarray::{ArrayD, IxDyn};

const NAME: &str = "fused:linear";

#[derive(Clone)]
struct LinearOp;

/// Multiply-adds `m·k·n` from which a product runs on the whole rayon pool: about 30 µs of
/// single-threaded work, well above the cost of a fork-join.
const PAR_MIN_WORK: usize = 1 << 18;

/// `C ← A·B (+ C if accumulate)` on strided views (transposed operands read in place).
fn gemm<T: Real>(a: MatRef<'_, T>, b: MatRef<'_, T>, c: MatMut<'_, T>, accumulate: bool) {
    let beta = if accumulate { T::ONE } else { T::ZERO };
    // Large products split `C` over the current pool (`gemm_par`: rows or columns of `C` only,
    // never `k`, so the bits are those of the single-threaded product at any thread count).
    if a.rows() * a.cols() * b.cols() >= PAR_MIN_WORK {
        efa_num::gemm::gemm_par(T::ONE, a, b, beta, c)
    } else {
        T::gemm(T::ONE, a, b, beta, c)
    }
}

fn shapes<T: Real>(inputs: &[&ArrayD<T>]) -> Result<(usize, usize, usize), TapeError> {
    let (x, w) = (inputs[0], inputs[1]);
    let fi = *x.shape().last().unwrap_or(&0);
    if x.ndim() == 0 || w.ndim() != 2 || w.shape()[0] != fi {
        return Err(TapeError::new(
            NAME,
            format!(
                "x {:?} times W {:?}: W must be [{fi}, out]",
                x.shape(),
                w.shape()
            ),
        ));
    }
    let fo = w.shape()[1];
    if let Some(b) = inputs.get(2) {
        if b.shape() != [fo] {
            return Err(TapeError::new(
                NAME,
                format!("bias must be [{fo}], got {:?}", b.shape()),
            ));
        }
    }
    Ok((x.len() / fi.max(1), fi, fo))
}

impl<T: Real> FusedOp<T> for LinearOp {
    fn name(&self) -> &str {
        "linear"
    }

    fn forward(&mut self, inputs: &[&ArrayD<T>]) -> Result<Vec<ArrayD<T>>, TapeError> {
        let (m, fi, fo) = shapes(inputs)?;
        let x = inputs[0].as_standard_layout();
        let w = inputs[1].as_standard_layout();
        let bias = inputs.get(2).map(|b| b.as_standard_layout());
        // y starts as the bias in every row (written once, no zero-fill first), or zeros.
        let mut y = match &bias {
            Some(b) => {
                let b = b.as_slice().expect("standard layout");
                let mut y = efa_num::pool::take(m * fo);
                for _ in 0..m {
                    y.extend_from_slice(b);
                }
                y
            }
            None => efa_num::pool::filled(m * fo, T::ZERO),
        };
        if m > 0 && fo > 0 {
            let x = x.as_slice().expect("standard layout");
            let w = w.as_slice().expect("standard layout");
            gemm(
                MatRef::row_major(x, m, fi, fi),
                MatRef::row_major(w, fi, fo, fo),
                MatMut::row_major(&mut y, m, fo, fo),
                bias.is_some(),
            );
        }
        let mut shape = inputs[0].shape().to_vec();
        *shape.last_mut().expect("x has an axis") = fo;
        Ok(vec![
            ArrayD::from_shape_vec(IxDyn(&shape), y).expect("sizes match")
        ])
    }

    fn backward(
        &self,
        inputs: &[&ArrayD<T>],
        _outputs: &[&ArrayD<T>],
        d_outputs: &[Option<&ArrayD<T>>],
        needs_grad: &[bool],
    ) -> Result<Vec<Option<ArrayD<T>>>, TapeError> {
        let (m, fi, fo) = shapes(inputs)?;
        let Some(dy) = d_outputs[0] else {
            return Ok(inputs
                .iter()
                .zip(needs_grad)
                .map(|(x, &need)| need.then(|| ArrayD::zeros(x.raw_dim())))
                .collect());
        };
        let dy = dy.as_standard_layout();
        let dy = dy.as_slice().expect("standard layout");
        let x = inputs[0].as_standard_layout();
        let x = x.as_slice().expect("standard layout");
        let w = inputs[1].as_standard_layout();
        let w = w.as_slice().expect("standard layout");
        let mut out = Vec::with_capacity(inputs.len());
        out.push(needs_grad[0].then(|| {
            let mut dx = efa_num::pool::filled(m * fi, T::ZERO);
            if m > 0 && fi > 0 {
                // forward computed y = x·W, so dx = dy·Wᵀ (W read transposed).
                let (dy, w) = (
                    MatRef::row_major(dy, m, fo, fo),
                    MatRef::row_major(w, fi, fo, fo),
                );
                gemm(dy, w.t(), MatMut::row_major(&mut dx, m, fi, fi), false);
            }
            ArrayD::from_shape_vec(inputs[0].raw_dim(), dx).expect("sizes match")
        }));
        out.push(needs_grad[1].then(|| {
            let mut dw = efa_num::pool::filled(fi * fo, T::ZERO);
            if fi > 0 && fo > 0 {
                // dW = xᵀ·dy (x read transposed).
                let (x, dy) = (
                    MatRef::row_major(x, m, fi, fi),
                    MatRef::row_major(dy, m, fo, fo),
                );
                gemm(x.t(), dy, MatMut::row_major(&mut dw, fi, fo, fo), false);
            }
            ArrayD::from_shape_vec(IxDyn(&[fi, fo]), dw).expect("sizes match")
        }));
        if inputs.len() > 2 {
            out.push(needs_grad[2].then(|| {
                // Σ over rows in `efa_num::sum`'s order (a gathered bias sums the same way).
                let mut db = vec![T::ZERO; fo];
                efa_num::sum::col_sums(&mut db, dy, fo, m);
                ArrayD::from_shape_vec(IxDyn(&[fo]), db).expect("sizes match")
            }));
        }
        Ok(out)
    }

    /// `2·m·in·out` forward; backward `2·m·in·out` for each of dx and dW.
    fn flops(&self, inputs: &[&ArrayD<T>], backward: bool) -> u64 {
        let Ok((m, fi, fo)) = shapes(inputs) else {
            return 0;
        };
        let f = efa_tape::stats::gemm_flops(1, m, fo, fi);
        if backward {
            f.saturating_mul(2)
        } else {
            f
        }
    }
}

/// Records [`TapeNn::linear`](crate::TapeNn::linear) (documented there).
pub(crate) fn linear<T: Real>(
    tape: &mut Tape<T>,
    x: Var,
    w: Var,
    b: Option<Var>,
) -> Result<Var, TapeError> {
    let mut inputs = vec![x, w];
    inputs.extend(b);
    Ok(tape.fused(Box::new(LinearOp), &inputs)?[0])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TapeNn;

    fn input(shape: &[usize], seed: f64) -> ArrayD<f64> {
        let mut i = 0.0;
        ArrayD::from_shape_fn(IxDyn(shape), |_| {
            i += 1.0;
            (i * 0.53 + seed).cos()
        })
    }

    #[test]
    fn linear_equals_matmul_plus_bias_and_passes_the_audit() {
        for bias in [true, false] {
            let (x, w, b) = (
                input(&[2, 3, 4], 0.2),
                input(&[4, 5], 0.6),
                input(&[5], 1.1),
            );
            let mut tape = Tape::<f64>::new();
            let (xv, wv, bv) = (
                tape.param("x", x.clone()).unwrap(),
                tape.param("w", w.clone()).unwrap(),
                tape.param("b", b.clone()).unwrap(),
            );
            let y = tape.linear(xv, wv, bias.then_some(bv)).unwrap();
            let mut want = tape.matmul(xv, wv, false, false).unwrap();
            if bias {
                want = tape.add(want, bv).unwrap();
            }
            let (y, want) = (tape.value(y), tape.value(want));
            assert_eq!(y.shape(), [2, 3, 5]);
            for (a, c) in y.iter().zip(want.iter()) {
                assert!((a - c).abs() < 1e-14, "{a} vs {c}");
            }
            let mut params = vec![("x", x), ("w", w)];
            if bias {
                params.push(("b", b));
            }
            efa_testkit::tape::assert_audit(&params, |tape, v| {
                let y = tape.linear(v[0], v[1], v.get(2).copied())?;
                let y = tape.square(y)?;
                tape.sum_all(y)
            });
        }
    }

    /// A product above [`PAR_MIN_WORK`] (split over the pool) gives the same bits at 1 and 2
    /// threads, in the forward and in both operand gradients, and the bits of the
    /// single-threaded `T::gemm` (a product below the threshold runs on it).
    #[test]
    fn large_products_same_bits_at_one_and_two_threads() {
        let (m, fi, fo) = (1000, 37, 45);
        assert!(m * fi * fo >= PAR_MIN_WORK);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let x = input(&[m, fi], 0.3).mapv(|v| v as f32);
                let w = input(&[fi, fo], 0.7).mapv(|v| v as f32);
                let b = input(&[fo], 1.3).mapv(|v| v as f32);
                let dy = input(&[m, fo], 2.1).mapv(|v| v as f32);
                let mut op = LinearOp;
                let y = FusedOp::<f32>::forward(&mut op, &[&x, &w, &b]).unwrap();
                let g = op
                    .backward(&[&x, &w, &b], &[&y[0]], &[Some(&dy)], &[true, true, true])
                    .unwrap();
                let bits = |a: &ArrayD<f32>| a.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                let mut want_dw = vec![0f32; fi * fo];
                // dW = xᵀ·dy through the single-threaded product.
                f32::gemm(
                    1.0,
                    MatRef::row_major(x.as_slice().unwrap(), m, fi, fi).t(),
                    MatRef::row_major(dy.as_slice().unwrap(), m, fo, fo),
                    0.0,
                    MatMut::row_major(&mut want_dw, fi, fo, fo),
                );
                let dw = g[1].as_ref().unwrap();
                assert!(dw
                    .iter()
                    .zip(&want_dw)
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
                [
                    bits(&y[0]),
                    bits(g[0].as_ref().unwrap()),
                    bits(dw),
                    bits(g[2].as_ref().unwrap()),
                ]
            })
        };
        assert_eq!(run(1), run(2));
    }

    #[test]
    fn shape_mismatches_are_errors() {
        let mut tape = Tape::<f64>::new();
        let x = tape.param("x", input(&[2, 3], 0.0)).unwrap();
        let w = tape.param("w", input(&[4, 5], 0.0)).unwrap();
        let e = tape.linear(x, w, None).unwrap_err().to_string();
        assert!(
            e.contains("x [2, 3] times W [4, 5]: W must be [3, out]"),
            "{e}"
        );
        let w = tape.param("w2", input(&[3, 5], 0.0)).unwrap();
        let b = tape.param("b", input(&[4], 0.0)).unwrap();
        let e = tape.linear(x, w, Some(b)).unwrap_err().to_string();
        assert!(e.contains("bias must be [5], got [4]"), "{e}");
    }
}
