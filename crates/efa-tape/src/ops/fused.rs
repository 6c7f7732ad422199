//! Recording fused operations ([`FusedOp`]: several outputs, a mandatory backward) and running
//! their backward.
//!
//! A fused call records a head node (holding the op) followed by one node per output. In the
//! reverse sweep the outputs come first; when the sweep reaches the head, every output's
//! cotangent is final and the op's backward runs once with all of them.

use crate::error::{Result, TapeError};
use crate::op::{FusedOp, Op};
use crate::tape::{Tape, Var};
use efa_num::Real;
use ndarray::{ArrayD, IxDyn};

impl<T: Real> Tape<T> {
    /// Records a fused op on `inputs` and returns one `Var` per output it produced.
    pub fn fused(&mut self, mut op: Box<dyn FusedOp<T>>, inputs: &[Var]) -> Result<Vec<Var>> {
        let name = format!("fused:{}", op.name());
        let idx = inputs
            .iter()
            .map(|&v| self.check(v, &name))
            .collect::<Result<Vec<_>>>()?;
        let outs = {
            let vals: Vec<&ArrayD<T>> = idx.iter().map(|&i| self.val(i)).collect();
            let outs = op.forward(&vals)?;
            crate::stats::add_flops(op.flops(&vals, false));
            outs
        };
        if outs.is_empty() {
            return Err(TapeError::new(name, "forward returned no outputs"));
        }
        let head = self.push(
            Op::FusedHead {
                op,
                outputs: vec![],
            },
            idx,
            ArrayD::zeros(IxDyn(&[0])),
        );
        let vars: Vec<Var> = outs
            .into_iter()
            .map(|y| self.push(Op::FusedOutput, vec![head.idx], y))
            .collect();
        if let Op::FusedHead { outputs, .. } = &mut self.nodes[head.idx].op {
            *outputs = vars.iter().map(|v| v.idx).collect();
        }
        Ok(vars)
    }
}

/// Runs the fused op's backward at head node `i` and validates what it returned.
pub(crate) fn backward<T: Real>(
    tape: &Tape<T>,
    i: usize,
    op: &dyn FusedOp<T>,
    outputs: &[usize],
    d_outputs: &[Option<&ArrayD<T>>],
    need: &[bool],
) -> Result<Vec<Option<ArrayD<T>>>> {
    let name = format!("fused:{}", op.name());
    let node = &tape.nodes[i];
    let ins: Vec<&ArrayD<T>> = node.inputs.iter().map(|&j| tape.val(j)).collect();
    let outs: Vec<&ArrayD<T>> = outputs.iter().map(|&j| tape.val(j)).collect();
    let grads = op.backward(&ins, &outs, d_outputs, need)?;
    crate::stats::add_flops(op.flops(&ins, true));
    if grads.len() != ins.len() {
        return Err(TapeError::new(
            name,
            format!(
                "backward returned {} gradients for {} inputs",
                grads.len(),
                ins.len()
            ),
        ));
    }
    for (k, (g, x)) in grads.iter().zip(&ins).enumerate() {
        match g {
            None if need[k] => {
                return Err(TapeError::new(
                    name,
                    format!(
                        "backward returned no gradient for input {k} (shape {:?}), which needs one",
                        x.shape()
                    ),
                ))
            }
            Some(g) if g.shape() != x.shape() => {
                return Err(TapeError::new(
                    name,
                    format!(
                        "backward returned gradient of shape {:?} for input {k} of shape {:?}",
                        g.shape(),
                        x.shape()
                    ),
                ))
            }
            _ => {}
        }
    }
    Ok(grads)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{assert_audit, rand_array};
    use ndarray::array;

    /// Outputs `(a∘b, a + b)`; optionally "forgets" b's gradient or returns a wrong shape.
    #[derive(Clone)]
    struct MulAdd {
        forget_b: bool,
        wrong_shape: bool,
    }

    impl FusedOp<f64> for MulAdd {
        fn name(&self) -> &str {
            "muladd"
        }
        fn forward(&mut self, x: &[&ArrayD<f64>]) -> Result<Vec<ArrayD<f64>>> {
            if x[0].shape() != x[1].shape() {
                return Err(TapeError::new(
                    "muladd",
                    format!("shapes {:?} vs {:?}", x[0].shape(), x[1].shape()),
                ));
            }
            Ok(vec![x[0] * x[1], x[0] + x[1]])
        }
        fn backward(
            &self,
            x: &[&ArrayD<f64>],
            _y: &[&ArrayD<f64>],
            dy: &[Option<&ArrayD<f64>>],
            _need: &[bool],
        ) -> Result<Vec<Option<ArrayD<f64>>>> {
            // forward computed (a∘b, a + b), so da = dy0∘b + dy1 and db = dy0∘a + dy1
            let zero = ArrayD::zeros(x[0].raw_dim());
            let (d0, d1) = (dy[0].unwrap_or(&zero), dy[1].unwrap_or(&zero));
            let da = d0 * x[1] + d1;
            let db = d0 * x[0] + d1;
            if self.wrong_shape {
                return Ok(vec![Some(da), Some(ArrayD::zeros(IxDyn(&[7])))]);
            }
            Ok(vec![Some(da), if self.forget_b { None } else { Some(db) }])
        }
    }

    #[test]
    fn multi_output_fused_op_audits() {
        let a = rand_array(&[2, 3], 1, -1.0, 1.0);
        let b = rand_array(&[2, 3], 2, -1.0, 1.0);
        assert_audit(&[("a", a.clone()), ("b", b.clone())], |t, v| {
            let o = t.fused(
                Box::new(MulAdd {
                    forget_b: false,
                    wrong_shape: false,
                }),
                &[v[0], v[1]],
            )?;
            let s = t.square(o[1])?;
            let p = t.mul(o[0], s)?;
            t.sum_all(p)
        });
        // only the first output used: the second's cotangent is None
        assert_audit(&[("a", a), ("b", b)], |t, v| {
            let o = t.fused(
                Box::new(MulAdd {
                    forget_b: false,
                    wrong_shape: false,
                }),
                &[v[0], v[1]],
            )?;
            let s = t.tanh(o[0])?;
            t.sum_all(s)
        });
    }

    #[test]
    fn missing_or_misshapen_gradient_is_an_error_not_a_silent_zero() {
        let mut t = Tape::<f64>::new();
        let a = t.input(array![1.0, 2.0].into_dyn());
        let b = t.input(array![3.0, 4.0].into_dyn());
        let o = t
            .fused(
                Box::new(MulAdd {
                    forget_b: true,
                    wrong_shape: false,
                }),
                &[a, b],
            )
            .unwrap();
        let s = t.sum_all(o[0]).unwrap();
        let e = t.backward(s).err().expect("must fail");
        assert_eq!(e.op, "fused:muladd");
        assert!(
            e.message.contains("no gradient for input 1 (shape [2])"),
            "{e}"
        );
        // b as a constant needs no gradient: None is then fine
        let c = t.constant(array![3.0, 4.0].into_dyn());
        let o = t
            .fused(
                Box::new(MulAdd {
                    forget_b: true,
                    wrong_shape: false,
                }),
                &[a, c],
            )
            .unwrap();
        let s = t.sum_all(o[0]).unwrap();
        assert_eq!(
            t.backward(s).unwrap().wrt(a).unwrap(),
            &array![3.0, 4.0].into_dyn()
        );
        let o = t
            .fused(
                Box::new(MulAdd {
                    forget_b: false,
                    wrong_shape: true,
                }),
                &[a, b],
            )
            .unwrap();
        let s = t.sum_all(o[1]).unwrap();
        assert!(t.backward(s).err().unwrap().message.contains("shape [7]"));
        let bad = t.constant(array![1.0].into_dyn());
        let e = t
            .fused(
                Box::new(MulAdd {
                    forget_b: false,
                    wrong_shape: false,
                }),
                &[a, bad],
            )
            .unwrap_err();
        assert!(e.to_string().contains("[2] vs [1]"));
    }
}
