//! The exponential families of a user data set: `[family]` (one family for every item) or
//! `[[family]]` tables with `items = [first, last]` (a family per item range, mixed types).

use crate::TrainError;
use efa_expfam::Family;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;

/// One exponential family with a scalar observation (the families a value column can follow).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
/// (Field-less families are empty struct variants so that stray keys are rejected too.)
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FamilySpec {
    /// N(μ, s2) with known s2 (η width 1).
    GaussianKnownVar {
        /// Known variance.
        s2: f64,
    },
    /// N(μ, σ²) with both learned (η width 2).
    Gaussian {},
    /// 0/1 values.
    Bernoulli {},
    /// Counts 0..=n.
    Binomial {
        /// Trials.
        n: u64,
    },
    /// Counts.
    Poisson {},
    /// Class index 0..k (η width k).
    Categorical {
        /// Classes.
        k: usize,
    },
    /// Positive reals (η width 2).
    Gamma {},
    /// Positive reals.
    Exponential {},
    /// Values in (0, 1) (η width 2).
    Beta {},
    /// Counts, with r failures.
    NegativeBinomial {
        /// Failures r > 0.
        r: f64,
    },
}

impl FamilySpec {
    /// The efa-expfam family.
    pub fn family(&self) -> Family {
        match *self {
            FamilySpec::GaussianKnownVar { s2 } => Family::GaussianKnownVar { s2 },
            FamilySpec::Gaussian {} => Family::Gaussian,
            FamilySpec::Bernoulli {} => Family::Bernoulli,
            FamilySpec::Binomial { n } => Family::Binomial { n },
            FamilySpec::Poisson {} => Family::Poisson,
            FamilySpec::Categorical { k } => Family::Categorical { k },
            FamilySpec::Gamma {} => Family::Gamma,
            FamilySpec::Exponential {} => Family::Exponential,
            FamilySpec::Beta {} => Family::Beta,
            FamilySpec::NegativeBinomial { r } => Family::NegativeBinomial { r },
        }
    }

    /// The family's parameters, each error naming `<prefix>.<field>`: a positive `s2` and `r`
    /// that are finite and normal in f32 (the training dtype: an `s2` that underflows f32 is
    /// refused, not silently rounded to 0), at least 2 categorical classes `k` and at least 1
    /// binomial trial `n` (with one class or no trial every value has probability 1: nothing
    /// to learn).
    pub fn validate(&self, prefix: &str) -> Result<(), TrainError> {
        let bad =
            |field: &str, why: String| Err(TrainError::config(format!("{prefix}.{field}"), why));
        let real = |field: &str, v: f64, what: &str| {
            if !(v > 0.0 && v.is_finite()) {
                return bad(field, format!("{v} must be a finite positive {what}"));
            }
            let v32 = v as f32;
            if !v32.is_finite() || !v32.is_normal() {
                return bad(
                    field,
                    format!(
                        "{v:e} is not representable in f32, the training dtype (normal \
                         positive values lie in {:e}..={:e})",
                        f32::MIN_POSITIVE,
                        f32::MAX
                    ),
                );
            }
            Ok(())
        };
        match *self {
            FamilySpec::GaussianKnownVar { s2 } => real("s2", s2, "variance"),
            FamilySpec::NegativeBinomial { r } => real("r", r, "number of failures"),
            FamilySpec::Categorical { k } if k < 2 => bad(
                "k",
                format!(
                    "{k} classes; at least 2 are needed (with fewer every value has \
                     probability 1)"
                ),
            ),
            FamilySpec::Binomial { n: 0 } => bad(
                "n",
                "0 trials; at least 1 is needed (with none every value is 0 with probability 1)"
                    .into(),
            ),
            _ => match self.family().validate() {
                Ok(()) => Ok(()),
                Err(e) => Err(TrainError::config(prefix, e.to_string())),
            },
        }
    }
}

/// A family for the items `items[0]..=items[1]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FamilyRange {
    /// First and last item id of the range (inclusive).
    pub items: [usize; 2],
    /// The family of those items.
    pub family: FamilySpec,
}

/// The families of a data set.
#[derive(Clone, Debug, PartialEq)]
pub enum Families {
    /// `[family]`: one family for every item.
    All(FamilySpec),
    /// `[[family]]` tables: a family per item range (ranges disjoint; an item outside every
    /// range has no family, and a data row of it is an error).
    Ranges(Vec<FamilyRange>),
}

impl Families {
    /// The family of `item` with its index among the configured families (0 for `All`).
    pub fn of(&self, item: usize) -> Option<(usize, FamilySpec)> {
        match self {
            Families::All(f) => Some((0, *f)),
            Families::Ranges(r) => r
                .iter()
                .position(|r| (r.items[0]..=r.items[1]).contains(&item))
                .map(|k| (k, r[k].family)),
        }
    }

    /// The configured families, in order (one for `All`).
    pub fn list(&self) -> Vec<FamilySpec> {
        match self {
            Families::All(f) => vec![*f],
            Families::Ranges(r) => r.iter().map(|r| r.family).collect(),
        }
    }

    /// The widest natural parameter among the families (the model's `out_dim`).
    pub fn eta_width(&self) -> usize {
        self.list()
            .iter()
            .map(|f| f.family().eta_dim())
            .max()
            .unwrap_or(1)
    }

    /// True for `[[family]]` ranges (targets carry their family).
    pub fn is_mixed(&self) -> bool {
        matches!(self, Families::Ranges(_))
    }

    /// `"poisson"`, or the range families joined (`"gaussian[1-12]+bernoulli[13-24]"`).
    pub fn describe(&self) -> String {
        match self {
            Families::All(f) => f.family().name().to_string(),
            Families::Ranges(r) => r
                .iter()
                .map(|r| {
                    format!(
                        "{}[{}-{}]",
                        r.family.family().name(),
                        r.items[0],
                        r.items[1]
                    )
                })
                .collect::<Vec<_>>()
                .join("+"),
        }
    }

    /// Checks the families against a model whose item ids are `first_item..items`, naming
    /// the field: each family's parameters ([`FamilySpec::validate`]); for ranges, at least
    /// one, each `first_item ≤ first ≤ last < items`, and no two overlapping.
    pub fn validate(&self, first_item: usize, items: usize) -> Result<(), TrainError> {
        let ranges = match self {
            Families::All(f) => return f.validate("family"),
            Families::Ranges(r) => r,
        };
        if ranges.is_empty() {
            return Err(TrainError::config("family", "no [[family]] table"));
        }
        for (k, r) in ranges.iter().enumerate() {
            r.family.validate(&format!("family[{k}]"))?;
            let [a, b] = r.items;
            if a < first_item || a > b || b >= items {
                return Err(TrainError::config(
                    format!("family[{k}].items"),
                    format!(
                        "[{a}, {b}] must be a range first ≤ last of item ids in {first_item}..={} \
                         (the model has {items} item rows{})",
                        items.saturating_sub(1),
                        if first_item == 1 {
                            ", row 0 is padding"
                        } else {
                            ""
                        }
                    ),
                ));
            }
            if let Some(j) = ranges[..k]
                .iter()
                .position(|o| o.items[0] <= b && a <= o.items[1])
            {
                return Err(TrainError::config(
                    format!("family[{k}].items"),
                    format!(
                        "[{a}, {b}] overlaps family[{j}].items = [{}, {}]",
                        ranges[j].items[0], ranges[j].items[1]
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl Serialize for Families {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Families::All(f) => f.serialize(s),
            Families::Ranges(r) => {
                let tables = r
                    .iter()
                    .map(|r| {
                        let mut v =
                            serde_json::to_value(r.family).map_err(serde::ser::Error::custom)?;
                        if let Some(m) = v.as_object_mut() {
                            m.insert("items".into(), serde_json::json!(r.items));
                        }
                        Ok(v)
                    })
                    .collect::<Result<Vec<_>, S::Error>>()?;
                tables.serialize(s)
            }
        }
    }
}

impl<'de> Deserialize<'de> for Families {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(FamiliesVisitor)
    }
}

struct FamiliesVisitor;

impl<'de> Visitor<'de> for FamiliesVisitor {
    type Value = Families;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a [family] table or [[family]] tables with `items = [first, last]`")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Families, A::Error> {
        FamilySpec::deserialize(de::value::MapAccessDeserializer::new(map)).map(Families::All)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Families, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element::<serde_json::Value>()? {
            let k = out.len();
            let err = |why: String| de::Error::custom(format!("family[{k}]: {why}"));
            let serde_json::Value::Object(mut m) = v else {
                return Err(err("expected a table with `items` and `kind`".into()));
            };
            let items = m
                .remove("items")
                .ok_or_else(|| err("missing `items = [first, last]`".into()))?;
            let items: [usize; 2] = serde_json::from_value(items)
                .map_err(|_| err("`items` must be [first, last], two item ids".into()))?;
            let family: FamilySpec = serde_json::from_value(serde_json::Value::Object(m))
                .map_err(|e| err(e.to_string()))?;
            out.push(FamilyRange { items, family });
        }
        Ok(Families::Ranges(out))
    }
}
