//! Global-norm gradient clipping.

use efa_num::Real;

/// Global L2 norm of several gradient tensors, `‖g‖ = √(Σ_tensors Σ_i g_i²)`, accumulated in
/// f64 in a fixed order (tensor by tensor, element by element), so it is deterministic.
pub fn global_norm<T: Real>(grads: &[&[T]]) -> f64 {
    let mut s = 0.0f64;
    for g in grads {
        for &x in g.iter() {
            let x = x.to_f64();
            s += x * x;
        }
    }
    s.sqrt()
}

/// The factor clipping multiplies every gradient by: `c / max(‖g‖, c)` (Keras / TF
/// `clip_by_global_norm`), i.e. 1 when `‖g‖ ≤ c`. A non-finite norm gives NaN (the update
/// then poisons the parameters visibly rather than silently skipping).
pub fn clip_scale(norm: f64, max_norm: f64) -> f64 {
    if !norm.is_finite() {
        return f64::NAN;
    }
    max_norm / norm.max(max_norm)
}

/// Scales `grads` in place so their global norm is at most `max_norm`; returns the norm
/// before clipping.
pub fn clip_global_norm<T: Real>(grads: &mut [&mut [T]], max_norm: f64) -> f64 {
    let norm = {
        let views: Vec<&[T]> = grads.iter().map(|g| &**g).collect();
        global_norm(&views)
    };
    let s = clip_scale(norm, max_norm);
    if s != 1.0 {
        let st = T::from_f64(s);
        for g in grads.iter_mut() {
            for x in g.iter_mut() {
                *x *= st;
            }
        }
    }
    norm
}
