//! Loop-by-loop f64 implementations of the models' forward passes for one sample, written
//! from the paper's description (docs/paper.md §2.3–§2.4 and §6.2–§6.3), independent of the
//! tape: the references of `forward_reference`.

use efa_model::{EfaConfig, Params, Visibility};
use ndarray::Array2;

/// The 2-D parameter `name` of `p`.
pub fn mat(p: &Params<f64>, name: &str) -> Array2<f64> {
    p.get(name).unwrap().clone().into_dimensionality().unwrap()
}

/// The parameter `name` of `p`, flattened.
fn vec1(p: &Params<f64>, name: &str) -> Vec<f64> {
    p.get(name).unwrap().iter().copied().collect()
}

/// `x·W + b` for one row.
fn affine(x: &[f64], w: &Array2<f64>, b: Option<&[f64]>) -> Vec<f64> {
    (0..w.ncols())
        .map(|j| (0..x.len()).map(|i| x[i] * w[[i, j]]).sum::<f64>() + b.map_or(0.0, |b| b[j]))
        .collect()
}

/// The EFA of docs/paper.md §2.3 for one sample, written with plain loops.
pub fn efa_reference(
    cfg: &EfaConfig,
    p: &Params<f64>,
    tokens: &[usize],
    values: &[usize],
    len: usize,
    pred: usize,
) -> Vec<f64> {
    let n = tokens.len();
    let item = mat(p, "item_emb");
    let pos = mat(p, "pos_emb");
    let only_valid = cfg.positions.as_ref().is_some_and(|p| p.only_valid);
    let mut x: Vec<Vec<f64>> = (0..n)
        .map(|i| {
            let pad = tokens[i] == 0;
            let mut row: Vec<f64> = item.row(tokens[i]).to_vec();
            if pad && cfg.zero_padding {
                row.fill(0.0);
            }
            if cfg.values.is_some() {
                row.extend(mat(p, "value_emb").row(values[i]).iter());
            }
            if pad && only_valid {
                row
            } else {
                row.iter().zip(pos.row(i)).map(|(a, b)| a + b).collect()
            }
        })
        .collect();
    for l in 0..cfg.layers {
        let a = attention_reference(cfg, p, l, &x, |i, j| match cfg.direction {
            Visibility::Padding => j < len,
            Visibility::Causal => j <= i,
            Visibility::CausalPadding => j <= i && j < len,
        });
        for (xi, ai) in x.iter_mut().zip(a) {
            for (v, w) in xi.iter_mut().zip(ai) {
                *v += w;
            }
        }
    }
    head_reference(cfg, p, &x[pred])
}

/// Block `l`'s multi-head attention at every row of `x`, output projection included: Q, K, V
/// with biases, softmax of `q·k/√K` over the keys `j` with `visible(i, j)`, heads
/// concatenated.
fn attention_reference(
    cfg: &EfaConfig,
    p: &Params<f64>,
    l: usize,
    x: &[Vec<f64>],
    visible: impl Fn(usize, usize) -> bool,
) -> Vec<Vec<f64>> {
    let (n, h, k) = (x.len(), cfg.heads, cfg.key_dim);
    let proj = |name: &str| -> Vec<Vec<f64>> {
        let w = mat(p, &format!("block{l}.attn.{name}.w"));
        let b = vec1(p, &format!("block{l}.attn.{name}.b"));
        x.iter().map(|r| affine(r, &w, Some(&b))).collect()
    };
    let (q, kk, v) = (proj("q"), proj("k"), proj("v"));
    let wo = mat(p, &format!("block{l}.attn.o.w"));
    let bo = vec1(p, &format!("block{l}.attn.o.b"));
    (0..n)
        .map(|i| {
            let keys: Vec<usize> = (0..n).filter(|&j| visible(i, j)).collect();
            let mut concat = vec![0.0; h * k];
            for head in 0..h {
                let scores: Vec<f64> = keys
                    .iter()
                    .map(|&j| {
                        (0..k)
                            .map(|c| q[i][head * k + c] * kk[j][head * k + c])
                            .sum::<f64>()
                            / (k as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = scores.iter().map(|s| (s - m).exp()).sum();
                for (s, &j) in scores.iter().zip(&keys) {
                    let w = (s - m).exp() / z;
                    for c in 0..k {
                        concat[head * k + c] += w * v[j][head * k + c];
                    }
                }
            }
            affine(&concat, &wo, Some(&bo))
        })
        .collect()
}

/// The head MLP (ReLU layers) and the output layer at one row.
fn head_reference(cfg: &EfaConfig, p: &Params<f64>, x: &[f64]) -> Vec<f64> {
    let mut hdn = x.to_vec();
    for i in 0..cfg.head_hidden.len() {
        let b = vec1(p, &format!("head{i}.b"));
        hdn = affine(&hdn, &mat(p, &format!("head{i}.w")), Some(&b))
            .into_iter()
            .map(|v| v.max(0.0))
            .collect();
    }
    let b = cfg.out_bias.then(|| vec1(p, "out.b"));
    affine(&hdn, &mat(p, "out.w"), b.as_deref())
}

/// `Dense(b)(relu(Dense(a)(x)))` for one row.
fn mlp2(p: &Params<f64>, a: &str, b: &str, x: &[f64]) -> Vec<f64> {
    let bias = |n: &str| vec1(p, &format!("{n}.b"));
    let h: Vec<f64> = affine(x, &mat(p, &format!("{a}.w")), Some(&bias(a)))
        .into_iter()
        .map(|v| v.max(0.0))
        .collect();
    affine(&h, &mat(p, &format!("{b}.w")), Some(&bias(b)))
}

/// `(x − μ)/√(σ² + ε)·γ + β` for one row (biased variance, as Keras).
fn layer_norm_row(p: &Params<f64>, prefix: &str, x: &[f64], eps: f64) -> Vec<f64> {
    let n = x.len() as f64;
    let mu = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n;
    let (g, b) = (
        vec1(p, &format!("{prefix}.gain")),
        vec1(p, &format!("{prefix}.bias")),
    );
    (0..x.len())
        .map(|i| (x[i] - mu) / (var + eps).sqrt() * g[i] + b[i])
        .collect()
}

/// The temperature EFA of docs/paper.md §6.2–§6.3 for one sample, with plain loops: value MLP (or
/// the mask row at the target) ‖ site MLP (‖ lag row) → fusion MLP; post-LN blocks of full
/// attention and a ReLU feed-forward; head MLP at the target.
pub fn temperature_reference(
    cfg: &EfaConfig,
    p: &Params<f64>,
    temps: &[f64],
    sites: &[usize],
    lags: &[usize],
    pred: usize,
) -> f64 {
    let c = cfg.continuous.as_ref().unwrap();
    let n = temps.len();
    let mut x: Vec<Vec<f64>> = (0..n)
        .map(|j| {
            let mut row = if j == pred {
                mat(p, "mask_emb").row(1).to_vec()
            } else {
                mlp2(p, "value_mlp1", "value_mlp2", &[temps[j]])
            };
            row.extend(mlp2(p, "site_mlp1", "site_mlp2", &c.sites[sites[j]]));
            if c.lag_rows.is_some() {
                row.extend(mat(p, "lag_emb").row(lags[j]).iter());
            }
            mlp2(p, "fuse1", "fuse2", &row)
        })
        .collect();
    for l in 0..cfg.layers {
        let a = attention_reference(cfg, p, l, &x, |_, _| true);
        x = x
            .iter()
            .zip(a)
            .map(|(xi, ai)| {
                let r: Vec<f64> = xi.iter().zip(ai).map(|(x, a)| x + a).collect();
                let r = layer_norm_row(p, &format!("block{l}.ln1"), &r, cfg.ln_eps);
                let f = mlp2(p, &format!("block{l}.ffn1"), &format!("block{l}.ffn2"), &r);
                let r: Vec<f64> = r.iter().zip(f).map(|(x, f)| x + f).collect();
                layer_norm_row(p, &format!("block{l}.ln2"), &r, cfg.ln_eps)
            })
            .collect();
    }
    head_reference(cfg, p, &x[pred])[0]
}
