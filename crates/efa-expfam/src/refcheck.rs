//! Comparison against high-precision reference values (the schema and tolerance rule of
//! `shared/reference/README.md`). The comparison works on [`RefCase`]s and knows no file
//! format; the reader of the reference JSON is `refcheck::format` (the CLI and this crate's tests use
//! it), behind the off-by-default `reference` feature.
//!
//! Tolerance rule ([`Tolerance`]), with eps = 2⁻⁵² (f64) or 2⁻²³ (f32) and the reference first
//! rounded to the type under test:
//! * A, dA, d2A, t, log h, probs, d2nll, ∂nll/∂c: |got − ref| ≤ rtol·|ref| + floor
//!   (rtol 1e-13, floor 1e-300 in f64; 2e-5 and 1.2e-38 in f32);
//! * nll, dnll: |got − ref| ≤ rtol·|ref| + K·eps·scale + floor with `nll_scale` / `dnll_scale`
//!   (K = 256 in f64, 64 in f32) and the same underflow floor, which matters only where the
//!   reference is subnormal or zero.
//!
//! A case is first checked as input ([`validate_case`]: known family and parameters, lengths
//! of η, y and every reference field, y in the support, η in the domain, scales ≥ 0); a case
//! that fails there is malformed, not a numerics failure.

use crate::{ordinal, ExpfamError, Family, Num};
use efa_num::Real;

#[cfg(feature = "reference")]
pub mod format;

/// One reference case with every number already converted to f64 (exact binary64 values).
#[derive(Clone, Debug, Default)]
pub struct RefCase {
    /// Case id, e.g. `poisson-p07`.
    pub id: String,
    /// Reference family name.
    pub family: String,
    /// Fixed parameter n (binomial, multinomial).
    pub n: Option<f64>,
    /// Fixed parameter s2 (gaussian_known_var).
    pub s2: Option<f64>,
    /// Fixed parameter r (negative_binomial).
    pub r: Option<f64>,
    /// Cut-points (ordinal_logit).
    pub cutpoints: Vec<f64>,
    /// Natural parameter η.
    pub eta: Vec<f64>,
    /// Observation (count vector for the multinomial, index for categorical / ordinal).
    pub y: Vec<f64>,
    /// t(y) (absent for the ordinal model).
    pub t: Option<Vec<f64>>,
    /// log h(y).
    pub log_h: Option<f64>,
    /// A(η).
    pub a: Option<f64>,
    /// ∇A(η).
    pub da: Option<Vec<f64>>,
    /// ∇²A(η), row-major.
    pub d2a: Option<Vec<f64>>,
    /// nll(y, η).
    pub nll: f64,
    /// ∂nll/∂η.
    pub dnll: Vec<f64>,
    /// Size of the cancelled terms inside nll.
    pub nll_scale: f64,
    /// Size of the cancelled terms inside each dnll component.
    pub dnll_scale: Vec<f64>,
    /// ∂²nll/∂η² (ordinal only).
    pub d2nll: Option<f64>,
    /// ∂nll/∂c (ordinal only).
    pub dnll_dcutpoints: Option<Vec<f64>>,
    /// P(Y = k) (ordinal only).
    pub probs: Option<Vec<f64>>,
    /// Inputs exactly representable in binary32.
    pub f32_exact_inputs: bool,
}

/// The result of comparing one value.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldCheck {
    /// Field and component, e.g. `dA[1]` or `nll`.
    pub field: String,
    /// Computed value (widened to f64).
    pub got: f64,
    /// Reference value rounded to the type under test.
    pub want: f64,
    /// |got − ref| / tolerance: ≤ 1 passes.
    pub ratio: f64,
    /// The error in units of eps·|ref| (relative fields, "ulps") or eps·scale (nll, dnll).
    pub units: f64,
    /// Whether the value is within tolerance.
    pub pass: bool,
    /// True for nll / dnll (scaled bound), false for relative fields.
    pub scaled: bool,
}

/// The [`Family`] named by a reference case, with its fixed parameters. The message of an
/// error does not name the case (the caller does).
pub fn family_of(case: &RefCase) -> Result<Family, String> {
    let need = |v: Option<f64>, name: &str| v.ok_or_else(|| format!("missing params.{name}"));
    let count = |v: f64, name: &str| {
        if v >= 0.0 && v == v.floor() && v < 9.0e15 {
            Ok(v as u64)
        } else {
            Err(format!(
                "params.{name} = {} is not a non-negative integer",
                Num(v)
            ))
        }
    };
    let vector = |what: &str| {
        if case.eta.is_empty() {
            Err(format!("eta is empty ({what} needs K >= 1 logits)"))
        } else {
            Ok(case.eta.len())
        }
    };
    let fam = match case.family.as_str() {
        "bernoulli" => Family::Bernoulli,
        "binomial" => Family::Binomial {
            n: count(need(case.n, "n")?, "n")?,
        },
        "poisson" => Family::Poisson,
        "categorical" => Family::Categorical {
            k: vector("categorical")?,
        },
        "multinomial" => Family::Multinomial {
            n: count(need(case.n, "n")?, "n")?,
            k: vector("multinomial")?,
        },
        "gaussian_known_var" => Family::GaussianKnownVar {
            s2: need(case.s2, "s2")?,
        },
        "gaussian" => Family::Gaussian,
        "gamma" => Family::Gamma,
        "exponential" => Family::Exponential,
        "beta" => Family::Beta,
        "negative_binomial" => Family::NegativeBinomial {
            r: need(case.r, "r")?,
        },
        "ordinal_logit" => Family::OrdinalLogit {
            k: case.cutpoints.len() + 1,
        },
        other => return Err(format!("unknown family {other:?}")),
    };
    if let Family::OrdinalLogit { .. } = fam {
        ordinal::check_cutpoints(&case.cutpoints).map_err(|e| e.to_string())?;
    }
    fam.validate().map_err(|e| e.to_string())?;
    // Parameters the family does not take would be silently ignored: reject them.
    let takes = |name: &str| match name {
        "n" => matches!(fam, Family::Binomial { .. } | Family::Multinomial { .. }),
        "s2" => matches!(fam, Family::GaussianKnownVar { .. }),
        "r" => matches!(fam, Family::NegativeBinomial { .. }),
        _ => matches!(fam, Family::OrdinalLogit { .. }),
    };
    let given = [
        ("n", case.n.is_some()),
        ("s2", case.s2.is_some()),
        ("r", case.r.is_some()),
        ("cutpoints", !case.cutpoints.is_empty()),
    ];
    for (name, present) in given {
        if present && !takes(name) {
            return Err(format!(
                "params.{name} is not a parameter of {}",
                fam.name()
            ));
        }
    }
    Ok(fam)
}

/// Checks that a case is well-formed input before any numerics: the family and its parameters
/// ([`family_of`]); the lengths of η (`eta_dim`), y (`obs_dim`), t, dA, dnll, dnll_scale
/// (`eta_dim`), d2A (`eta_dim²`), and for the ordinal model probs (K) and dnll_dcutpoints
/// (K − 1); that fields of the other kind are absent (A, dA, d2A, t, log h for the ordinal
/// model; probs, d2nll, dnll_dcutpoints for the others); that y is in the support and η in the
/// domain (checked in f64); that the inputs (η, y, parameters) are exact in binary32 when
/// `f32_exact_inputs` says so; and that nll_scale and dnll_scale are finite and ≥ 0.
/// Returns the family, or a message naming the field (not the case: the caller adds it).
pub fn validate_case(case: &RefCase) -> Result<Family, String> {
    let fam = family_of(case)?;
    let d = fam.eta_dim();
    let name = fam.name();
    let len = |field: &str, got: usize, want: usize| {
        if got == want {
            Ok(())
        } else {
            Err(format!("{field} has {got} value(s), {name} needs {want}"))
        }
    };
    len("eta", case.eta.len(), d)?;
    len("y", case.y.len(), fam.obs_dim())?;
    len("dnll", case.dnll.len(), d)?;
    len("dnll_scale", case.dnll_scale.len(), d)?;
    let absent = |field: &str, present: bool| {
        if present {
            Err(format!("{field} is given but not defined for {name}"))
        } else {
            Ok(())
        }
    };
    if let Family::OrdinalLogit { k } = fam {
        absent("t", case.t.is_some())?;
        absent("log_h", case.log_h.is_some())?;
        absent("A", case.a.is_some())?;
        absent("dA", case.da.is_some())?;
        absent("d2A", case.d2a.is_some())?;
        if let Some(p) = &case.probs {
            len("probs", p.len(), k)?;
        }
        if let Some(g) = &case.dnll_dcutpoints {
            len("dnll_dcutpoints", g.len(), k - 1)?;
        }
        ordinal::check_obs(k, case.y[0], 0).map_err(|e| e.without_row().to_string())?;
        ordinal::check_eta(case.eta[0], 0).map_err(|e| e.without_row().to_string())?;
    } else {
        absent("probs", case.probs.is_some())?;
        absent("d2nll", case.d2nll.is_some())?;
        absent("dnll_dcutpoints", case.dnll_dcutpoints.is_some())?;
        for (field, v, want) in [
            ("t", &case.t, d),
            ("dA", &case.da, d),
            ("d2A", &case.d2a, d * d),
        ] {
            if let Some(v) = v {
                len(field, v.len(), want)?;
            }
        }
        let e = fam.eval();
        e.check_obs(&case.y).map_err(|e| e.to_string())?;
        e.check_eta(&case.eta).map_err(|e| e.to_string())?;
    }
    if case.f32_exact_inputs {
        let inputs = [
            ("eta", &case.eta),
            ("y", &case.y),
            ("cutpoints", &case.cutpoints),
        ];
        let params = [
            ("params.n", case.n),
            ("params.s2", case.s2),
            ("params.r", case.r),
        ];
        let vectors = inputs.iter().flat_map(|(f, v)| {
            v.iter()
                .enumerate()
                .map(move |(i, &x)| (format!("{f}[{i}]"), x))
        });
        let scalars = params
            .iter()
            .filter_map(|(f, v)| v.map(|x| (f.to_string(), x)));
        for (field, x) in vectors.chain(scalars) {
            if f64::from(x as f32) != x && !x.is_nan() {
                return Err(format!(
                    "f32_exact_inputs is true but {field} = {} is not exact in binary32",
                    Num(x)
                ));
            }
        }
    }
    let scales = std::iter::once(("nll_scale".to_string(), case.nll_scale)).chain(
        case.dnll_scale
            .iter()
            .enumerate()
            .map(|(i, &v)| (format!("dnll_scale[{i}]"), v)),
    );
    for (field, v) in scales {
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("{field} = {} must be finite and >= 0", Num(v)));
        }
    }
    Ok(fam)
}

/// The README's tolerance rule for one precision (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Relative tolerance: 1e-13 (f64), 2e-5 (f32).
    pub rtol: f64,
    /// Underflow floor: 1e-300 (f64), 1.2e-38 (f32).
    pub floor: f64,
    /// K of the scaled bound: 256 (f64), 64 (f32).
    pub k: f64,
    /// Unit roundoff of the type: 2⁻⁵² or 2⁻²³.
    pub eps: f64,
}

impl Tolerance {
    /// The rule for precision `T`.
    pub fn for_type<T: Real>() -> Self {
        let f32_like = T::BYTES == 4;
        Tolerance {
            rtol: if f32_like { 2e-5 } else { 1e-13 },
            floor: if f32_like { 1.2e-38 } else { 1e-300 },
            k: if f32_like { 64.0 } else { 256.0 },
            eps: T::EPSILON.to_f64(),
        }
    }

    /// The allowed |got − ref|: rtol·|ref| + floor, plus K·eps·scale for nll and dnll
    /// (`scale` = `Some(nll_scale)` or `Some(dnll_scale[i])`).
    pub fn bound(&self, want: f64, scale: Option<f64>) -> f64 {
        let scaled = scale.map_or(0.0, |s| self.k * self.eps * s);
        self.rtol * want.abs() + scaled + self.floor
    }
}

struct Cmp {
    tol: Tolerance,
    out: Vec<FieldCheck>,
}

impl Cmp {
    fn round<T: Real>(x: f64) -> f64 {
        T::from_f64(x).to_f64()
    }

    fn push(&mut self, field: String, got: f64, want: f64, scale: Option<f64>) {
        let err = (got - want).abs();
        let tol = self.tol.bound(want, scale);
        let unit = self.tol.eps * scale.map_or(want.abs(), |s| s.max(want.abs()));
        let (pass, ratio, units) = if got == want {
            (true, 0.0, 0.0)
        } else if got.is_nan() || want.is_nan() || !err.is_finite() {
            (false, f64::INFINITY, f64::INFINITY)
        } else {
            let units = if unit > 0.0 {
                err / unit
            } else {
                f64::INFINITY
            };
            (err <= tol, err / tol, units)
        };
        self.out.push(FieldCheck {
            field,
            got,
            want,
            ratio,
            units,
            pass,
            scaled: scale.is_some(),
        });
    }

    fn vec<T: Real>(&mut self, name: &str, got: &[T], want: &[f64], scale: Option<&[f64]>) {
        if got.len() != want.len() {
            self.out.push(FieldCheck {
                field: format!("{name} (length {} vs {})", got.len(), want.len()),
                got: f64::NAN,
                want: f64::NAN,
                ratio: f64::INFINITY,
                units: f64::INFINITY,
                pass: false,
                scaled: false,
            });
            return;
        }
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            let s = scale.map(|s| s.get(i).copied().unwrap_or(0.0));
            self.push(format!("{name}[{i}]"), g.to_f64(), Self::round::<T>(w), s);
        }
    }
}

/// Evaluates a case in precision `T` and compares every field that the case gives (A, dA,
/// d2A, t, log h, nll, dnll; for the ordinal model probs, d2nll, ∂nll/∂c, nll, dnll).
/// An `Err` means the case could not be evaluated: a malformed case ([`validate_case`]; callers
/// that read files should validate first and report it as an input error) or inputs the type
/// rejects (e.g. η rounded out of the domain in f32). Messages name the case.
pub fn check_case<T: Real>(case: &RefCase) -> Result<Vec<FieldCheck>, String> {
    let fam = validate_case(case).map_err(|m| format!("case {}: {m}", case.id))?;
    let mut cmp = Cmp {
        tol: Tolerance::for_type::<T>(),
        out: Vec::new(),
    };
    let conv = |v: &[f64]| v.iter().map(|&x| T::from_f64(x)).collect::<Vec<T>>();
    let (eta, y) = (conv(&case.eta), conv(&case.y));
    let ctx = |e: ExpfamError| format!("case {} in {}: {}", case.id, T::NAME, e.without_row());
    let d = fam.eta_dim();
    let mut grad = vec![T::ZERO; d];
    if let Family::OrdinalLogit { k } = fam {
        let cut = conv(&case.cutpoints);
        ordinal::check_cutpoints(&cut).map_err(ctx)?;
        let cls = ordinal::check_obs(k, y[0], 0).map_err(ctx)?;
        ordinal::check_eta(eta[0], 0).map_err(ctx)?;
        let mut gc = vec![T::ZERO; cut.len()];
        let nll = ordinal::nll_grad(&cut, cls, eta[0], &mut grad[0], &mut gc);
        cmp.push(
            "nll".into(),
            nll.to_f64(),
            Cmp::round::<T>(case.nll),
            Some(case.nll_scale),
        );
        cmp.vec("dnll", &grad, &case.dnll, Some(&case.dnll_scale));
        if let Some(want) = &case.dnll_dcutpoints {
            cmp.vec("dnll_dcutpoints", &gc, want, None);
        }
        if let Some(want) = case.d2nll {
            let h = ordinal::d2nll(&cut, cls, eta[0]);
            cmp.push("d2nll".into(), h.to_f64(), Cmp::round::<T>(want), None);
        }
        if let Some(want) = &case.probs {
            let mut p = vec![T::ZERO; k];
            ordinal::probs(&cut, eta[0], &mut p);
            cmp.vec("probs", &p, want, None);
        }
        return Ok(cmp.out);
    }
    let e = fam.eval();
    if let Some(want) = case.a {
        let a = e.log_partition(&eta).map_err(ctx)?;
        cmp.push("A".into(), a.to_f64(), Cmp::round::<T>(want), None);
    }
    if let Some(want) = &case.da {
        cmp.vec("dA", &e.mean(&eta).map_err(ctx)?, want, None);
    }
    if let Some(want) = &case.d2a {
        cmp.vec("d2A", &e.hessian(&eta).map_err(ctx)?, want, None);
    }
    if let Some(want) = &case.t {
        cmp.vec("t", &e.suff_stat(&y).map_err(ctx)?, want, None);
    }
    if let Some(want) = case.log_h {
        let lh = e.log_base(&y).map_err(ctx)?;
        cmp.push("log_h".into(), lh.to_f64(), Cmp::round::<T>(want), None);
    }
    let (nll, grad) = e.nll_grad(&y, &eta).map_err(ctx)?;
    cmp.push(
        "nll".into(),
        nll.to_f64(),
        Cmp::round::<T>(case.nll),
        Some(case.nll_scale),
    );
    cmp.vec("dnll", &grad, &case.dnll, Some(&case.dnll_scale));
    Ok(cmp.out)
}
