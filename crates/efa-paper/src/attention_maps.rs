//! Attention maps of a trained EFA model: the model's own general-plan forward records each
//! block's projected queries and keys ([`efa_model::efa::EfaConfig::forward_traced`]), and the
//! attention kernel's naive f64 reference turns them into probabilities
//! `P = softmax(scale·q·kᵀ)` over the visible keys.

use efa_model::batch::{Samples, Targets};
use efa_model::efa::EfaConfig;
use efa_model::model::{ModelConfig, ModelVars};
use efa_model::ModelError;
use efa_nn::params::Params;
use efa_tape::Tape;
use ndarray::{Array2, Ix3};

/// The paper's attention figure for one basket of an item EFA: for each position `i`, the
/// sample with `i` masked (token `n_items + 1`), and row `i` = the head-averaged attention of
/// that masked query over the basket's positions. Returns one `len × len` matrix per block.
pub fn basket_attention(
    cfg: &EfaConfig,
    params: &Params<f32>,
    basket: &[usize],
    n_items: usize,
    max_len: usize,
) -> Result<Vec<Array2<f64>>, ModelError> {
    let len = basket.len();
    if len == 0 || len > max_len {
        return Err(ModelError::Batch(format!(
            "attention maps: basket length {len} outside 1..={max_len}"
        )));
    }
    let tokens = Array2::from_shape_fn((len, max_len), |(i, j)| match j {
        _ if j == i => n_items + 1,
        _ if j < len => basket[j],
        _ => 0,
    });
    let batch = Samples {
        tokens,
        values: None,
        weights: None,
        center: None,
        lengths: vec![len; len],
        pred_idx: (0..len).collect(),
        targets: Targets::Class(vec![0; len]),
        group: None,
    };
    let probs = target_attention(cfg, params, &batch)?;
    Ok(probs
        .into_iter()
        .map(|p| Array2::from_shape_fn((len, len), |(i, j)| p[[i, j]]))
        .collect())
}

/// For every sample of `batch` and every block, the head-averaged attention probabilities of
/// the sample's target row over all key positions: one `[B, N]` matrix per block, computed in
/// f64 from `params`.
pub fn target_attention(
    cfg: &EfaConfig,
    params: &Params<f32>,
    batch: &Samples,
) -> Result<Vec<Array2<f64>>, ModelError> {
    let model = ModelConfig::Efa(cfg.clone());
    let params = params.cast::<f64>();
    let mut tape = Tape::<f64>::new();
    let reg = model.register(&mut tape, &params)?;
    let ModelVars::Efa(vars) = &reg.vars else {
        return Err(ModelError::MissingParam("EFA parameters expected".into()));
    };
    let (_, trace) = cfg.forward_traced(&mut tape, vars, batch)?;
    let (b, n) = batch.tokens.dim();
    let (h, k) = (cfg.heads, cfg.key_dim);
    let scale = 1.0 / (k as f64).sqrt();
    let mut maps = Vec::with_capacity(trace.len());
    for layer in &trace {
        let heads = |v: efa_tape::Var| -> Result<ndarray::Array4<f64>, ModelError> {
            let x = tape
                .value(v)
                .view()
                .into_dimensionality::<Ix3>()
                .map_err(|e| ModelError::Batch(e.to_string()))?;
            Ok(x.into_shape_with_order((b, n, h, k))
                .map_err(|e| ModelError::Batch(e.to_string()))?
                .permuted_axes([0, 2, 1, 3])
                .to_owned())
        };
        let (q, kk) = (heads(layer.q)?, heads(layer.k)?);
        let args = efa_attn::Attention::new(q.view(), kk.view(), kk.view())
            .mask(layer.mask.clone())
            .scale(scale);
        let p = efa_attn::naive::probabilities(&args)
            .map_err(|e| ModelError::Batch(format!("attention maps: {e}")))?;
        maps.push(Array2::from_shape_fn((b, n), |(s, j)| {
            (0..h)
                .map(|hh| p[[s, hh, batch.pred_idx[s], j]])
                .sum::<f64>()
                / h as f64
        }));
    }
    Ok(maps)
}
