//! Named parameter storage and Keras-compatible initialisers.

use efa_num::Real;
use ndarray::{ArrayD, IxDyn};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// An ordered set of named parameter tensors (the order is the creation order, which is also
/// the order of the tape's `grads.params()` and of the optimizer state).
#[derive(Clone, Debug, Default)]
pub struct Params<T: Real> {
    entries: Vec<(String, ArrayD<T>)>,
}

impl<T: Real> Params<T> {
    /// An empty set.
    pub fn new() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    /// Adds a parameter. Names must be unique (internal invariant of the model builders).
    #[track_caller]
    pub fn insert(&mut self, name: &str, value: ArrayD<T>) {
        assert!(self.get(name).is_none(), "duplicate parameter name {name}");
        self.entries.push((name.to_string(), value));
    }

    /// The parameter called `name`.
    pub fn get(&self, name: &str) -> Option<&ArrayD<T>> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Mutable access to the parameter called `name`.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut ArrayD<T>> {
        self.entries
            .iter_mut()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }

    /// All parameters in creation order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ArrayD<T>)> {
        self.entries.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// All parameters in creation order, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut ArrayD<T>)> {
        self.entries.iter_mut().map(|(n, v)| (n.as_str(), v))
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Total number of scalar parameters.
    pub fn count(&self) -> usize {
        self.entries.iter().map(|(_, v)| v.len()).sum()
    }

    /// Converts every tensor to another precision (f32 ↔ f64).
    pub fn cast<U: Real>(&self) -> Params<U> {
        Params {
            entries: self
                .entries
                .iter()
                .map(|(n, v)| (n.clone(), v.mapv(|x| U::from_f64(x.to_f64()))))
                .collect(),
        }
    }
}

/// Seeded initialisers with the Keras defaults the paper's models used (PAPER.md §1).
pub struct Init {
    rng: StdRng,
}

impl Init {
    /// A generator from an explicit seed.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// Uniform(−limit, limit) over `shape`.
    pub fn uniform<T: Real>(&mut self, shape: &[usize], limit: f64) -> ArrayD<T> {
        let rng = &mut self.rng;
        ArrayD::from_shape_simple_fn(IxDyn(shape), || {
            T::from_f64(rng.random_range(-limit..=limit))
        })
    }

    /// Keras `Embedding` default: Uniform(−0.05, 0.05).
    pub fn embedding<T: Real>(&mut self, rows: usize, dim: usize) -> ArrayD<T> {
        self.uniform(&[rows, dim], 0.05)
    }

    /// Glorot-uniform with explicit fans: limit = √(6 / (fan_in + fan_out)).
    pub fn glorot<T: Real>(&mut self, shape: &[usize], fan_in: usize, fan_out: usize) -> ArrayD<T> {
        let limit = (6.0 / (fan_in + fan_out) as f64).sqrt();
        self.uniform(shape, limit)
    }

    /// Glorot-uniform for a 2-D `[in, out]` kernel.
    pub fn dense<T: Real>(&mut self, fan_in: usize, fan_out: usize) -> ArrayD<T> {
        self.glorot(&[fan_in, fan_out], fan_in, fan_out)
    }
}

/// All-zero tensor (biases).
pub fn zeros<T: Real>(shape: &[usize]) -> ArrayD<T> {
    ArrayD::from_elem(IxDyn(shape), T::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glorot_respects_its_limit_and_is_seeded() {
        let mut a = Init::new(7);
        let mut b = Init::new(7);
        let x: ArrayD<f64> = a.dense(64, 32);
        let y: ArrayD<f64> = b.dense(64, 32);
        assert_eq!(x, y);
        let limit = (6.0f64 / 96.0).sqrt();
        assert!(x.iter().all(|v| v.abs() <= limit));
        // A uniform over (−l, l) has variance l²/3; 2048 draws estimate it within a few %.
        let var = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
        assert!((var / (limit * limit / 3.0) - 1.0).abs() < 0.1, "var {var}");
    }

    #[test]
    fn params_keep_creation_order_and_count() {
        let mut p = Params::<f32>::new();
        p.insert("b", zeros(&[2, 3]));
        p.insert("a", zeros(&[4]));
        let names: Vec<_> = p.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(p.count(), 10);
        assert_eq!(p.cast::<f64>().get("a").unwrap().shape(), &[4]);
    }
}
