//! Multi-head attention for samples that share a context and differ in one row each, computed
//! once per context with leave-one-out sums ([`SharedKernel`], recorded on the tape by
//! `efa-nn`'s `shared_context_attention`).
//!
//! The temperature model's first block sees, per day, one sample per target city whose
//! input rows are the day's rows except the target's own (replaced by a \[MASK\] embedding).
//! So its queries, keys and values are a per-group base `q, k, v` `[G, N, H·K]` plus, per
//! sample `s`, a replaced row `q_t[s], k_t[s], v_t[s]` `[H·K]` at its target position
//! `t = target[s]` in group `g = group[s]` (head `h` owns columns `[h·K, (h+1)·K)`). With the
//! sample's rows `Qᵢ = q_t[s]` if `i = t` else `q[g, i]` (likewise `Kⱼ`, `Vⱼ`) and the first
//! `len = lengths[g]` keys visible, every row `i < N` (rows `≥ len` too) is a query:
//!
//! ```text
//! o[s, i, h] = Σ_{j<len} softmax_j(scale·⟨Qᵢₕ, Kⱼₕ⟩)·Vⱼₕ
//! ```
//!
//! Per group, head and base query row `qᵢ` the op forms the base scores `sⱼ`, their maximum
//! `m` and `eⱼ = exp(sⱼ − m)` once, and the leave-one-out sums `Z⁻[t] = Σ_{j≠t} eⱼ`,
//! `A⁻[t] = Σ_{j≠t} eⱼ vⱼ` from prefix and suffix sums (no subtraction). A sample whose
//! target `t ≠ i` then needs only its replaced key's score `s'`: with `s' ≤ m`,
//! `Z = Z⁻[t] + exp(s' − m)`; with `s' > m`, `c = exp(m − s')` and `Z = Z⁻[t]·c + 1`; in both
//! cases `o = r·A⁻[t] + p'·v_t[s]` with `r = exp(m − max)/Z` (so base key `j` has probability
//! `eⱼ·r`) and `p'` the replaced key's probability. That is `O(N²·H·K)` per group plus
//! `O(N·H·K)` per sample instead of `O(N²·H·K)` per sample. A sample's own query row
//! (`i = t`), any pair whose `Z⁻[t]` is below [`LOO_MIN`] (the base maximum sits at the
//! target and the other keys' exponentials are so small relative to it that their sum would
//! lose precision further down, and `1/Z` overflow in f32 below 2⁻¹²⁸), and any pair whose
//! replaced key's score is not finite, is computed directly, as an ordinary softmax row over
//! the sample's keys, in forward and backward. In the backward a base key that no
//! leave-one-out pair of a row sees (every such pair targets it) adds nothing to that row.
//!
//! Backward, per group, head and row `i`: the samples' cotangents `dOₛ` with
//! `Dₛ = ⟨dOₛ, oₛ⟩` are gathered per target as `R[t] = Σ rₛ·dOₛ`, `Δ[t] = Σ rₛ·Dₛ`, whose
//! leave-one-out sums `R⁻[j]`, `Δ⁻[j]` give every base key's share at once:
//! `dv[g, j] += eⱼ·R⁻[j]`, `dSⱼ = eⱼ·(⟨R⁻[j], vⱼ⟩ − Δ⁻[j])`, `dk[g, j] += scale·dSⱼ·qᵢ`,
//! `dq[g, i] += scale·Σⱼ dSⱼ·kⱼ`; the replaced key adds `dv_t[s] += p'·dOₛ` and, with
//! `dS' = p'·(⟨dOₛ, v_t[s]⟩ − Dₛ)`, `dk_t[s] += scale·dS'·qᵢ`, `dq[g, i] += scale·dS'·k_t[s]`.
//! Directly computed rows run the ordinary attention backward of their row. The sums run
//! over the keys and values less their means, and a row's leave-one-out pairs over its
//! values less its dominant key's value (the same exact sums; their round-off then scales
//! with what the sums keep, not with what cancels: see `backward.rs`).
//!
//! Groups run in parallel on rayon's pool; each group's task writes only its own base
//! gradient rows and its own samples' outputs and gradients, every sum in a fixed order, so
//! results are bitwise the same for any number of threads.

mod backward;
mod forward;
mod rows;

use crate::KernelError;
use efa_num::pool::Buf;
use efa_num::Real;
use ndarray::ArrayD;
use std::sync::Arc;

const NAME: &str = "fused:shared_context_attention";

/// Below this leave-one-out sum `Z⁻` (relative to the base row's maximum exponential, 1) a
/// pair is computed directly: the base exponentials of the other keys are then at most
/// `2⁻⁶⁰`, and further below they would lose relative precision to underflow.
pub const LOO_MIN: f64 = 8.673_617_379_884_035e-19; // 2⁻⁶⁰

/// The settings of one call (its inputs are arrays: base `q, k, v` `[G, N, H·K]`, then each
/// sample's replaced rows `q_t, k_t, v_t` `[B, H·K]`).
#[derive(Clone, Debug)]
pub struct SharedSettings {
    /// Heads `H` (`H·K` must divide by it).
    pub heads: usize,
    /// Score scale (`1/√K` for Keras).
    pub scale: f64,
    /// Each sample's group (`B` entries, each below `G`).
    pub group: Vec<usize>,
    /// Each sample's target position (`B` entries, each below its group's length).
    pub target: Vec<usize>,
    /// Visible keys per group (`G` entries, each at most `N`): keys `j < lengths[g]`.
    pub lengths: Vec<usize>,
}

/// The kernel's settings (the inputs come with each call).
#[derive(Clone, Debug)]
struct Config {
    heads: usize,
    scale: f64,
    group: Arc<[usize]>,
    target: Arc<[usize]>,
    lengths: Arc<[usize]>,
}

/// Shapes of one call, read from the inputs.
#[derive(Clone, Copy, Debug)]
struct Dims {
    /// Groups, positions per group, samples.
    g: usize,
    n: usize,
    b: usize,
    /// Heads, width per head, `H·K`.
    heads: usize,
    kd: usize,
    hk: usize,
}

fn err(message: String) -> KernelError {
    KernelError::new(NAME, message)
}

impl Config {
    fn dims<T: Real>(&self, inputs: &[&ArrayD<T>]) -> Result<Dims, KernelError> {
        if inputs.len() != 6 {
            return Err(err(format!("{} inputs, expected 6", inputs.len())));
        }
        let q = inputs[0].shape();
        let &[g, n, hk] = q else {
            return Err(err(format!("q must be [G, N, H·K], got {q:?}")));
        };
        let qt = inputs[3].shape();
        let &[b, _] = qt else {
            return Err(err(format!("q_t must be [B, H·K], got {qt:?}")));
        };
        let want = |i: usize, name: &str, shape: &[usize]| {
            if inputs[i].shape() == shape {
                Ok(())
            } else {
                Err(err(format!(
                    "{name} must be {shape:?}, got {:?} (q {q:?}, q_t {qt:?})",
                    inputs[i].shape()
                )))
            }
        };
        want(1, "k", &[g, n, hk])?;
        want(2, "v", &[g, n, hk])?;
        want(3, "q_t", &[b, hk])?;
        want(4, "k_t", &[b, hk])?;
        want(5, "v_t", &[b, hk])?;
        if self.heads == 0 || !hk.is_multiple_of(self.heads) {
            return Err(err(format!(
                "width H·K = {hk} of q {q:?} must be divisible by heads = {}",
                self.heads
            )));
        }
        for (name, len, want) in [
            ("group", self.group.len(), b),
            ("target", self.target.len(), b),
            ("lengths", self.lengths.len(), g),
        ] {
            if len != want {
                let of = if name == "lengths" { "G" } else { "B" };
                return Err(err(format!(
                    "{name} has {len} entries for {of} = {want} (q {q:?}, q_t {qt:?})"
                )));
            }
        }
        if let Some((i, &len)) = self.lengths.iter().enumerate().find(|(_, &l)| l > n) {
            return Err(err(format!("lengths[{i}] = {len} exceeds N = {n}")));
        }
        for (s, (&gs, &t)) in self.group.iter().zip(self.target.iter()).enumerate() {
            if gs >= g {
                return Err(err(format!("group[{s}] = {gs} is not below G = {g}")));
            }
            if t >= self.lengths[gs] {
                return Err(err(format!(
                    "target[{s}] = {t} is not below lengths[{gs}] = {} (its group's visible keys)",
                    self.lengths[gs]
                )));
            }
        }
        if !self.scale.is_finite() {
            return Err(err(format!("scale {} must be finite", self.scale)));
        }
        Ok(Dims {
            g,
            n,
            b,
            heads: self.heads,
            kd: hk / self.heads,
            hk,
        })
    }

    /// Each group's samples, in increasing order.
    fn members(&self, groups: usize) -> Vec<Vec<usize>> {
        let mut m = vec![Vec::new(); groups];
        for (s, &g) in self.group.iter().enumerate() {
            m[g].push(s);
        }
        m
    }
}

/// What the forward keeps for the backward.
#[derive(Clone, Debug, Default)]
struct Saved<T> {
    /// Base exponentials `eⱼ = exp(sⱼ − m)` `[G, H, N (rows), N (keys)]` (keys `j < len`).
    e: Buf<T>,
    /// Per `[B, N, H]`: `r` (base key `j` has probability `eⱼ·r`) and the replaced key's
    /// probability `p'` (unused for direct rows).
    r: Buf<T>,
    p: Buf<T>,
    /// Per `[B, N, H]`: 1 where the row was computed directly (the sample's own query row,
    /// or a leave-one-out sum below [`LOO_MIN`]).
    direct: Buf<u8>,
}

efa_num::concrete! {
    /// [`forward::run`], compiled in this crate for each element type.
    fn forward_here<'a, 'b, 'c, 'd, T>(
        cfg: &'a Config,
        dm: &'b Dims,
        inputs: &'c [&'d ArrayD<T>],
    ) -> (ArrayD<T>, Saved<T>) = forward::run;
}

efa_num::concrete! {
    /// [`backward::run`], compiled in this crate for each element type.
    fn backward_here<'a, 'b, 'c, 'd, 'e, 'f, T>(
        cfg: &'a Config,
        dm: &'b Dims,
        inputs: &'c [&'d ArrayD<T>],
        d_o: &'e ArrayD<T>,
        saved: &'f Saved<T>,
    ) -> Vec<Option<ArrayD<T>>> = backward::run;
}

/// Shared-context attention as a kernel object: [`SharedKernel::forward`] keeps what
/// [`SharedKernel::backward`] needs (the saved state of the last forward).
#[derive(Clone, Debug)]
pub struct SharedKernel<T> {
    cfg: Config,
    saved: Saved<T>,
}

/// `buf` cut into `count` pieces of `each` elements (empty pieces when `each = 0`).
fn pieces<U>(buf: &mut [U], each: usize, count: usize) -> Vec<&mut [U]> {
    if each == 0 {
        return (0..count).map(|_| <&mut [U]>::default()).collect();
    }
    debug_assert_eq!(buf.len(), each * count);
    buf.chunks_mut(each).collect()
}

/// `buf` cut into one piece of `each` elements per sample, handed to the sample's group (in
/// increasing sample order within each group).
fn by_group<'a, U>(
    buf: &'a mut [U],
    each: usize,
    group: &[usize],
    groups: usize,
) -> Vec<Vec<&'a mut [U]>> {
    let mut out: Vec<Vec<&mut [U]>> = (0..groups).map(|_| Vec::new()).collect();
    for (row, &g) in pieces(buf, each, group.len()).into_iter().zip(group) {
        out[g].push(row);
    }
    out
}

/// What both passes read: settings, shapes, the instruction set and the inputs as row-major
/// slices (`q, k, v` `[G, N, H·K]`, `q_t, k_t, v_t` `[B, H·K]`).
struct Inputs<'a, T> {
    cfg: &'a Config,
    dm: Dims,
    isa: efa_num::simd::Isa,
    scale: T,
    q: &'a [T],
    k: &'a [T],
    v: &'a [T],
    qt: &'a [T],
    kt: &'a [T],
    vt: &'a [T],
}

impl<'a, T: Real> Inputs<'a, T> {
    /// `x`: the six inputs in the op's order, as slices.
    fn new(cfg: &'a Config, dm: &Dims, x: &'a [std::borrow::Cow<'a, [T]>]) -> Self {
        Inputs {
            cfg,
            dm: *dm,
            isa: efa_num::simd::active(),
            scale: T::from_f64(cfg.scale),
            q: &x[0],
            k: &x[1],
            v: &x[2],
            qt: &x[3],
            kt: &x[4],
            vt: &x[5],
        }
    }

    /// Group `g`'s base `q, k, v` rows `[N, H·K]`.
    fn base(&self, g: usize) -> [&'a [T]; 3] {
        let len = self.dm.n * self.dm.hk;
        [self.q, self.k, self.v].map(|x| &x[g * len..(g + 1) * len])
    }
}

/// An array in standard layout as a slice (copied only if it is not).
fn standard<T: Real>(a: &ArrayD<T>) -> std::borrow::Cow<'_, [T]> {
    match a.as_slice() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(a.iter().copied().collect()),
    }
}

impl<T: Real> SharedKernel<T> {
    /// A kernel with `settings` and no saved state.
    pub fn new(settings: SharedSettings) -> Self {
        SharedKernel {
            cfg: Config {
                heads: settings.heads,
                scale: settings.scale,
                group: Arc::from(settings.group),
                target: Arc::from(settings.target),
                lengths: Arc::from(settings.lengths),
            },
            saved: Saved::default(),
        }
    }

    /// The output `o` `[B, N, H·K]` for `inputs` (see [`SharedSettings`]); keeps the state the
    /// backward needs.
    ///
    /// # Errors
    /// Input count, shapes or settings that do not fit, naming the tensor or setting.
    pub fn forward(&mut self, inputs: &[&ArrayD<T>]) -> Result<ArrayD<T>, KernelError> {
        let dm = self.cfg.dims(inputs)?;
        let (o, saved) = forward_here(&self.cfg, &dm, inputs);
        self.saved = saved;
        Ok(o)
    }

    /// Every input's gradient for the cotangent `d_o` of the output `o` (`None`: zero), after
    /// [`SharedKernel::forward`] on the same inputs.
    ///
    /// # Errors
    /// As [`SharedKernel::forward`]; an output or cotangent of another shape; no forward yet.
    pub fn backward(
        &self,
        inputs: &[&ArrayD<T>],
        o: Option<&ArrayD<T>>,
        d_o: Option<&ArrayD<T>>,
    ) -> Result<Vec<Option<ArrayD<T>>>, KernelError> {
        let dm = self.cfg.dims(inputs)?;
        let Some(d_o) = d_o else {
            return Ok(inputs
                .iter()
                .map(|x| Some(ArrayD::zeros(x.raw_dim())))
                .collect());
        };
        let want = [dm.b, dm.n, dm.hk];
        if d_o.shape() != want || o.is_none_or(|o| o.shape() != want) {
            return Err(err(format!(
                "output and its cotangent must be {want:?}, got {:?} and {:?}",
                o.map(|o| o.shape()),
                d_o.shape()
            )));
        }
        let expect = dm.g * dm.heads * dm.n * dm.n;
        if self.saved.e.len() != expect || self.saved.r.len() != dm.b * dm.n * dm.heads {
            return Err(err("backward before forward (no saved state)".to_string()));
        }
        Ok(backward_here(&self.cfg, &dm, inputs, d_o, &self.saved))
    }

    /// Whether the last forward computed row `i`, head `h` of sample `s` directly, as an
    /// ordinary softmax row, instead of from the leave-one-out sums (the sample's own query
    /// row, or a leave-one-out sum below [`LOO_MIN`]); `None` before a forward or out of range.
    pub fn computed_directly(&self, s: usize, i: usize, h: usize) -> Option<bool> {
        let (b, heads) = (self.cfg.group.len(), self.cfg.heads);
        let n = self.saved.direct.len().checked_div(b * heads)?;
        if s >= b || i >= n || h >= heads {
            return None;
        }
        Some(self.saved.direct[(s * n + i) * heads + h] != 0)
    }

    /// The bytes of the saved state: the base exponentials and the per-sample scales,
    /// probabilities and flags.
    pub fn saved_bytes(&self) -> usize {
        let s = &self.saved;
        (s.e.len() + s.r.len() + s.p.len()) * std::mem::size_of::<T>() + s.direct.len()
    }

    /// Operations as performed, a multiply-add counting 2: per group, head and row the base
    /// scores (`len·K`) and the leave-one-out sums (`2·len·K`); per pair the replaced key's
    /// score and the output (`3·K`), or for a direct row its scores and output (`2·len·K`).
    /// Backward: per row with leave-one-out pairs the gathered cotangents (`2·K` per pair),
    /// their leave-one-out sums (`2·len·K` additions) and the base keys' four products
    /// (`4·len·K`), per pair the replaced key's four (`4·K`); per direct row `5·len·K + K`.
    /// Exponentials are not counted. Direct rows are counted from the last forward's flags
    /// (own query rows only before a forward).
    pub fn flops(&self, inputs: &[&ArrayD<T>], backward: bool) -> u64 {
        let Ok(dm) = self.cfg.dims(inputs) else {
            return 0;
        };
        let (n, kd, h) = (dm.n as u64, dm.kd as u64, dm.heads as u64);
        let (nh, members) = (dm.n * dm.heads, self.cfg.members(dm.g));
        let flags = (self.saved.direct.len() == dm.b * nh).then_some(&self.saved.direct);
        let mut total = 0u64;
        for (g, ms) in members.iter().enumerate() {
            let len = self.cfg.lengths[g] as u64;
            // Pairs computed directly, and rows (i, h) with at least one leave-one-out pair.
            let (mut direct, mut rows) = (0u64, 0u64);
            for ih in 0..nh {
                let d = match flags {
                    Some(f) => ms.iter().filter(|&&s| f[s * nh + ih] != 0).count(),
                    None => ms
                        .iter()
                        .filter(|&&s| self.cfg.target[s] == ih / dm.heads)
                        .count(),
                };
                direct += d as u64;
                rows += u64::from(d < ms.len());
            }
            let loo = ms.len() as u64 * n * h - direct;
            total += if backward {
                2 * (6 * loo * kd + rows * 4 * len * kd + direct * (5 * len * kd + kd))
                    + rows * 2 * len * kd
            } else {
                2 * (n * h * 3 * len * kd + loo * 3 * kd + direct * 2 * len * kd)
            };
        }
        total
    }
}
