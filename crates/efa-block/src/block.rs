//! One post-norm transformer block (the paper's temperature model, docs/paper.md §6.2) as a
//! single kernel ([`PostNormKernel`], recorded on the tape by `efa-nn`'s `post_norm_block`),
//! computed in parallel chunks of whole samples with every intermediate kept in cache-sized
//! row-major buffers.
//!
//! For `x` `[B, N, d]` and each query row `i` of sample `b` (every row, or one given row per
//! sample), with heads `h` of width `K` and the first `len_b` keys visible:
//!
//! ```text
//! qᵢ = xᵢ·W_q + b_q,  kⱼ = xⱼ·W_k + b_k,  vⱼ = xⱼ·W_v + b_v     (or given q, k, v)
//! aᵢ = Σ_h softmax_{j<len_b}(scale·⟨qᵢₕ, kⱼₕ⟩)·vⱼₕ · W_o[h] + b_o  (or the given per-head softmax·v, concatenated)
//! zᵢ = LN₁(xᵢ + aᵢ)
//! yᵢ = LN₂(zᵢ + relu(zᵢ·W₁ + b₁)·W₂ + b₂)
//! ```
//!
//! with `LN(u) = (u − μ)/√(σ² + ε)∘γ + β` over the last axis (biased variance). This is
//! exactly `x = LN₁(x + MHA(x)); x = LN₂(x + FFN(x))` of a Keras post-norm block, as the tape
//! would compute it from `linear`, `attention_heads`, `add` and `layer_norm` nodes, but with
//! the projections run on weights packed once per call, the attention on the
//! [`rows`] kernel, biases, residuals and the ReLU applied in place, and the backward of the
//! whole block in one pass per chunk. The attention probabilities of blocks whose every row is
//! a query are not kept: the backward forms them again per sample, in cache, from the kept `q`
//! and `k` and the softmax's per-query maxima and scales ([`rows::probs_uninit`]: one score
//! product and one exponential per element, the forward's bits). Keeping them would add a
//! quarter to the saved state's bytes in the temperature model, all of it traffic to main
//! memory. Those of a few query rows (one per sample, at the targets) are small and kept.
//!
//! Work is split into chunks of whole samples ([`CHUNK_ROWS`] rows) that run on rayon's pool;
//! each chunk writes its own rows and its own partial parameter gradients, which are summed in
//! a fixed pairwise tree over the chunks, so results are bitwise the same for any number of
//! threads.

mod backward;
mod dense;
mod forward;
mod norm;
pub mod rows;
mod saved;
mod transpose;

use crate::KernelError;
use efa_num::Real;
use ndarray::{ArrayD, IxDyn};
use rows::RowsShape;
use saved::Saved;
use std::sync::Arc;

const NAME: &str = "fused:post_norm_block";

/// Rows per parallel chunk (rounded to whole samples; at least one sample). 256 rows of the
/// temperature model (d = 32, H·K = 32, FFN 64) keep a chunk's activations and one sample's
/// attention probabilities, about 0.3 MiB, inside a 1 MiB L2 cache while its chunk-sized
/// products still run many register blocks.
pub const CHUNK_ROWS: usize = 256;

/// Where a block's queries, keys and values come from (the inputs after `x`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockSource {
    /// Projected from the block input inside the kernel: inputs `x, W_q, b_q, W_k, b_k, W_v,
    /// b_v`, each kernel `[d, H·K]` and bias `[H·K]`.
    Project,
    /// Already projected: inputs `x, q, k, v`, `q` `[B, Nq, H·K]` (`Nq` = N, or 1 with query
    /// rows), `k`, `v` `[B, N, H·K]` (head `h` owns columns `[h·K, (h+1)·K)`).
    Given,
    /// The attention computed elsewhere: inputs `x, a`, `a` `[B, Nq, H·K]` each head's
    /// `softmax(…)·v` before the output projection; `heads`, `scale` and `key_lengths` are
    /// not used.
    Attended,
}
use BlockSource as Source;

impl BlockSource {
    /// The position of the tail's first input (`W_o`) among the kernel's inputs: after `x`
    /// and the projection (6), the given `q, k, v` (3) or the attention output `a` (1).
    pub fn tail_input(self) -> usize {
        tail_at(self)
    }
}

/// The settings of one block (its inputs are arrays: `x`, those of the [`BlockSource`], then
/// the tail `W_o, b_o, γ₁, β₁, W₁, b₁, W₂, b₂, γ₂, β₂`).
#[derive(Clone, Debug)]
pub struct BlockSettings {
    /// Heads `H` (the projection width `H·K` must divide by it).
    pub heads: usize,
    /// Score scale (`1/√K` for Keras).
    pub scale: f64,
    /// Layer-norm ε of both norms.
    pub eps: f64,
    /// Where queries, keys and values come from.
    pub source: BlockSource,
    /// Visible keys per sample (`j < len_b`); `None`: all `N`.
    pub key_lengths: Option<Vec<usize>>,
    /// One query row per sample (e.g. the target position), giving `[B, 1, d]`; `None`: every
    /// row is a query, giving `[B, N, d]`.
    pub queries: Option<Vec<usize>>,
    /// Keep the column path's attention probabilities instead of forming them again in the
    /// backward (the same bits; for tests that compare the two).
    pub keep_cols_p: bool,
}

/// The kernel's settings (the inputs come with each call).
#[derive(Clone, Debug)]
struct Config {
    heads: usize,
    scale: f64,
    eps: f64,
    src: Source,
    lengths: Option<Arc<[usize]>>,
    queries: Option<Arc<[usize]>>,
    /// Keep the column path's probabilities too instead of forming them again (only the
    /// tests set it, to compare the two bit for bit).
    keep_cols_p: bool,
}

/// Shapes of one call, read from the inputs.
#[derive(Clone, Copy, Debug)]
struct Dims {
    /// Samples, positions (keys) per sample, query rows per sample.
    b: usize,
    n: usize,
    nq: usize,
    /// Model width, heads, width per head, `H·K`, feed-forward width.
    d: usize,
    heads: usize,
    kd: usize,
    hk: usize,
    f: usize,
}

/// Input positions: `x`, then the projection (6), the given `q, k, v` (3) or the attention
/// output `a` (1), then the tail (10).
fn tail_at(src: Source) -> usize {
    match src {
        Source::Project => 7,
        Source::Given => 4,
        Source::Attended => 2,
    }
}

fn err(message: String) -> KernelError {
    KernelError::new(NAME, message)
}

impl Config {
    fn dims<T: Real>(&self, inputs: &[&ArrayD<T>]) -> Result<Dims, KernelError> {
        let t = tail_at(self.src);
        if inputs.len() != t + 10 {
            return Err(err(format!("{} inputs, expected {}", inputs.len(), t + 10)));
        }
        let x = inputs[0].shape();
        let &[b, n, d] = x else {
            return Err(err(format!("x must be [B, N, d], got {x:?}")));
        };
        let wo = inputs[t].shape();
        let &[hk, dw] = wo else {
            return Err(err(format!("wo must be [H·K, d], got {wo:?}")));
        };
        if self.heads == 0 || !hk.is_multiple_of(self.heads) || dw != d {
            return Err(err(format!(
                "wo {wo:?} must be [H·K, {d}] with H·K divisible by heads = {}",
                self.heads
            )));
        }
        let f = inputs[t + 4].shape().get(1).copied().unwrap_or(0);
        let nq = if self.queries.is_some() { 1 } else { n };
        let want = |i: usize, name: &str, shape: &[usize]| {
            if inputs[i].shape() == shape {
                Ok(())
            } else {
                Err(err(format!(
                    "{name} must be {shape:?}, got {:?} (x {x:?}, wo {wo:?}, w1 {:?})",
                    inputs[i].shape(),
                    inputs[t + 4].shape()
                )))
            }
        };
        match self.src {
            Source::Given => {
                want(1, "q", &[b, nq, hk])?;
                want(2, "k", &[b, n, hk])?;
                want(3, "v", &[b, n, hk])?;
            }
            Source::Attended => want(1, "a", &[b, nq, hk])?,
            Source::Project => {
                for (i, name) in [(1, "wq"), (3, "wk"), (5, "wv")] {
                    want(i, name, &[d, hk])?;
                    want(i + 1, &format!("b{}", &name[1..]), &[hk])?;
                }
            }
        }
        want(t + 1, "bo", &[d])?;
        want(t + 2, "ln1_gain", &[d])?;
        want(t + 3, "ln1_bias", &[d])?;
        want(t + 4, "w1", &[d, f])?;
        want(t + 5, "b1", &[f])?;
        want(t + 6, "w2", &[f, d])?;
        want(t + 7, "b2", &[d])?;
        want(t + 8, "ln2_gain", &[d])?;
        want(t + 9, "ln2_bias", &[d])?;
        if let Some(l) = &self.lengths {
            if l.len() != b {
                return Err(err(format!(
                    "key_lengths has {} entries for B = {b}",
                    l.len()
                )));
            }
            if let Some((i, &len)) = l.iter().enumerate().find(|(_, &len)| len > n) {
                return Err(err(format!("key_lengths[{i}] = {len} exceeds N = {n}")));
            }
        }
        if let Some(p) = &self.queries {
            if p.len() != b {
                return Err(err(format!("queries has {} entries for B = {b}", p.len())));
            }
            if let Some((i, &at)) = p.iter().enumerate().find(|(_, &at)| at >= n) {
                return Err(err(format!("queries[{i}] = {at} is not below N = {n}")));
            }
        }
        if !self.scale.is_finite() || !self.eps.is_finite() || self.eps < 0.0 {
            return Err(err(format!(
                "scale {} and eps {} must be finite, eps ≥ 0",
                self.scale, self.eps
            )));
        }
        Ok(Dims {
            b,
            n,
            nq,
            d,
            heads: self.heads,
            kd: hk / self.heads,
            hk,
            f,
        })
    }

    /// Visible keys of sample `s`.
    fn keys(&self, dm: &Dims, s: usize) -> usize {
        self.lengths.as_ref().map_or(dm.n, |l| l[s])
    }

    /// The attention shape of sample `s`.
    fn shape(&self, dm: &Dims, s: usize) -> RowsShape {
        RowsShape {
            nq: dm.nq,
            nk: dm.n,
            keys: self.keys(dm, s),
            heads: dm.heads,
            dk: dm.kd,
            dv: dm.kd,
            scale: self.scale,
        }
    }

    /// Queries, keys and values are given (not projected here).
    fn given(&self) -> bool {
        self.src == Source::Given
    }

    /// Projections run inside the op.
    fn project(&self) -> bool {
        self.src == Source::Project
    }

    /// The attention probabilities of one sample, formed in scratch in the forward and again
    /// in the backward (none when the attention ran elsewhere).
    fn p_len(&self, dm: &Dims) -> usize {
        match self.src {
            Source::Attended => 0,
            _ => self.shape(dm, 0).p_len(),
        }
    }

    /// The attention probabilities kept per sample: those of a few query rows (the
    /// row-major path, e.g. one query per sample), which cost more to form again than to keep;
    /// none on the column path (formed again from [`Config::kept_len`]) or when the attention
    /// ran elsewhere.
    fn saved_p_len(&self, dm: &Dims) -> usize {
        match self.src {
            Source::Attended => 0,
            _ if self.shape(dm, 0).p_transposed() && !self.keep_cols_p => 0,
            _ => self.p_len(dm),
        }
    }

    /// The softmax's maxima and scales kept per sample for forming the probabilities again
    /// ([`rows::RowsShape::kept_len`]: on the column path only; none when the attention ran
    /// elsewhere).
    fn kept_len(&self, dm: &Dims) -> usize {
        match self.src {
            Source::Attended => 0,
            _ if self.keep_cols_p => 0,
            _ => self.shape(dm, 0).kept_len(),
        }
    }

    /// Samples per chunk.
    fn per_chunk(dm: &Dims) -> usize {
        (CHUNK_ROWS / dm.n.max(1)).max(1)
    }
}

efa_num::concrete! {
    /// [`forward::run`], compiled in this crate for each element type.
    fn forward_here<'a, 'b, 'c, 'd, T>(
        cfg: &'a Config,
        dm: &'b Dims,
        inputs: &'c [&'d ArrayD<T>],
    ) -> Result<(ArrayD<T>, Saved<T>), KernelError> = forward::run;
}

efa_num::concrete! {
    /// [`backward::run`], compiled in this crate for each element type.
    fn backward_here<'a, 'b, 'c, 'd, 'e, 'f, T>(
        cfg: &'a Config,
        dm: &'b Dims,
        inputs: &'c [&'d ArrayD<T>],
        s: &'e Saved<T>,
        dy: &'f ArrayD<T>,
    ) -> Result<Vec<Option<ArrayD<T>>>, KernelError> = backward::run;
}

/// One block as a kernel object: [`PostNormKernel::forward`] keeps what
/// [`PostNormKernel::backward`] needs (the saved state of the last forward).
#[derive(Clone, Debug)]
pub struct PostNormKernel<T> {
    cfg: Config,
    saved: Saved<T>,
}

impl<T: Real> PostNormKernel<T> {
    /// A kernel with `settings` and no saved state.
    pub fn new(settings: BlockSettings) -> Self {
        PostNormKernel {
            cfg: Config {
                heads: settings.heads,
                scale: settings.scale,
                eps: settings.eps,
                src: settings.source,
                lengths: settings.key_lengths.map(Arc::from),
                queries: settings.queries.map(Arc::from),
                keep_cols_p: settings.keep_cols_p,
            },
            saved: Saved::default(),
        }
    }

    /// The block's output `[B, N, d]` (or `[B, 1, d]` with query rows) for `inputs` (see
    /// [`BlockSettings`]); keeps the state the backward needs.
    ///
    /// # Errors
    /// Input count or shapes that do not fit the settings, naming the tensor and shapes.
    pub fn forward(&mut self, inputs: &[&ArrayD<T>]) -> Result<ArrayD<T>, KernelError> {
        let dm = self.cfg.dims(inputs)?;
        let (y, saved) = forward_here(&self.cfg, &dm, inputs)?;
        self.saved = saved;
        Ok(y)
    }

    /// Every input's gradient for the output cotangent `dy` (`None`: zero), after
    /// [`PostNormKernel::forward`] on the same inputs.
    ///
    /// # Errors
    /// As [`PostNormKernel::forward`].
    pub fn backward(
        &self,
        inputs: &[&ArrayD<T>],
        dy: Option<&ArrayD<T>>,
    ) -> Result<Vec<Option<ArrayD<T>>>, KernelError> {
        let dm = self.cfg.dims(inputs)?;
        let Some(dy) = dy else {
            return Ok(inputs
                .iter()
                .map(|x| Some(ArrayD::zeros(x.raw_dim())))
                .collect());
        };
        backward_here(&self.cfg, &dm, inputs, &self.saved, dy)
    }

    /// The bytes of the saved activations.
    pub fn saved_bytes(&self) -> usize {
        let n = self.saved.each_ref().map(|v| v.len()).total();
        n * std::mem::size_of::<T>()
    }

    /// The block's products: the projections (`2·B·N·d·2HK + 2·B·Nq·d·HK` in projection
    /// mode), attention (`2·H·Nq·len·2K` per sample, none with [`BlockSource::Attended`]), output projection
    /// (`2·B·Nq·HK·d`) and feed-forward (`2·2·B·Nq·d·F`); backward twice each (both operand
    /// gradients of every product; `dQ, dK, dV, dP` for attention). The backward's second
    /// score product (the column path's probabilities formed again, `2·H·Nq·len·K` per
    /// sample) is not
    /// counted: the op redoes it to save memory traffic, and counting it would raise the
    /// GFLOP/s figure without any more of the model's work done. Layer norms and element-wise
    /// work are not counted.
    pub fn flops(&self, inputs: &[&ArrayD<T>], backward: bool) -> u64 {
        let Ok(dm) = self.cfg.dims(inputs) else {
            return 0;
        };
        let g = crate::gemm_flops;
        let rq = dm.b * dm.nq;
        let proj = if self.cfg.project() {
            g(1, dm.b * dm.n, 2 * dm.hk, dm.d) + g(1, rq, dm.hk, dm.d)
        } else {
            0
        };
        let attn: u64 = match self.cfg.src {
            Source::Attended => 0,
            _ => (0..dm.b)
                .map(|s| self.cfg.shape(&dm, s).forward_flops())
                .sum(),
        };
        let tail = g(1, rq, dm.d, dm.hk) + 2 * g(1, rq, dm.f, dm.d);
        let fwd = proj + attn + tail;
        if backward {
            fwd.saturating_mul(2)
        } else {
            fwd
        }
    }
}

/// `rows × cols` taken from a padded row-major buffer (row stride `ld`) as an array of `shape`.
fn unpad<T: Real>(
    buf: &[T],
    ld: usize,
    rows: usize,
    cols: usize,
    c0: usize,
    shape: &[usize],
) -> ArrayD<T> {
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        out.extend_from_slice(&buf[r * ld + c0..r * ld + c0 + cols]);
    }
    ArrayD::from_shape_vec(IxDyn(shape), out).expect("block: sizes")
}
