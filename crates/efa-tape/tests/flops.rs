//! The global FLOP counter (`efa_tape::stats`): exact counts for matmul forward/backward and
//! for fused ops that report FLOPs. This file is its own test binary (not a module of
//! `tests/all`: the counter is process-wide) and its tests hold one mutex, so no other tape
//! runs while a delta is measured.

use efa_tape::{FusedOp, Tape, TapeError};
use ndarray::{ArrayD, IxDyn};
use std::sync::Mutex;

static LOCK: Mutex<()> = Mutex::new(());

fn ones(shape: &[usize]) -> ArrayD<f64> {
    ArrayD::from_elem(IxDyn(shape), 1.0)
}

/// Runs `f` and returns the counter's increase.
fn delta(f: impl FnOnce()) -> u64 {
    let before = efa_tape::flops();
    f();
    efa_tape::flops() - before
}

#[test]
fn matmul_counts_two_mnk_forward_and_per_computed_gradient() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (m, k, n) = (3u64, 5u64, 7u64);
    let mut t = Tape::<f64>::new();
    let a = t.param("a", ones(&[3, 5])).unwrap();
    let b = t.param("b", ones(&[5, 7])).unwrap();
    let mut c = None;
    assert_eq!(
        delta(|| c = Some(t.matmul(a, b, false, false).unwrap())),
        2 * m * n * k
    );
    // sum_all's backward is not counted: both gradients add 2mnk each.
    let s = t.sum_all(c.unwrap()).unwrap();
    assert_eq!(delta(|| drop(t.backward(s).unwrap())), 4 * m * n * k);

    // Only one input needs a gradient: 2mnk forward, 2mnk backward.
    let mut t = Tape::<f64>::new();
    let a = t.param("a", ones(&[5, 3])).unwrap();
    let b = t.constant(ones(&[7, 5]));
    let d = delta(|| {
        let c = t.matmul(a, b, true, true).unwrap();
        let s = t.sum_all(c).unwrap();
        t.backward(s).unwrap();
    });
    assert_eq!(d, 4 * m * n * k);
}

#[test]
fn batched_and_shared_weight_products_count_every_batch() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // 8 batched products of 3×5 by 5×6
    let mut t = Tape::<f32>::new();
    let a = t.constant(ArrayD::zeros(IxDyn(&[8, 3, 5])));
    let b = t.constant(ArrayD::zeros(IxDyn(&[8, 5, 6])));
    assert_eq!(
        delta(|| {
            t.matmul(a, b, false, false).unwrap();
        }),
        2 * 8 * 3 * 5 * 6
    );
    // shared 2-D weight over a [4, 3] batch of 2×5 rows (folded into one gemm): same count
    let x = t.constant(ArrayD::zeros(IxDyn(&[4, 3, 2, 5])));
    let w = t.constant(ArrayD::zeros(IxDyn(&[5, 6])));
    assert_eq!(
        delta(|| {
            t.matmul(x, w, false, false).unwrap();
        }),
        2 * 12 * 2 * 5 * 6
    );
}

/// Identity with a claimed FLOP count: 10 per element forward, 25 backward.
#[derive(Clone)]
struct Counted;

impl FusedOp<f64> for Counted {
    fn name(&self) -> &str {
        "counted"
    }
    fn forward(&mut self, x: &[&ArrayD<f64>]) -> Result<Vec<ArrayD<f64>>, TapeError> {
        Ok(vec![x[0].clone()])
    }
    fn backward(
        &self,
        _x: &[&ArrayD<f64>],
        _y: &[&ArrayD<f64>],
        dy: &[Option<&ArrayD<f64>>],
        _need: &[bool],
    ) -> Result<Vec<Option<ArrayD<f64>>>, TapeError> {
        // forward computed y = x, so dx = dy
        Ok(vec![dy[0].cloned()])
    }
    fn flops(&self, inputs: &[&ArrayD<f64>], backward: bool) -> u64 {
        inputs[0].len() as u64 * if backward { 25 } else { 10 }
    }
}

/// Identity without a FLOP count (the trait's default: nothing counted).
#[derive(Clone)]
struct Uncounted;

impl FusedOp<f64> for Uncounted {
    fn name(&self) -> &str {
        "uncounted"
    }
    fn forward(&mut self, x: &[&ArrayD<f64>]) -> Result<Vec<ArrayD<f64>>, TapeError> {
        Ok(vec![x[0].clone()])
    }
    fn backward(
        &self,
        _x: &[&ArrayD<f64>],
        _y: &[&ArrayD<f64>],
        dy: &[Option<&ArrayD<f64>>],
        _need: &[bool],
    ) -> Result<Vec<Option<ArrayD<f64>>>, TapeError> {
        // forward computed y = x, so dx = dy
        Ok(vec![dy[0].cloned()])
    }
}

#[test]
fn fused_ops_report_their_own_flops_and_default_to_zero() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut t = Tape::<f64>::new();
    let x = t.param("x", ones(&[4, 3])).unwrap();
    let mut y = None;
    assert_eq!(
        delta(|| y = Some(t.fused(Box::new(Counted), &[x]).unwrap()[0])),
        120
    );
    let s = t.sum_all(y.unwrap()).unwrap();
    assert_eq!(delta(|| drop(t.backward(s).unwrap())), 300);

    let mut t = Tape::<f64>::new();
    let x = t.param("x", ones(&[4, 3])).unwrap();
    let d = delta(|| {
        let y = t.fused(Box::new(Uncounted), &[x]).unwrap()[0];
        let s = t.sum_all(y).unwrap();
        t.backward(s).unwrap();
    });
    assert_eq!(d, 0);
}

#[test]
fn reset_sets_the_counter_to_zero() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut t = Tape::<f64>::new();
    let a = t.constant(ones(&[2, 2]));
    t.matmul(a, a, false, false).unwrap();
    assert!(efa_tape::flops() >= 16);
    efa_tape::reset_flops();
    assert_eq!(efa_tape::flops(), 0);
}
