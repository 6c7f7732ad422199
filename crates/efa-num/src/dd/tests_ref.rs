//! `Dd` against the mpmath reference values of `fixtures/dd/reference.txt` (written by
//! `fixtures/dd/make_reference.py`): every line's relative error, the worst per function
//! printed, and each function held to its bound.

use super::Dd;
use crate::scalar;
use crate::Real;
use std::collections::BTreeMap;

/// Functions built on f64 constants or f64 approximations inside `efa_num::scalar`: measured
/// and reported, held only to this f64-level bound.
const F64_LEVEL: &[&str] = &[
    "digamma",
    "trigamma",
    "scalar_lgamma",
    "lgamma1p",
    "digamma1p",
    "lbeta",
];
/// The bound for everything else.
const DD_BOUND: f64 = 1e-30;
const F64_BOUND: f64 = 1e-13;

struct Case {
    name: String,
    args: Vec<Dd>,
    want: (f64, f64, f64),
}

fn parse_line(line: &str) -> Case {
    let f: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| -> f64 {
        f[i].parse()
            .unwrap_or_else(|_| panic!("bad number in {line}"))
    };
    let n: usize = f[1].parse().expect("argument count");
    assert_eq!(f.len(), 2 + 2 * n + 3, "malformed line: {line}");
    let args = (0..n)
        .map(|i| {
            let (hi, lo) = (num(2 + 2 * i), num(3 + 2 * i));
            assert_eq!(hi + lo, hi, "argument not normalised: {line}");
            Dd::raw(hi, lo)
        })
        .collect();
    let r = 2 + 2 * n;
    Case {
        name: f[0].to_string(),
        args,
        want: (num(r), num(r + 1), num(r + 2)),
    }
}

fn cases() -> Vec<Case> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/dd/reference.txt"
    );
    let text = std::fs::read_to_string(path).expect("fixtures/dd/reference.txt");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(parse_line)
        .collect()
}

/// The function a line names, evaluated in Dd.
fn eval(c: &Case) -> Dd {
    let a = &c.args;
    let x = a.first().copied().unwrap_or(Dd::ZERO);
    let y = a.get(1).copied().unwrap_or(Dd::ZERO);
    match c.name.as_str() {
        "const_ln_2" => Dd::LN_2,
        "const_pi" => Dd::PI,
        "add" => x + y,
        "sub" => x - y,
        "mul" => x * y,
        "div" => x / y,
        "exp" => x.exp(),
        "exp_m1" => x.exp_m1(),
        "ln" => x.ln(),
        "ln_1p" => x.ln_1p(),
        "sqrt" => x.sqrt(),
        "tanh" => x.tanh(),
        "erf" => x.erf(),
        "lgamma" => Real::lgamma(x),
        "powf" => x.powf(y),
        "powi" => x.powi(y.hi as i32),
        other => eval_scalar(other, a),
    }
}

/// The `efa_num::scalar` functions, instantiated with `T = Dd`.
fn eval_scalar(name: &str, a: &[Dd]) -> Dd {
    let (x, y) = (a[0], a.get(1).copied().unwrap_or(Dd::ZERO));
    match name {
        "softplus" => scalar::softplus(x),
        "sigmoid" => scalar::sigmoid(x),
        "log_sigmoid" => scalar::log_sigmoid(x),
        "log1mexp" => scalar::log1mexp(x),
        "log1pmx" => scalar::log1pmx(x),
        "logsumexp" => scalar::logsumexp(a),
        "xlogy" => scalar::xlogy(x, y),
        "xlog1py" => scalar::xlog1py(x, y),
        "digamma" => scalar::digamma(x),
        "trigamma" => scalar::trigamma(x),
        "scalar_lgamma" => scalar::lgamma(x),
        "lgamma1p" => scalar::lgamma1p(x),
        "digamma1p" => scalar::digamma1p(x),
        "lbeta" => scalar::lbeta(x, y),
        other => panic!("unknown function {other} in the reference file"),
    }
}

/// `|got − want| / |want|` with `want` in three words (the differences of the leading words
/// are exact when they are close).
fn rel_err(got: Dd, want: (f64, f64, f64)) -> f64 {
    let (h, l, r) = want;
    if !h.is_finite() {
        return if got.hi == h { 0.0 } else { f64::INFINITY };
    }
    let d = ((got.hi - h) + (got.lo - l)) - r;
    if h == 0.0 {
        return d.abs();
    }
    (d / h).abs()
}

#[test]
fn dd_matches_the_mpmath_reference() {
    let cases = cases();
    assert!(cases.len() > 1000, "only {} reference lines", cases.len());
    let mut worst: BTreeMap<String, (f64, usize, String)> = BTreeMap::new();
    for c in &cases {
        let got = eval(c);
        let e = rel_err(got, c.want);
        let e = if e.is_nan() { f64::INFINITY } else { e };
        let w = worst
            .entry(c.name.clone())
            .or_insert((0.0, 0, String::new()));
        w.1 += 1;
        if e >= w.0 {
            let args: Vec<String> = c.args.iter().map(|a| format!("{:e}", a)).collect();
            *w = (e, w.1, format!("({}) -> {:e}", args.join(", "), got));
        }
    }
    let mut failed = Vec::new();
    println!(
        "{:<14} {:>5} {:>10}  worst case",
        "function", "lines", "rel. err"
    );
    for (name, (e, n, at)) in &worst {
        let bound = if F64_LEVEL.contains(&name.as_str()) {
            F64_BOUND
        } else {
            DD_BOUND
        };
        println!("{name:<14} {n:>5} {e:>10.2e}  {at}");
        if *e > bound {
            failed.push(format!("{name}: {e:.2e} > {bound:.0e} at {at}"));
        }
    }
    assert!(failed.is_empty(), "over the bound:\n{}", failed.join("\n"));
}
