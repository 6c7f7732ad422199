//! Shared test helpers: the reference file parser and a central-difference helper.
#![allow(dead_code)]

use efa_expfam::refcheck::RefCase;
use serde_json::Value;

/// Path of the shared reference file, relative to this crate.
pub fn reference_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/reference/expfam_reference.json")
}

fn num(v: &Value) -> f64 {
    match v.as_str().expect("numbers are strings") {
        "inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        s => s.parse().expect("decimal"),
    }
}

fn nums(v: &Value) -> Vec<f64> {
    match v {
        Value::Array(a) => a.iter().map(num).collect(),
        other => vec![num(other)],
    }
}

fn opt(v: &Value) -> Option<&Value> {
    if v.is_null() {
        None
    } else {
        Some(v)
    }
}

/// Loads every case of the reference file.
pub fn load_cases() -> Vec<RefCase> {
    let text = std::fs::read_to_string(reference_path()).expect("reference file readable");
    let doc: Value = serde_json::from_str(&text).expect("valid JSON");
    doc["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let p = &c["params"];
            RefCase {
                id: c["id"].as_str().unwrap().to_string(),
                family: c["family"].as_str().unwrap().to_string(),
                n: opt(&p["n"]).map(num),
                s2: opt(&p["s2"]).map(num),
                r: opt(&p["r"]).map(num),
                cutpoints: opt(&p["cutpoints"]).map(nums).unwrap_or_default(),
                eta: nums(&c["eta"]),
                y: nums(&c["y"]),
                t: opt(&c["t"]).map(nums),
                log_h: opt(&c["log_h"]).map(num),
                a: opt(&c["A"]).map(num),
                da: opt(&c["dA"]).map(nums),
                d2a: opt(&c["d2A"]).map(|m| m.as_array().unwrap().iter().flat_map(nums).collect()),
                nll: num(&c["nll"]),
                dnll: nums(&c["dnll"]),
                nll_scale: num(&c["nll_scale"]),
                dnll_scale: nums(&c["dnll_scale"]),
                d2nll: opt(&c["d2nll"])
                    .map(|m| m.as_array().unwrap().iter().flat_map(nums).next().unwrap()),
                dnll_dcutpoints: opt(&c["dnll_dcutpoints"]).map(nums),
                probs: opt(&c["probs"]).map(nums),
                f32_exact_inputs: c["f32_exact_inputs"].as_bool().unwrap_or(false),
            }
        })
        .collect()
}

/// Central differences `(f(x + h eᵢ) − f(x − h eᵢ)) / 2h`, `h = 1e-6·max(1, |xᵢ|)`, for every
/// coordinate: the project's one implementation, `efa_check::central_gradient`.
pub fn central_diff(f: &dyn Fn(&[f64]) -> f64, x: &[f64]) -> Vec<f64> {
    efa_check::central_gradient(&mut |v| f(v), x, &efa_check::FdOptions::default())
}
