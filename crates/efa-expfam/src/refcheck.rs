//! Comparison against high-precision reference values (the schema and tolerance rule of
//! `shared/reference/README.md`), independent of any file format: the caller parses the file
//! into [`RefCase`]s (the CLI and the tests use serde_json).
//!
//! Tolerance rule, with eps = 2⁻⁵² (f64) or 2⁻²³ (f32) and the reference first rounded to the
//! type under test:
//! * A, dA, d2A, t, log h, probs, d2nll, ∂nll/∂c: |got − ref| ≤ rtol·|ref| + floor
//!   (rtol 1e-13, floor 1e-300 in f64; 2e-5 and 1.2e-38 in f32);
//! * nll, dnll: |got − ref| ≤ rtol·|ref| + K·eps·scale with `nll_scale` / `dnll_scale`
//!   (K = 256 in f64, 64 in f32).

use crate::{ordinal, ExpfamError, Family};
use efa_num::Real;

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

/// The [`Family`] named by a reference case, with its fixed parameters.
pub fn family_of(case: &RefCase) -> Result<Family, String> {
    let need = |v: Option<f64>, name: &str| {
        v.ok_or_else(|| format!("case {}: missing params.{name}", case.id))
    };
    let count = |v: f64, name: &str| {
        if v >= 0.0 && v == v.floor() && v < 9.0e15 {
            Ok(v as u64)
        } else {
            Err(format!(
                "case {}: params.{name} = {v} is not a non-negative integer",
                case.id
            ))
        }
    };
    let fam = match case.family.as_str() {
        "bernoulli" => Family::Bernoulli,
        "binomial" => Family::Binomial {
            n: count(need(case.n, "n")?, "n")?,
        },
        "poisson" => Family::Poisson,
        "categorical" => Family::Categorical { k: case.eta.len() },
        "multinomial" => Family::Multinomial {
            n: count(need(case.n, "n")?, "n")?,
            k: case.eta.len(),
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
        other => return Err(format!("case {}: unknown family {other:?}", case.id)),
    };
    fam.validate()
        .map_err(|e| format!("case {}: {e}", case.id))?;
    Ok(fam)
}

struct Cmp {
    rtol: f64,
    floor: f64,
    k_eps: f64,
    eps: f64,
    out: Vec<FieldCheck>,
}

impl Cmp {
    fn round<T: Real>(x: f64) -> f64 {
        T::from_f64(x).to_f64()
    }

    fn push(&mut self, field: String, got: f64, want: f64, scale: Option<f64>) {
        let err = (got - want).abs();
        let (tol, unit) = match scale {
            Some(s) => (
                self.rtol * want.abs() + self.k_eps * s,
                self.eps * s.max(want.abs()),
            ),
            None => (self.rtol * want.abs() + self.floor, self.eps * want.abs()),
        };
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
/// An `Err` means the case could not be evaluated at all (bad family or rejected input).
pub fn check_case<T: Real>(case: &RefCase) -> Result<Vec<FieldCheck>, String> {
    let fam = family_of(case)?;
    let eps = T::EPSILON.to_f64();
    let f32_like = T::BYTES == 4;
    let mut cmp = Cmp {
        rtol: if f32_like { 2e-5 } else { 1e-13 },
        floor: if f32_like { 1.2e-38 } else { 1e-300 },
        k_eps: if f32_like { 64.0 } else { 256.0 } * eps,
        eps,
        out: Vec::new(),
    };
    let conv = |v: &[f64]| v.iter().map(|&x| T::from_f64(x)).collect::<Vec<T>>();
    let (eta, y) = (conv(&case.eta), conv(&case.y));
    let ctx = |e: ExpfamError| format!("case {}: {e}", case.id);
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
    if let Some(want) = case.a {
        let a = fam.log_partition(&eta, 0).map_err(ctx)?;
        cmp.push("A".into(), a.to_f64(), Cmp::round::<T>(want), None);
    }
    if let Some(want) = &case.da {
        let mut m = vec![T::ZERO; d];
        fam.mean(&eta, &mut m, 0).map_err(ctx)?;
        cmp.vec("dA", &m, want, None);
    }
    if let Some(want) = &case.d2a {
        let mut h = vec![T::ZERO; d * d];
        fam.hessian(&eta, &mut h, 0).map_err(ctx)?;
        cmp.vec("d2A", &h, want, None);
    }
    if let Some(want) = &case.t {
        let mut t = vec![T::ZERO; d];
        fam.suff_stat(&y, &mut t, 0).map_err(ctx)?;
        cmp.vec("t", &t, want, None);
    }
    if let Some(want) = case.log_h {
        let lh = fam.log_base(&y, 0).map_err(ctx)?;
        cmp.push("log_h".into(), lh.to_f64(), Cmp::round::<T>(want), None);
    }
    let nll = fam.nll_grad(&y, &eta, &mut grad, 0).map_err(ctx)?;
    cmp.push(
        "nll".into(),
        nll.to_f64(),
        Cmp::round::<T>(case.nll),
        Some(case.nll_scale),
    );
    cmp.vec("dnll", &grad, &case.dnll, Some(&case.dnll_scale));
    Ok(cmp.out)
}
