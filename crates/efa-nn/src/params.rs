//! Named parameter storage, Keras-compatible initialisers, and the declaration walk that
//! gives every model its parameters in one place.
//!
//! A model declares its parameters once, in order, to a [`ParamSink`] (`EfaConfig::declare`,
//! `FmConfig::declare`): name, shape and initialiser of each tensor. The same walk
//! * draws the initial values ([`Initialiser`], behind `ModelConfig::init`),
//! * registers a parameter set on a tape and returns typed handles ([`Registrar`], behind
//!   `ModelConfig::register`): structs of [`Var`]s such as `EfaVars`, resolved once, so the
//!   forward pass never looks a parameter up by name,
//! * lists names and shapes without values ([`Layout`]),
//! * counts the elements with overflow-checked arithmetic against a limit, attributing each
//!   tensor to the configuration field it comes from ([`Counter`] → [`ParamCount`]).
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

    /// Converts every tensor to another precision ([`Real::cast`]: exact when widening, one
    /// rounding when narrowing).
    pub fn cast<U: Real>(&self) -> Params<U> {
        Params {
            entries: self
                .entries
                .iter()
                .map(|(n, v)| (n.clone(), v.mapv(|x| x.cast::<U>())))
                .collect(),
        }
    }
}

/// Seeded initialisers with the Keras defaults the paper's models used (docs/paper.md §1).
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

/// How a declared parameter's initial value is drawn (the Keras defaults of docs/paper.md §1).
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
        // A copy in a buffer of the engine's cache, which the tape gives back when it drops.
        let v = self
            .tape
            .param(name, efa_num::pool::map(value.view(), |&x| x))?;
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

/// The parameters of a declaration, counted without allocating them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParamCount {
    /// Scalar parameters `Σ_tensors Π shape`.
    pub elements: u64,
    /// Tensors.
    pub tensors: usize,
    /// Scalar parameters per configuration field (as the caller names it, e.g.
    /// `` `layers` = 2 (…) ``), in first-seen order: which setting the parameters come from.
    pub by_field: Vec<(String, u64)>,
}

impl ParamCount {
    /// The field with the most parameters and its count (on a tie, the one seen last).
    pub fn largest(&self) -> Option<(&str, u64)> {
        self.by_field
            .iter()
            .max_by_key(|(_, n)| *n)
            .map(|(f, n)| (f.as_str(), *n))
    }
}

/// A [`ParamSink`] that counts the declared elements into a [`ParamCount`] without allocating
/// anything: each tensor's `Π shape` and the running total are formed with checked `u64`
/// arithmetic and compared with a limit, and each tensor is attributed to the configuration
/// field the caller's `field_of(name)` gives.
///
/// The first tensor whose own count overflows or exceeds the limit is refused with
/// [`NnError::TensorTooLarge`], the first that brings the total beyond it with
/// [`NnError::TotalTooLarge`]; a refused tensor is not counted. The declaration stops there
/// (its `?` returns), so a claimed size never turns into a loop or an allocation.
pub struct Counter<'a> {
    count: ParamCount,
    limit: u64,
    field_of: &'a dyn Fn(&str) -> String,
}

impl<'a> Counter<'a> {
    /// A counter refusing any tensor, or total, of more than `limit` elements; `field_of`
    /// names the configuration field behind a parameter name.
    pub fn new(limit: u64, field_of: &'a dyn Fn(&str) -> String) -> Self {
        Self {
            count: ParamCount::default(),
            limit,
            field_of,
        }
    }

    /// The count so far.
    pub fn count(&self) -> &ParamCount {
        &self.count
    }

    /// The count, once the declaration is done.
    pub fn into_count(self) -> ParamCount {
        self.count
    }
}

impl ParamSink for Counter<'_> {
    type Handle = ();

    fn param(&mut self, name: &str, shape: &[usize], _: InitKind) -> Result<(), NnError> {
        let field = (self.field_of)(name);
        let limit = self.limit;
        let n = shape
            .iter()
            .try_fold(1u64, |acc, &s| acc.checked_mul(s as u64))
            .filter(|&n| n <= limit)
            .ok_or_else(|| NnError::TensorTooLarge {
                field: field.clone(),
                name: name.to_string(),
                shape: shape.to_vec(),
                limit,
            })?;
        self.count.elements = self
            .count
            .elements
            .checked_add(n)
            .filter(|&t| t <= limit)
            .ok_or_else(|| NnError::TotalTooLarge {
                field: field.clone(),
                name: name.to_string(),
                shape: shape.to_vec(),
                limit,
            })?;
        self.count.tensors += 1;
        match self.count.by_field.iter_mut().find(|(f, _)| *f == field) {
            Some((_, total)) => *total += n,
            None => self.count.by_field.push((field, n)),
        }
        Ok(())
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

    /// `{block}.{rest}` → field `block`.
    fn prefix(name: &str) -> String {
        name.split('.').next().unwrap_or(name).to_string()
    }

    #[test]
    fn counter_counts_elements_tensors_and_fields_like_the_layout() {
        let declare = |s: &mut dyn ParamSink<Handle = ()>| -> Result<(), NnError> {
            s.param("emb.w", &[7, 3], InitKind::Embedding)?;
            s.param(
                "dense.w",
                &[3, 5],
                InitKind::Glorot {
                    fan_in: 3,
                    fan_out: 5,
                },
            )?;
            s.param("dense.b", &[5], InitKind::Zeros)?;
            s.param("norm.gain", &[0], InitKind::Ones)?;
            s.param("emb.bias", &[3], InitKind::Zeros)
        };
        let field_of = prefix;
        let mut c = Counter::new(1000, &field_of);
        declare(&mut c).unwrap();
        let count = c.into_count();
        assert_eq!(count.elements, 21 + 15 + 5 + 3);
        assert_eq!(count.tensors, 5);
        assert_eq!(
            count.by_field,
            [
                ("emb".to_string(), 24),
                ("dense".to_string(), 20),
                ("norm".to_string(), 0)
            ]
        );
        assert_eq!(count.largest(), Some(("emb", 24)));
        let mut layout = Layout::default();
        declare(&mut layout).unwrap();
        let sizes = layout
            .entries
            .iter()
            .map(|(_, s)| s.iter().product::<usize>());
        assert_eq!(sizes.sum::<usize>() as u64, count.elements);
        assert_eq!(layout.entries.len(), count.tensors);
    }

    #[test]
    fn counter_refuses_overflow_and_sizes_beyond_the_limit_naming_field_and_tensor() {
        let field_of = prefix;
        // Π shape overflows u64: refused before anything is added.
        let mut c = Counter::new(u64::MAX, &field_of);
        c.param("a.w", &[3, 4], InitKind::Zeros).unwrap();
        let huge = [1usize << 40, 1 << 40];
        let e = c.param("b.w", &huge, InitKind::Zeros).unwrap_err();
        assert_eq!(
            e,
            NnError::TensorTooLarge {
                field: "b".into(),
                name: "b.w".into(),
                shape: huge.to_vec(),
                limit: u64::MAX,
            }
        );
        assert_eq!(c.count().elements, 12);
        assert_eq!(c.count().tensors, 1);
        // One tensor above the limit; exactly at the limit is accepted.
        let mut c = Counter::new(100, &field_of);
        let e = c.param("x.w", &[101], InitKind::Zeros).unwrap_err();
        assert_eq!(
            e.to_string(),
            "field x: parameter `x.w` of shape [101] exceeds the limit of 100 elements"
        );
        c.param("x.w", &[10, 10], InitKind::Zeros).unwrap();
        assert_eq!(c.count().elements, 100);
        // The running total: one more element passes the limit and is not counted.
        let e = c.param("y.b", &[1], InitKind::Zeros).unwrap_err();
        assert!(
            matches!(&e, NnError::TotalTooLarge { field, name, shape, limit: 100 }
            if field == "y" && name == "y.b" && shape == &[1])
        );
        assert_eq!(
            e.to_string(),
            "field y: the total parameter count exceeds the limit of 100 elements"
        );
        assert_eq!(c.count().elements, 100);
        assert_eq!(c.count().by_field, [("x".to_string(), 100)]);
        // The total overflowing u64 is the same refusal.
        let mut c = Counter::new(u64::MAX, &field_of);
        c.param("a.w", &[usize::MAX], InitKind::Zeros).unwrap();
        let e = c.param("b.w", &[usize::MAX], InitKind::Zeros).unwrap_err();
        assert!(matches!(e, NnError::TotalTooLarge { .. }), "{e}");
    }

    #[test]
    fn registrar_and_from_vars_name_the_parameter_that_does_not_match() {
        let mut set = Params::<f64>::new();
        set.insert("w", zeros(&[2, 3]));
        set.insert("stray", zeros(&[1]));
        let mut tape = Tape::<f64>::new();
        let mut r = Registrar::new(&mut tape, &set);
        let e = r.param("v", &[2, 3], InitKind::Zeros).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the model declares `v` [2, 3] as parameter 0, the parameter set has `w` [2, 3] there"
        );
        r.param("w", &[2, 3], InitKind::Zeros).unwrap();
        let e = r.finish().unwrap_err();
        assert_eq!(
            e,
            NnError::UndeclaredParams {
                names: vec!["stray".into()]
            }
        );
        let mut tape = Tape::<f64>::new();
        let mut r = Registrar::new(&mut tape, &set);
        r.param("w", &[2, 3], InitKind::Zeros).unwrap();
        r.param("stray", &[1], InitKind::Zeros).unwrap();
        let e = r.param("more", &[4], InitKind::Zeros).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`more` [4] (parameter 2; the parameter set has only 2)"
        );
        let vars = r.finish().unwrap();
        let mut f = FromVars::new(&vars[..1]);
        f.param("w", &[2, 3], InitKind::Zeros).unwrap();
        let e = f.param("b", &[3], InitKind::Zeros).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`b` [3] (parameter 1; only 1 variables given)"
        );
    }
}
