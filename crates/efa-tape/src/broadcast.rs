//! numpy broadcasting rules and the reduction of a broadcast gradient back to its input shape.

use efa_num::Real;
use ndarray::{ArrayD, Axis, IxDyn};

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
/// by prepending axes and stretching size-1 axes, so the gradient sums over exactly those
/// (the prepended ones as one sum over their positions in `efa_num::sum`'s order).
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
    // The prepended axes are one long sum over their positions: in `efa_num::sum`'s order
    // (blocks, then a pairwise tree), as `linear`'s and the gathers' biases.
    let lead = g.ndim() - shape.len();
    let mut g = if lead > 0 {
        let rest: usize = g.shape()[lead..].iter().product();
        let rows: usize = g.shape()[..lead].iter().product();
        let gs = g.as_standard_layout();
        let mut out = vec![T::ZERO; rest];
        efa_num::sum::col_sums(
            &mut out,
            gs.as_slice().expect("standard layout"),
            rest,
            rows,
        );
        ArrayD::from_shape_vec(IxDyn(&g.shape()[lead..]), out).expect("sum_to_shape: sizes")
    } else {
        g
    };
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

    /// Prepended axes are one sum over all their positions in `efa_num::sum`'s order (here
    /// 3·100 = 300 positions: two blocks and a partial one), bitwise; a plain loop differs.
    #[test]
    fn prepended_axes_sum_in_the_blocked_order() {
        let x = |k: usize| ((k as f32 * 0.613).sin() * 4.0).exp() - 2.0;
        let g = ArrayD::from_shape_fn(IxDyn(&[3, 100, 2]), |ix| x(ix[0] * 200 + ix[1] * 2 + ix[2]));
        let got = sum_to_shape(g.clone(), &[2]);
        let flat: Vec<f32> = g.iter().copied().collect();
        let mut want = [0.0f32; 2];
        efa_num::sum::col_sums(&mut want, &flat, 2, 300);
        let mut plain = [0.0f32; 2];
        for row in flat.chunks(2) {
            plain[0] += row[0];
            plain[1] += row[1];
        }
        for j in 0..2 {
            assert_eq!(got[[j]].to_bits(), want[j].to_bits());
        }
        assert!((0..2).any(|j| plain[j].to_bits() != want[j].to_bits()));
    }
}
