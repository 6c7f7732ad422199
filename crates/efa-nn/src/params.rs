//! Named parameter storage, Keras-compatible initialisers, and the declaration walk that
//! gives every model its parameters in one place.
//!
//! A model declares its parameters once, in order, to a [`ParamSink`] (`EfaConfig::declare`,
//! `FmConfig::declare`): name, shape and initialiser of each tensor. The same walk
//! * draws the initial values ([`Initialiser`], behind `ModelConfig::init`),
//! * registers a parameter set on a tape and returns typed handles ([`Registrar`], behind
//!   `ModelConfig::register`): structs of [`Var`]s such as `EfaVars`, resolved once, so the
//!   forward pass never looks a parameter up by name,
//! * lists names and shapes without values ([`Layout`]).
//!
//! Names stay as they are (`block0.attn.q.w`, …) for model files, checkpoints and reports.

use crate::NnError;
use efa_num::Real;
use efa_tape::{Tape, Var};
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

    /// The name and value of parameter `k` (creation order).
    pub fn at(&self, k: usize) -> Option<(&str, &ArrayD<T>)> {
        self.entries.get(k).map(|(n, v)| (n.as_str(), v))
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

/// How a declared parameter's initial value is drawn (the Keras defaults of PAPER.md §1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitKind {
    /// `Embedding`: Uniform(−0.05, 0.05).
    Embedding,
    /// Glorot-uniform with explicit fans: Uniform(±√(6 / (fan_in + fan_out))).
    Glorot {
        /// Fan in.
        fan_in: usize,
        /// Fan out.
        fan_out: usize,
    },
    /// All zeros (biases, layer-norm shifts); draws nothing.
    Zeros,
    /// All ones (layer-norm gains); draws nothing.
    Ones,
}

/// Receives a model's parameter declarations in order and hands out a handle per parameter.
pub trait ParamSink {
    /// What a declaration returns: `()` for initialisation and listing, a tape [`Var`] for
    /// registration.
    type Handle: Copy + std::fmt::Debug;

    /// Declares parameter `name` of `shape`, initialised as `init`.
    ///
    /// # Errors
    /// What the sink refuses: a mismatch with a registered parameter set, a missing
    /// variable, a size beyond a counter's limit, a tape error.
    fn param(
        &mut self,
        name: &str,
        shape: &[usize],
        init: InitKind,
    ) -> Result<Self::Handle, NnError>;
}

/// Draws every declared parameter from a seeded [`Init`], in declaration order.
pub struct Initialiser<T: Real> {
    init: Init,
    /// The parameters drawn so far.
    pub params: Params<T>,
}

impl<T: Real> Initialiser<T> {
    /// An initialiser seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            init: Init::new(seed),
            params: Params::new(),
        }
    }
}

impl<T: Real> ParamSink for Initialiser<T> {
    type Handle = ();

    fn param(&mut self, name: &str, shape: &[usize], init: InitKind) -> Result<(), NnError> {
        let value = match init {
            InitKind::Embedding => self.init.uniform(shape, 0.05),
            InitKind::Glorot { fan_in, fan_out } => self.init.glorot(shape, fan_in, fan_out),
            InitKind::Zeros => zeros(shape),
            InitKind::Ones => ArrayD::from_elem(IxDyn(shape), T::ONE),
        };
        self.params.insert(name, value);
        Ok(())
    }
}

/// Names and shapes of the declared parameters, without values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// `(name, shape)` in declaration order.
    pub entries: Vec<(String, Vec<usize>)>,
}

impl ParamSink for Layout {
    type Handle = ();

    fn param(&mut self, name: &str, shape: &[usize], _: InitKind) -> Result<(), NnError> {
        self.entries.push((name.to_string(), shape.to_vec()));
        Ok(())
    }
}

/// Registers a parameter set on a tape, checking each declared parameter against the set
/// (same position, name and shape), and returns its [`Var`].
pub struct Registrar<'a, T: Real> {
    tape: &'a mut Tape<T>,
    params: &'a Params<T>,
    /// The registered variables in declaration order (one per parameter of the set).
    pub vars: Vec<Var>,
}

impl<'a, T: Real> Registrar<'a, T> {
    /// A registrar of `params` onto `tape`.
    pub fn new(tape: &'a mut Tape<T>, params: &'a Params<T>) -> Self {
        Self {
            tape,
            params,
            vars: Vec::with_capacity(params.len()),
        }
    }

    /// Checks that every parameter of the set was declared (none left over).
    ///
    /// # Errors
    /// [`NnError::UndeclaredParams`] naming the tensors left over.
    pub fn finish(self) -> Result<Vec<Var>, NnError> {
        let k = self.vars.len();
        if k != self.params.len() {
            let names = self.params.iter().skip(k).map(|(n, _)| n.to_string());
            return Err(NnError::UndeclaredParams {
                names: names.collect(),
            });
        }
        Ok(self.vars)
    }
}

impl<T: Real> ParamSink for Registrar<'_, T> {
    type Handle = Var;

    fn param(&mut self, name: &str, shape: &[usize], _: InitKind) -> Result<Var, NnError> {
        let k = self.vars.len();
        let mismatch = |found| NnError::ParamMismatch {
            index: k,
            name: name.to_string(),
            shape: shape.to_vec(),
            found,
        };
        let Some((have, value)) = self.params.at(k) else {
            return Err(mismatch(None));
        };
        if have != name || value.shape() != shape {
            return Err(mismatch(Some((have.to_string(), value.shape().to_vec()))));
        }
        let v = self.tape.param(name, value.clone())?;
        self.vars.push(v);
        Ok(v)
    }
}

/// Hands out already registered variables in declaration order (for builders that register
/// the parameters themselves, such as the finite-difference audits).
pub struct FromVars<'a> {
    vars: &'a [Var],
    next: usize,
}

impl<'a> FromVars<'a> {
    /// The variables of every parameter, in declaration order.
    pub fn new(vars: &'a [Var]) -> Self {
        Self { vars, next: 0 }
    }
}

impl ParamSink for FromVars<'_> {
    type Handle = Var;

    fn param(&mut self, name: &str, shape: &[usize], _: InitKind) -> Result<Var, NnError> {
        let v = self
            .vars
            .get(self.next)
            .copied()
            .ok_or_else(|| NnError::MissingVar {
                index: self.next,
                name: name.to_string(),
                shape: shape.to_vec(),
                given: self.vars.len(),
            })?;
        self.next += 1;
        Ok(v)
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
