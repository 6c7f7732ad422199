//! numpy broadcasting rules and the reduction of a broadcast gradient back to its input shape.

use efa_num::Real;
use ndarray::{ArrayD, Axis};

/// Broadcast shape of `a` and `b` under numpy rules (align trailing axes; each pair of sizes
/// must be equal or contain a 1), or `None` if incompatible. A size-0 axis broadcasts only
/// against 0 or 1.
pub(crate) fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for (d, o) in out.iter_mut().enumerate() {
        let da = if d + a.len() >= n {
            a[d + a.len() - n]
        } else {
            1
        };
        let db = if d + b.len() >= n {
            b[d + b.len() - n]
        } else {
            1
        };
        *o = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// Sums `g` (of a broadcast shape) down to `shape`: forward broadcast `shape` to `g.shape()`
/// by prepending axes and stretching size-1 axes, so the gradient sums over exactly those.
#[track_caller]
pub(crate) fn sum_to_shape<T: Real>(g: ArrayD<T>, shape: &[usize]) -> ArrayD<T> {
    if g.shape() == shape {
        return g;
    }
    assert!(
        g.ndim() >= shape.len(),
        "sum_to_shape: {:?} cannot reduce to {:?}",
        g.shape(),
        shape
    );
    let mut g = g;
    while g.ndim() > shape.len() {
        g = g.sum_axis(Axis(0));
    }
    for (d, &n) in shape.iter().enumerate() {
        if n == 1 && g.shape()[d] != 1 {
            g = g.sum_axis(Axis(d)).insert_axis(Axis(d));
        }
    }
    assert_eq!(g.shape(), shape, "sum_to_shape: internal shape mismatch");
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{array, IxDyn};

    #[test]
    fn shapes_follow_numpy() {
        assert_eq!(broadcast_shapes(&[3, 1], &[4]), Some(vec![3, 4]));
        assert_eq!(broadcast_shapes(&[2, 1, 5], &[3, 1]), Some(vec![2, 3, 5]));
        assert_eq!(broadcast_shapes(&[0, 1], &[1, 4]), Some(vec![0, 4]));
        assert_eq!(broadcast_shapes(&[], &[2]), Some(vec![2]));
        assert_eq!(broadcast_shapes(&[0], &[2]), None);
        assert_eq!(broadcast_shapes(&[3], &[4]), None);
    }

    #[test]
    fn sum_to_shape_sums_broadcast_axes() {
        let g = array![[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]].into_dyn();
        assert_eq!(
            sum_to_shape(g.clone(), &[3]),
            array![5.0, 7.0, 9.0].into_dyn()
        );
        assert_eq!(
            sum_to_shape(g.clone(), &[2, 1]),
            array![[6.0], [15.0]].into_dyn()
        );
        assert_eq!(sum_to_shape(g, &[]), ArrayD::from_elem(IxDyn(&[]), 21.0));
    }
}
