//! `shared_context_attention`: multi-head attention for samples that share a context and
//! differ in one row each, computed once per context with leave-one-out sums.
//!
//! The temperature model's first block sees, per day, one sample per target city whose
//! input rows are the day's rows except the target's own (replaced by a [MASK] embedding).
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
//! Directly computed rows run the ordinary attention backward of their row.
//!
//! Groups run in parallel on rayon's pool; each group's task writes only its own base
//! gradient rows and its own samples' outputs and gradients, every sum in a fixed order, so
//! results are bitwise the same for any number of threads.

mod backward;
mod forward;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod timing;

use efa_num::Real;
use efa_tape::{FusedOp, Tape, TapeError, Var};
use ndarray::ArrayD;
use std::sync::Arc;

const NAME: &str = "fused:shared_context_attention";

/// Below this leave-one-out sum `Z⁻` (relative to the base row's maximum exponential, 1) a
/// pair is computed directly: the base exponentials of the other keys are then at most
/// `2⁻⁶⁰`, and further below they would lose relative precision to underflow.
pub const LOO_MIN: f64 = 8.673_617_379_884_035e-19; // 2⁻⁶⁰

/// One call of
/// [`TapeNn::shared_context_attention`](crate::TapeNn::shared_context_attention) (formulas in
/// the [module docs](self)).
#[derive(Clone, Debug)]
pub struct SharedContextAttention {
    /// Base queries `[G, N, H·K]`.
    pub q: Var,
    /// Base keys `[G, N, H·K]`.
    pub k: Var,
    /// Base values `[G, N, H·K]`.
    pub v: Var,
    /// Each sample's replaced query row `[B, H·K]`.
    pub q_t: Var,
    /// Each sample's replaced key row `[B, H·K]`.
    pub k_t: Var,
    /// Each sample's replaced value row `[B, H·K]`.
    pub v_t: Var,
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

/// The op's settings (the inputs come from the tape).
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

fn err(message: String) -> TapeError {
    TapeError::new(NAME, message)
}

impl Config {
    fn dims<T: Real>(&self, inputs: &[&ArrayD<T>]) -> Result<Dims, TapeError> {
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
    e: Vec<T>,
    /// Per `[B, N, H]`: `r` (base key `j` has probability `eⱼ·r`) and the replaced key's
    /// probability `p'` (unused for direct rows).
    r: Vec<T>,
    p: Vec<T>,
    /// Per `[B, N, H]`: 1 where the row was computed directly (the sample's own query row,
    /// or a leave-one-out sum below [`LOO_MIN`]).
    direct: Vec<u8>,
}

#[derive(Clone)]
struct SharedOp<T> {
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

/// An array in standard layout as a slice (copied only if it is not).
fn standard<T: Real>(a: &ArrayD<T>) -> std::borrow::Cow<'_, [T]> {
    match a.as_slice() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(a.iter().copied().collect()),
    }
}

impl<T: Real> FusedOp<T> for SharedOp<T> {
    fn name(&self) -> &str {
        "shared_context_attention"
    }

    fn forward(&mut self, inputs: &[&ArrayD<T>]) -> Result<Vec<ArrayD<T>>, TapeError> {
        let dm = self.cfg.dims(inputs)?;
        let (o, saved) = forward::run(&self.cfg, &dm, inputs);
        self.saved = saved;
        Ok(vec![o])
    }

    fn backward(
        &self,
        inputs: &[&ArrayD<T>],
        outputs: &[&ArrayD<T>],
        d_outputs: &[Option<&ArrayD<T>>],
        _needs_grad: &[bool],
    ) -> Result<Vec<Option<ArrayD<T>>>, TapeError> {
        let dm = self.cfg.dims(inputs)?;
        let Some(d_o) = d_outputs.first().copied().flatten() else {
            return Ok(inputs
                .iter()
                .map(|x| Some(ArrayD::zeros(x.raw_dim())))
                .collect());
        };
        let want = [dm.b, dm.n, dm.hk];
        let o = outputs.first().copied();
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
        Ok(backward::run(
            &self.cfg,
            &dm,
            inputs,
            o.expect("checked above"),
            d_o,
            &self.saved,
        ))
    }

    /// The base exponentials and the per-sample scales, probabilities and flags.
    fn saved_bytes(&self) -> usize {
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
    fn flops(&self, inputs: &[&ArrayD<T>], backward: bool) -> u64 {
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

/// Records
/// [`TapeNn::shared_context_attention`](crate::TapeNn::shared_context_attention) (documented
/// there).
pub(crate) fn shared_context_attention<T: Real>(
    tape: &mut Tape<T>,
    a: SharedContextAttention,
) -> Result<Var, TapeError> {
    let op = SharedOp::<T> {
        cfg: Config {
            heads: a.heads,
            scale: a.scale,
            group: Arc::from(a.group),
            target: Arc::from(a.target),
            lengths: Arc::from(a.lengths),
        },
        saved: Saved::default(),
    };
    Ok(tape.fused(Box::new(op), &[a.q, a.k, a.v, a.q_t, a.k_t, a.v_t])?[0])
}

// ------------------------------------------------------------------ row kernels

/// `Σᵢ aᵢ·bᵢ` with eight accumulators (lane `l` takes elements `l, l + 8, …`), summed in a
/// fixed tree, then the tail in order: the same bits on every instruction set.
#[inline(always)]
fn dot<T: Real>(a: &[T], b: &[T]) -> T {
    const L: usize = 8;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [T::ZERO; L];
    let (ca, cb) = (a.chunks_exact(L), b.chunks_exact(L));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        // Whole blocks of eight as arrays: one vector multiply and add per block.
        let (x, y): (&[T; L], &[T; L]) = (x.try_into().expect("8"), y.try_into().expect("8"));
        let mut p = [T::ZERO; L];
        for l in 0..L {
            p[l] = x[l] * y[l];
        }
        for l in 0..L {
            acc[l] += p[l];
        }
    }
    let mut tail = T::ZERO;
    for (&x, &y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7])) + tail
}

/// Rows `x(j)` (`K` wide) weighted by `w(j)`, `j < len`: `out[j] = Σ_{i≠j} w(i)·x(i)` for every
/// `j` (`out` `[len, K]`), from the suffix sums (stored first) and the prefix sums (added in
/// front), each a running sum in `j` order; `out[j] = pre + suf`, never a difference. The
/// running sums stay in registers eight columns at a time.
#[inline(always)]
fn loo_rows<'a, T: Real + 'a>(
    len: usize,
    kd: usize,
    w: impl Fn(usize) -> T,
    x: impl Fn(usize) -> &'a [T],
    out: &mut [T],
) {
    let mut c = 0;
    while c + L <= kd {
        let mut acc = [T::ZERO; L];
        for j in (0..len).rev() {
            let o: &mut [T; L] = (&mut out[j * kd + c..j * kd + c + L])
                .try_into()
                .expect("L");
            *o = acc;
            let (wj, xj): (T, &[T; L]) = (w(j), x(j)[c..c + L].try_into().expect("L"));
            for l in 0..L {
                acc[l] += wj * xj[l];
            }
        }
        acc = [T::ZERO; L];
        for j in 0..len {
            let o: &mut [T; L] = (&mut out[j * kd + c..j * kd + c + L])
                .try_into()
                .expect("L");
            for l in 0..L {
                o[l] = acc[l] + o[l];
            }
            let (wj, xj): (T, &[T; L]) = (w(j), x(j)[c..c + L].try_into().expect("L"));
            for l in 0..L {
                acc[l] += wj * xj[l];
            }
        }
        c += L;
    }
    // Columns past the last whole block, one at a time.
    for c in c..kd {
        let mut a = T::ZERO;
        for j in (0..len).rev() {
            out[j * kd + c] = a;
            a += w(j) * x(j)[c];
        }
        a = T::ZERO;
        for j in 0..len {
            out[j * kd + c] = a + out[j * kd + c];
            a += w(j) * x(j)[c];
        }
    }
}

/// Columns per register block of [`loo_rows`] and [`add_rows`].
const L: usize = 8;

/// `out ← out + Σ_j w(j)·x(j)` over `j < len` in `j` order (per element the same sums as
/// `axpy` row by row), the running sums in registers eight columns at a time.
#[inline(always)]
fn add_rows<'a, T: Real + 'a>(
    len: usize,
    w: impl Fn(usize) -> T,
    x: impl Fn(usize) -> &'a [T],
    out: &mut [T],
) {
    let whole = out.len() / L * L;
    let (blocks, rest) = out.split_at_mut(whole);
    for (b, o) in blocks.chunks_exact_mut(L).enumerate() {
        let o: &mut [T; L] = o.try_into().expect("L");
        let mut acc = *o;
        for j in 0..len {
            let (wj, xj): (T, &[T; L]) = (w(j), x(j)[b * L..b * L + L].try_into().expect("L"));
            for l in 0..L {
                acc[l] += wj * xj[l];
            }
        }
        *o = acc;
    }
    for (c, o) in rest.iter_mut().enumerate() {
        for j in 0..len {
            *o += w(j) * x(j)[whole + c];
        }
    }
}

/// `y ← y + α·x`.
#[inline(always)]
fn axpy<T: Real>(alpha: T, x: &[T], y: &mut [T]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y += alpha * x;
    }
}

/// The softmax row of query `q` (one head, `K = q.len()`) over `len` keys: the base keys
/// transposed in `ktr` (`[K, n]`, key `j` in column `j`) with key `tg` replaced by `kt`;
/// `p[j]` for `j < len` (scores along the keys, their maximum, `exp`, then `1/Σ` in order).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn direct_probs<T: Real>(
    isa: efa_num::simd::Isa,
    q: &[T],
    ktr: &[T],
    n: usize,
    len: usize,
    (tg, kt): (usize, &[T]),
    scale: T,
    p: &mut [T],
) {
    let p = &mut p[..len];
    p.fill(T::ZERO);
    for (c, &qc) in q.iter().enumerate() {
        axpy(qc, &ktr[c * n..c * n + len], p);
    }
    if let Some(x) = p.get_mut(tg) {
        *x = dot(q, kt);
    }
    let mut m = T::NEG_INFINITY;
    for x in p.iter_mut() {
        *x *= scale;
        if *x > m {
            m = *x;
        }
    }
    for x in p.iter_mut() {
        *x -= m;
    }
    efa_num::simd::exp_slice_with(isa, p);
    let mut z = T::ZERO;
    for &x in p.iter() {
        z += x;
    }
    let inv = T::ONE / z;
    for x in p.iter_mut() {
        *x *= inv;
    }
}

/// Columns `[c0, c0 + K)` of the first `len` rows of `x` (row stride `hk`), transposed into
/// `out` `[K, n]` (row `j` of `x` in column `j`).
#[inline(always)]
fn transpose_head<T: Real>(
    x: &[T],
    (hk, c0, kd): (usize, usize, usize),
    len: usize,
    n: usize,
    out: &mut [T],
) {
    for j in 0..len {
        for (c, &v) in x[j * hk + c0..j * hk + c0 + kd].iter().enumerate() {
            out[c * n + j] = v;
        }
    }
}
