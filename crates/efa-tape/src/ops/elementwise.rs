//! Elementwise binary ops with numpy broadcasting: `a + b`, `a − b`, `a ∘ b`, `a / b`.
//!
//! Forward broadcasts both sides to the common shape; backward forms the full-shape VJP and
//! sums it back to each input's shape over the broadcast axes.

use crate::broadcast::{broadcast_shapes, sum_to_shape};
use crate::error::{Result, TapeError};
use crate::op::BinaryKind;
use crate::op::Op;
use crate::tape::{Tape, Var};
use efa_num::Real;
use ndarray::{ArrayD, IxDyn};

impl BinaryKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            BinaryKind::Add => "add",
            BinaryKind::Sub => "sub",
            BinaryKind::Mul => "mul",
            BinaryKind::Div => "div",
        }
    }

    /// Bytes backward reads: Add/Sub need nothing, Mul/Div need both inputs.
    pub(crate) fn saved(self, input_bytes: impl Fn(usize) -> usize) -> usize {
        match self {
            BinaryKind::Add | BinaryKind::Sub => 0,
            BinaryKind::Mul | BinaryKind::Div => input_bytes(0) + input_bytes(1),
        }
    }
}

/// `f(a, b)` over the broadcast shape of `a` and `b` (shape already validated).
fn zip_broadcast<T: Real>(
    a: &ArrayD<T>,
    b: &ArrayD<T>,
    shape: &[usize],
    f: impl Fn(T, T) -> T,
) -> ArrayD<T> {
    let sh = IxDyn(shape);
    let (Some(av), Some(bv)) = (a.broadcast(sh.clone()), b.broadcast(sh)) else {
        unreachable!("zip_broadcast: shapes validated by caller")
    };
    efa_num::pool::zip_map(av, bv, |&x, &y| f(x, y))
}

impl<T: Real> Tape<T> {
    fn binary(&mut self, kind: BinaryKind, a: Var, b: Var) -> Result<Var> {
        let op = kind.name();
        let (ia, ib) = (self.check(a, op)?, self.check(b, op)?);
        let (xa, xb) = (self.val(ia), self.val(ib));
        let shape = broadcast_shapes(xa.shape(), xb.shape()).ok_or_else(|| {
            TapeError::new(
                op,
                format!(
                    "shapes {:?} and {:?} do not broadcast",
                    xa.shape(),
                    xb.shape()
                ),
            )
        })?;
        let y = match kind {
            BinaryKind::Add => zip_broadcast(xa, xb, &shape, |x, y| x + y),
            BinaryKind::Sub => zip_broadcast(xa, xb, &shape, |x, y| x - y),
            BinaryKind::Mul => zip_broadcast(xa, xb, &shape, |x, y| x * y),
            BinaryKind::Div => zip_broadcast(xa, xb, &shape, |x, y| x / y),
        };
        Ok(self.push(Op::Binary(kind), vec![ia, ib], y))
    }

    /// `a + b` elementwise with numpy broadcasting.
    pub fn add(&mut self, a: Var, b: Var) -> Result<Var> {
        self.binary(BinaryKind::Add, a, b)
    }

    /// `a − b` elementwise with numpy broadcasting.
    pub fn sub(&mut self, a: Var, b: Var) -> Result<Var> {
        self.binary(BinaryKind::Sub, a, b)
    }

    /// `a ∘ b` (elementwise product) with numpy broadcasting.
    pub fn mul(&mut self, a: Var, b: Var) -> Result<Var> {
        self.binary(BinaryKind::Mul, a, b)
    }

    /// `a / b` elementwise with numpy broadcasting.
    pub fn div(&mut self, a: Var, b: Var) -> Result<Var> {
        self.binary(BinaryKind::Div, a, b)
    }
}

/// VJPs of a binary op for cotangent `g` (of the broadcast shape).
pub(crate) fn backward<T: Real>(
    kind: BinaryKind,
    a: &ArrayD<T>,
    b: &ArrayD<T>,
    g: &ArrayD<T>,
    need: &[bool],
) -> Vec<Option<ArrayD<T>>> {
    let shape = g.shape().to_vec();
    let (ga, gb) = match kind {
        // forward computed a + b, so ∂/∂a = g and ∂/∂b = g (summed over broadcast axes)
        BinaryKind::Add => (need[0].then(|| copy(g)), need[1].then(|| copy(g))),
        // forward computed a − b, so ∂/∂a = g and ∂/∂b = −g
        BinaryKind::Sub => (
            need[0].then(|| copy(g)),
            need[1].then(|| efa_num::pool::map(g.view(), |&v| -v)),
        ),
        // forward computed a ∘ b, so ∂/∂a = g ∘ b and ∂/∂b = g ∘ a
        BinaryKind::Mul => (
            need[0].then(|| zip_broadcast(g, b, &shape, |g, b| g * b)),
            need[1].then(|| zip_broadcast(g, a, &shape, |g, a| g * a)),
        ),
        // forward computed a / b, so ∂/∂a = g / b and ∂/∂b = −g·a / b²
        BinaryKind::Div => {
            let ga = need[0].then(|| zip_broadcast(g, b, &shape, |g, b| g / b));
            let gb = need[1].then(|| {
                let gab = zip_broadcast(g, a, &shape, |g, a| g * a);
                zip_broadcast(&gab, b, &shape, |ga, b| -ga / (b * b))
            });
            (ga, gb)
        }
    };
    vec![
        ga.map(|g| sum_to_shape(g, a.shape())),
        gb.map(|g| sum_to_shape(g, b.shape())),
    ]
}

/// A copy of `g` in a buffer from [`efa_num::pool`].
fn copy<T: Real>(g: &ArrayD<T>) -> ArrayD<T> {
    efa_num::pool::map(g.view(), |&v| v)
}

#[cfg(test)]
mod tests {
    use crate::testutil::{assert_audit, rand_array};
    use crate::Tape;
    use ndarray::array;

    #[test]
    fn forward_matches_hand_values_with_broadcasting() {
        let mut t = Tape::<f64>::new();
        let a = t.constant(array![[1.0], [2.0]].into_dyn()); // [2, 1]
        let b = t.constant(array![10.0, 20.0, 30.0].into_dyn()); // [3]
        let s = t.add(a, b).unwrap();
        assert_eq!(
            t.value(s),
            &array![[11.0, 21.0, 31.0], [12.0, 22.0, 32.0]].into_dyn()
        );
        let d = t.div(b, a).unwrap();
        assert_eq!(
            t.value(d),
            &array![[10.0, 20.0, 30.0], [5.0, 10.0, 15.0]].into_dyn()
        );
        let m = t.sub(a, b).unwrap();
        assert_eq!(t.value(m)[[1, 2]], -28.0);
    }

    #[test]
    fn audits_at_awkward_shapes() {
        // (shape a, shape b): equal, both sides broadcasting, scalar, length-1 and empty axes.
        let cases: &[(&[usize], &[usize])] = &[
            (&[3, 4], &[3, 4]),
            (&[3, 1], &[1, 4]),
            (&[2, 1, 5], &[3, 1]),
            (&[], &[2, 3]),
            (&[1], &[1]),
            (&[0, 3], &[1, 3]),
            (&[4, 1], &[4, 0]),
        ];
        for (k, (sa, sb)) in cases.iter().enumerate() {
            let a = rand_array(sa, 10 + k as u64, 0.5, 1.5);
            let b = rand_array(sb, 20 + k as u64, 0.5, 1.5);
            for op in 0..4 {
                assert_audit(&[("a", a.clone()), ("b", b.clone())], move |t, v| {
                    let y = match op {
                        0 => t.add(v[0], v[1])?,
                        1 => t.sub(v[0], v[1])?,
                        2 => t.mul(v[0], v[1])?,
                        _ => t.div(v[0], v[1])?,
                    };
                    let w = t.square(y)?;
                    t.sum_all(w)
                });
            }
        }
    }

    #[test]
    fn reused_node_accumulates() {
        // y = Σ x∘x, so dy/dx = 2x; both input slots of mul point at x.
        let mut t = Tape::<f64>::new();
        let x = t.input(array![1.5, -2.0, 0.25].into_dyn());
        let y = t.mul(x, x).unwrap();
        let s = t.sum_all(y).unwrap();
        let g = t.backward(s).unwrap();
        assert_eq!(g.wrt(x).unwrap(), &array![3.0, -4.0, 0.5].into_dyn());
        // y appears once: its gradient is all ones (an intermediate, retain-all).
        assert_eq!(g.wrt(y).unwrap(), &array![1.0, 1.0, 1.0].into_dyn());
    }

    #[test]
    fn mismatched_shapes_error_names_op_and_shapes() {
        let mut t = Tape::<f64>::new();
        let a = t.constant(ndarray::ArrayD::zeros(ndarray::IxDyn(&[2, 3])));
        let b = t.constant(ndarray::ArrayD::zeros(ndarray::IxDyn(&[4])));
        let e = t.mul(a, b).unwrap_err();
        assert_eq!(e.op, "mul");
        assert!(
            e.to_string().contains("[2, 3]") && e.to_string().contains("[4]"),
            "{e}"
        );
    }
}
