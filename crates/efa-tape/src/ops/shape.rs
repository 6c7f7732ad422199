//! Shape ops: `broadcast_to`, `reshape`, `permute`, `transpose`, `concat`, `slice`.
//!
//! Each backward is the adjoint of a linear index map: broadcast ↔ sum over stretched axes,
//! reshape ↔ reshape back, permute ↔ inverse permutation, concat ↔ split, slice ↔ zero-pad.

use crate::broadcast::broadcast_shapes;
use crate::error::{Result, TapeError};
use crate::op::Op;
use crate::tape::{Tape, Var};
use efa_num::Real;
use ndarray::{ArrayD, Axis, IxDyn, Slice};

impl<T: Real> Tape<T> {
    /// `y = a` broadcast (numpy rules) to exactly `shape`.
    pub fn broadcast_to(&mut self, a: Var, shape: &[usize]) -> Result<Var> {
        let ia = self.check(a, "broadcast_to")?;
        let x = self.val(ia);
        let ok = broadcast_shapes(x.shape(), shape).is_some_and(|s| s == shape);
        let y = match x.broadcast(IxDyn(shape)) {
            Some(v) if ok => efa_num::pool::map(v, |&x| x),
            _ => {
                return Err(TapeError::new(
                    "broadcast_to",
                    format!("shape {:?} does not broadcast to {shape:?}", x.shape()),
                ))
            }
        };
        Ok(self.push(Op::BroadcastTo, vec![ia], y))
    }

    /// `y` = the row-major elements of `a` in `shape` (same element count).
    pub fn reshape(&mut self, a: Var, shape: &[usize]) -> Result<Var> {
        let ia = self.check(a, "reshape")?;
        let x = self.val(ia);
        if x.len() != shape.iter().product::<usize>() {
            return Err(TapeError::new(
                "reshape",
                format!(
                    "cannot reshape {:?} ({} elements) to {shape:?}",
                    x.shape(),
                    x.len()
                ),
            ));
        }
        let y = efa_num::pool::map(x.view(), |&v| v)
            .into_shape_with_order(IxDyn(shape))
            .expect("reshape: standard layout");
        Ok(self.push(Op::Reshape, vec![ia], y))
    }

    /// `y[i_{axes[0]}, …] = a[i_0, …]`, i.e. `y.shape[d] = a.shape[axes[d]]`; `axes` must be a
    /// permutation of `0..ndim`.
    pub fn permute(&mut self, a: Var, axes: &[usize]) -> Result<Var> {
        let ia = self.check(a, "permute")?;
        let x = self.val(ia);
        let mut seen = vec![false; x.ndim()];
        let valid = axes.len() == x.ndim()
            && axes
                .iter()
                .all(|&d| d < seen.len() && !std::mem::replace(&mut seen[d], true));
        if !valid {
            return Err(TapeError::new(
                "permute",
                format!(
                    "axes {axes:?} are not a permutation for shape {:?}",
                    x.shape()
                ),
            ));
        }
        let y = efa_num::pool::map(x.view().permuted_axes(IxDyn(axes)), |&v| v);
        Ok(self.push(
            Op::Permute {
                axes: axes.to_vec(),
            },
            vec![ia],
            y,
        ))
    }

    /// Swaps axes `i` and `j` (a [`Tape::permute`]).
    pub fn transpose(&mut self, a: Var, i: usize, j: usize) -> Result<Var> {
        let nd = self.val(self.check(a, "transpose")?).ndim();
        if i >= nd || j >= nd {
            return Err(TapeError::new(
                "transpose",
                format!(
                    "axes ({i}, {j}) out of range for shape {:?}",
                    self.val(a.idx).shape()
                ),
            ));
        }
        let mut axes: Vec<usize> = (0..nd).collect();
        axes.swap(i, j);
        self.permute(a, &axes)
    }

    /// Joins `xs` along `axis`; every other axis must agree.
    pub fn concat(&mut self, xs: &[Var], axis: usize) -> Result<Var> {
        let idx = xs
            .iter()
            .map(|&v| self.check(v, "concat"))
            .collect::<Result<Vec<_>>>()?;
        let shapes: Vec<&[usize]> = idx.iter().map(|&i| self.val(i).shape()).collect();
        let Some(first) = shapes.first() else {
            return Err(TapeError::new("concat", "no inputs"));
        };
        let compatible = axis < first.len()
            && shapes.iter().all(|s| {
                s.len() == first.len()
                    && s.iter()
                        .zip(first.iter())
                        .enumerate()
                        .all(|(d, (p, q))| d == axis || p == q)
            });
        if !compatible {
            return Err(TapeError::new(
                "concat",
                format!("shapes {shapes:?} cannot be joined along axis {axis}"),
            ));
        }
        let views: Vec<_> = idx.iter().map(|&i| self.val(i).view()).collect();
        let y = ndarray::concatenate(Axis(axis), &views).expect("concat: validated shapes");
        Ok(self.push(Op::Concat { axis }, idx, y))
    }

    /// `y = a[…, start..end, …]` along `axis` (`start ≤ end ≤ len`).
    pub fn slice(&mut self, a: Var, axis: usize, start: usize, end: usize) -> Result<Var> {
        let ia = self.check(a, "slice")?;
        let x = self.val(ia);
        if axis >= x.ndim() || start > end || end > x.shape()[axis] {
            return Err(TapeError::new(
                "slice",
                format!(
                    "range {start}..{end} on axis {axis} invalid for shape {:?}",
                    x.shape()
                ),
            ));
        }
        let y = efa_num::pool::map(x.slice_axis(Axis(axis), Slice::from(start..end)), |&v| v);
        Ok(self.push(Op::Slice { axis, start }, vec![ia], y))
    }
}

/// forward reshaped `x` to `g`'s shape, so `∂/∂x = g` reshaped back.
pub(crate) fn reshape_backward<T: Real>(g: &ArrayD<T>, x_shape: &[usize]) -> ArrayD<T> {
    efa_num::pool::map(g.view(), |&v| v)
        .into_shape_with_order(IxDyn(x_shape))
        .expect("reshape backward")
}

/// forward computed `y = x` with axes permuted by `axes`, so `∂/∂x = g` permuted by the
/// inverse permutation.
pub(crate) fn permute_backward<T: Real>(g: &ArrayD<T>, axes: &[usize]) -> ArrayD<T> {
    let mut inv = vec![0; axes.len()];
    for (d, &a) in axes.iter().enumerate() {
        inv[a] = d;
    }
    g.view()
        .permuted_axes(IxDyn(&inv))
        .as_standard_layout()
        .into_owned()
}

/// forward stacked the inputs along `axis`, so each input's gradient is its block of `g`.
pub(crate) fn concat_backward<T: Real>(
    g: &ArrayD<T>,
    axis: usize,
    shapes: &[&[usize]],
) -> Vec<Option<ArrayD<T>>> {
    let mut start = 0;
    shapes
        .iter()
        .map(|s| {
            let end = start + s[axis];
            let block =
                efa_num::pool::map(g.slice_axis(Axis(axis), Slice::from(start..end)), |&v| v);
            start = end;
            Some(block)
        })
        .collect()
}

/// forward read `x[start..start+len]` along `axis`, so `∂/∂x` is `g` there and 0 elsewhere.
pub(crate) fn slice_backward<T: Real>(
    g: &ArrayD<T>,
    x_shape: &[usize],
    axis: usize,
    start: usize,
) -> ArrayD<T> {
    let mut gx = efa_num::pool::full(IxDyn(x_shape), T::ZERO);
    let end = start + g.shape()[axis];
    gx.slice_axis_mut(Axis(axis), Slice::from(start..end))
        .assign(g);
    gx
}

#[cfg(test)]
mod tests {
    use crate::testutil::{assert_audit, rand_array};
    use crate::Tape;
    use ndarray::{array, ArrayD, IxDyn};

    #[test]
    fn forward_values_by_hand() {
        let mut t = Tape::<f64>::new();
        let x = t.constant(array![[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]].into_dyn());
        let p = t.transpose(x, 0, 1).unwrap();
        assert_eq!(
            t.value(p),
            &array![[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]].into_dyn()
        );
        let r = t.reshape(x, &[3, 2]).unwrap();
        assert_eq!(
            t.value(r),
            &array![[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]].into_dyn()
        );
        let s = t.slice(x, 1, 1, 3).unwrap();
        assert_eq!(t.value(s), &array![[2.0, 3.0], [5.0, 6.0]].into_dyn());
        let c = t.concat(&[x, s], 1).unwrap();
        assert_eq!(
            t.value(c),
            &array![[1.0, 2.0, 3.0, 2.0, 3.0], [4.0, 5.0, 6.0, 5.0, 6.0]].into_dyn()
        );
        let row = t.constant(array![7.0, 8.0].into_dyn());
        let b = t.broadcast_to(row, &[3, 2]).unwrap();
        assert_eq!(
            t.value(b),
            &array![[7.0, 8.0], [7.0, 8.0], [7.0, 8.0]].into_dyn()
        );
        let x3 = t.constant(ArrayD::from_shape_fn(IxDyn(&[2, 3, 4]), |i| {
            (i[0] * 100 + i[1] * 10 + i[2]) as f64
        }));
        let p3 = t.permute(x3, &[2, 0, 1]).unwrap();
        assert_eq!(t.shape(p3), &[4, 2, 3]);
        assert_eq!(t.value(p3)[[3, 1, 2]], 123.0);
    }

    #[test]
    fn audits() {
        let x = rand_array(&[2, 3, 4], 1, -1.0, 1.0);
        let y = rand_array(&[2, 1, 4], 2, -1.0, 1.0);
        let w = rand_array(&[4, 3, 2], 3, -1.0, 1.0); // weights make the loss non-symmetric
        let xs = [("x", x.clone()), ("y", y), ("w", w)];
        assert_audit(&xs, |t, v| {
            let p = t.permute(v[0], &[1, 2, 0])?; // [3, 4, 2]: not an involution
            let p = t.reshape(p, &[3, 8])?;
            let p = t.transpose(p, 0, 1)?; // [8, 3]
            let p = t.reshape(p, &[4, 3, 2])?;
            let q = t.mul(p, v[2])?;
            let b = t.broadcast_to(v[1], &[2, 3, 4])?;
            let r = t.reshape(b, &[4, 3, 2])?;
            let s = t.mul(q, r)?;
            let u = t.square(s)?;
            t.sum_all(u)
        });
        assert_audit(&[("x", x.clone())], |t, v| {
            let a = t.slice(v[0], 2, 1, 3)?;
            let b = t.slice(v[0], 1, 0, 0)?; // empty slice
            let c = t.concat(&[a, v[0], a], 2)?; // a reused twice
            let d = t.transpose(c, 0, 2)?;
            let e = t.square(d)?;
            let f = t.sum_all(e)?;
            let g = t.sum_all(b)?;
            t.add(f, g)
        });
        assert_audit(&[("x", rand_array(&[1, 3], 4, -1.0, 1.0))], |t, v| {
            let b = t.broadcast_to(v[0], &[2, 0, 3])?; // broadcast to an empty shape
            let c = t.broadcast_to(v[0], &[5, 3])?;
            let (sb, sc) = (t.sum_all(b)?, t.tanh(c)?);
            let sc = t.sum_all(sc)?;
            t.add(sb, sc)
        });
    }

    #[test]
    fn errors_name_op_and_shapes() {
        let mut t = Tape::<f64>::new();
        let x = t.constant(ArrayD::zeros(IxDyn(&[2, 3])));
        let y = t.constant(ArrayD::zeros(IxDyn(&[3, 3])));
        assert!(t
            .reshape(x, &[4])
            .unwrap_err()
            .to_string()
            .contains("[2, 3]"));
        assert!(t.permute(x, &[0, 0]).is_err());
        assert!(t.transpose(x, 0, 2).is_err());
        let e = t.concat(&[x, y], 1).unwrap_err();
        assert!(e.to_string().contains("[[2, 3], [3, 3]]"), "{e}");
        assert!(t.concat(&[], 0).is_err());
        assert!(t
            .slice(x, 1, 2, 4)
            .unwrap_err()
            .to_string()
            .contains("2..4"));
        assert!(t.broadcast_to(x, &[3, 3]).is_err());
        assert!(t.broadcast_to(x, &[3]).is_err());
    }
}
