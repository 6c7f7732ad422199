//! Batched nll + gradient over rows (the entry points the model crate wraps as tape ops).
//!
//! Rows are independent: row i has observation `y[i, ..]` (length `obs_dim`) and natural
//! parameter `eta[i, ..]` (length `eta_dim`). A row whose mask entry is `false` is skipped: its
//! nll and gradient are exactly 0 and its inputs are not checked (padding may hold anything).
//! Batches of at least [`PAR_MIN_ROWS`] rows are split into fixed chunks processed in parallel
//! with rayon; results (including the ordinal cut-point gradient, reduced in chunk order) are
//! bitwise independent of the thread count. The first invalid row (lowest index) is reported.

use crate::common::c;
use crate::{
    bernoulli, beta, binomial, categorical, exponential, gamma, gaussian, gaussian_known,
    multinomial, negbin, ordinal, poisson, ExpfamError, Family,
};
use efa_num::Real;
use ndarray::{ArrayView2, ArrayViewMut2, Axis};
use rayon::prelude::*;

/// Batches with at least this many rows run in parallel over fixed chunks of 4096 rows.
pub const PAR_MIN_ROWS: usize = 8192;
/// Rows per parallel chunk (fixed, so the reduction order never depends on the thread count).
const CHUNK_ROWS: usize = 4096;

fn shape_err(family: &'static str, what: &'static str, expected: usize, got: usize) -> ExpfamError {
    ExpfamError::Shape {
        family,
        what,
        expected,
        got,
    }
}

/// Checks the inputs `(y, eta, mask)` and the outputs `(out_nll, out_grad)` of a batch
/// against its row count (`eta`'s) and its `(obs_dim, eta_dim)`; the error names the family
/// `name` and the first mismatch.
fn check_shapes<T: Real>(
    name: &'static str,
    (obs_dim, eta_dim): (usize, usize),
    (y, eta, mask): (&ArrayView2<T>, &ArrayView2<T>, Option<&[bool]>),
    (out_nll, out_grad): (&[T], &ArrayViewMut2<T>),
) -> Result<(), ExpfamError> {
    let rows = eta.nrows();
    let checks = [
        ("y rows", rows, y.nrows()),
        ("y columns (obs_dim)", obs_dim, y.ncols()),
        ("eta columns (eta_dim)", eta_dim, eta.ncols()),
        ("out_nll", rows, out_nll.len()),
        ("out_grad rows", rows, out_grad.nrows()),
        ("out_grad columns (eta_dim)", eta_dim, out_grad.ncols()),
        ("mask", rows, mask.map_or(rows, <[bool]>::len)),
    ];
    for (what, expected, got) in checks {
        if expected != got {
            return Err(shape_err(name, what, expected, got));
        }
    }
    Ok(())
}

/// Runs `f(first_row, nll_chunk, grad_chunk)` over the whole batch, or over fixed chunks in
/// parallel for large batches; returns the per-chunk results in row order (first error wins).
fn chunked<T, A, F>(
    out_nll: &mut [T],
    mut out_grad: ArrayViewMut2<T>,
    f: F,
) -> Result<Vec<A>, ExpfamError>
where
    T: Real,
    A: Send,
    F: Fn(usize, &mut [T], ArrayViewMut2<T>) -> Result<A, ExpfamError> + Sync,
{
    if out_nll.len() < PAR_MIN_ROWS {
        return Ok(vec![f(0, out_nll, out_grad)?]);
    }
    let pieces: Vec<_> = out_nll
        .chunks_mut(CHUNK_ROWS)
        .zip(out_grad.axis_chunks_iter_mut(Axis(0), CHUNK_ROWS))
        .enumerate()
        .map(|(i, (n, g))| (i * CHUNK_ROWS, n, g))
        .collect();
    let results: Vec<Result<A, ExpfamError>> = pieces
        .into_par_iter()
        .map(|(start, n, g)| f(start, n, g))
        .collect();
    results.into_iter().collect()
}

efa_num::concrete! {
    /// Batched negative log-likelihood and gradient for every family except the ordinal model
    /// (see [`ordinal_nll_batch`]):
    ///
    /// `out_nll[i] = nll(y[i], eta[i])` and `out_grad[i, ..] = ∂nll/∂η = ∇A(eta[i]) − t(y[i])`,
    /// with `y` rows × `obs_dim`, `eta` and `out_grad` rows × `eta_dim`, and `mask[i] == false`
    /// meaning "row i does not contribute" (nll and gradient exactly 0). Every unmasked row is
    /// support- and domain-checked; the error names the family, the value and the row.
    pub fn nll_batch<'a, 'b, 'c, 'd, 'e, 'f, T>(
        family: &'a Family,
        y: ArrayView2<'b, T>,
        eta: ArrayView2<'c, T>,
        mask: Option<&'d [bool]>,
        out_nll: &'e mut [T],
        out_grad: ArrayViewMut2<'f, T>,
    ) -> Result<(), ExpfamError> = nll_batch_kernel;
}

/// The kernel behind [`nll_batch`].
fn nll_batch_kernel<T: Real>(
    family: &Family,
    y: ArrayView2<T>,
    eta: ArrayView2<T>,
    mask: Option<&[bool]>,
    out_nll: &mut [T],
    out_grad: ArrayViewMut2<T>,
) -> Result<(), ExpfamError> {
    family.validate()?;
    if let Family::OrdinalLogit { .. } = family {
        return Err(ExpfamError::Unsupported {
            family: family.name(),
            what: "nll_batch without cut-points (use ordinal_nll_batch)",
        });
    }
    let (od, ed) = (family.obs_dim(), family.eta_dim());
    let (inputs, outputs) = ((&y, &eta, mask), (&*out_nll, &out_grad));
    check_shapes(family.name(), (od, ed), inputs, outputs)?;
    let b = Rows {
        family,
        y,
        eta,
        mask,
        od,
        ed,
    };
    // One monomorphic row loop per family, so per-family constants (e.g. ln s2) are hoisted.
    match *family {
        Family::GaussianKnownVar { s2 } => {
            let s2 = c::<T>(s2);
            b.run(out_nll, out_grad, move |y, e, g| {
                put(g, gaussian_known::nll_grad(s2, y[0], e[0]))
            })
        }
        Family::Gaussian => b.run(out_nll, out_grad, |y, e, g| gaussian::nll_grad(y[0], e, g)),
        Family::Bernoulli => b.run(out_nll, out_grad, |y, e, g| {
            put(g, bernoulli::nll_grad(y[0], e[0]))
        }),
        Family::Binomial { n } => {
            let n = c::<T>(n as f64);
            b.run(out_nll, out_grad, move |y, e, g| {
                put(g, binomial::nll_grad(n, y[0], e[0]))
            })
        }
        Family::Poisson => b.run(out_nll, out_grad, |y, e, g| {
            put(g, poisson::nll_grad(y[0], e[0]))
        }),
        Family::Categorical { .. } => b.run(out_nll, out_grad, |y, e, g| {
            categorical::nll_grad(y[0].to_f64() as usize, e, g)
        }),
        Family::Multinomial { n, .. } => {
            let n = c::<T>(n as f64);
            b.run(out_nll, out_grad, move |y, e, g| {
                multinomial::nll_grad(n, y, e, g)
            })
        }
        Family::Gamma => b.run(out_nll, out_grad, |y, e, g| gamma::nll_grad(y[0], e, g)),
        Family::Exponential => b.run(out_nll, out_grad, |y, e, g| {
            put(g, exponential::nll_grad(y[0], e[0]))
        }),
        Family::Beta => b.run(out_nll, out_grad, |y, e, g| beta::nll_grad(y[0], e, g)),
        Family::NegativeBinomial { r } => {
            let r = c::<T>(r);
            b.run(out_nll, out_grad, move |y, e, g| {
                put(g, negbin::nll_grad(r, y[0], e[0]))
            })
        }
        Family::OrdinalLogit { .. } => unreachable!("rejected above"),
    }
}

/// Writes a scalar family's gradient and returns its nll.
#[inline(always)]
fn put<T: Real>(g: &mut [T], (v, d): (T, T)) -> T {
    g[0] = d;
    v
}

/// The validated inputs of [`nll_batch`].
struct Rows<'f, 'y, 'e, T> {
    family: &'f Family,
    y: ArrayView2<'y, T>,
    eta: ArrayView2<'e, T>,
    mask: Option<&'f [bool]>,
    od: usize,
    ed: usize,
}

impl<T: Real> Rows<'_, '_, '_, T> {
    /// Checks each unmasked row and evaluates `f(y_row, eta_row, grad_row) -> nll`.
    fn run<F>(&self, out_nll: &mut [T], out_grad: ArrayViewMut2<T>, f: F) -> Result<(), ExpfamError>
    where
        F: Fn(&[T], &[T], &mut [T]) -> T + Sync,
    {
        let (od, ed, fam) = (self.od, self.ed, self.family);
        // Contiguous row-major inputs are read in place; anything else is copied row by row.
        let (ys, es) = (self.y.as_slice(), self.eta.as_slice());
        let eval =
            |row: usize, g: &mut [T], yb: &mut [T], eb: &mut [T]| -> Result<T, ExpfamError> {
                if self.mask.is_some_and(|m| !m[row]) {
                    g.fill(T::ZERO);
                    return Ok(T::ZERO);
                }
                let yr: &[T] = match ys {
                    Some(s) => &s[row * od..(row + 1) * od],
                    None => {
                        yb.iter_mut()
                            .zip(self.y.row(row))
                            .for_each(|(b, &v)| *b = v);
                        yb
                    }
                };
                let er: &[T] = match es {
                    Some(s) => &s[row * ed..(row + 1) * ed],
                    None => {
                        eb.iter_mut()
                            .zip(self.eta.row(row))
                            .for_each(|(b, &v)| *b = v);
                        eb
                    }
                };
                fam.check_obs_values(yr, row)?;
                fam.check_eta_values(er, row)?;
                Ok(f(yr, er, g))
            };
        chunked(out_nll, out_grad, |start, nll, mut grad| {
            let (mut yb, mut eb, mut gb) =
                (vec![T::ZERO; od], vec![T::ZERO; ed], vec![T::ZERO; ed]);
            if let Some(gs) = grad.as_slice_mut() {
                for (i, (n, g)) in nll.iter_mut().zip(gs.chunks_exact_mut(ed)).enumerate() {
                    *n = eval(start + i, g, &mut yb, &mut eb)?;
                }
            } else {
                for (i, (n, mut g)) in nll.iter_mut().zip(grad.rows_mut()).enumerate() {
                    *n = eval(start + i, &mut gb, &mut yb, &mut eb)?;
                    g.iter_mut().zip(&gb).for_each(|(o, &v)| *o = v);
                }
            }
            Ok(())
        })?;
        Ok(())
    }
}

/// Batched nll and gradients of the ordinal cumulative-logit model with shared cut-points
/// (K = `cutpoints.len() + 1` categories, P(Y ≤ k) = σ(c_k − η)):
///
/// `out_nll[i] = −ln P(Y = y[i] | eta[i])`, `out_grad_eta[i, 0] = ∂nll_i/∂η_i`, and
/// `out_grad_cut = Σ_i ∂nll_i/∂c` (overwritten, not accumulated). `y`, `eta` and
/// `out_grad_eta` are rows × 1; masked rows (`mask[i] == false`) contribute 0.
pub fn ordinal_nll_batch<T: Real>(
    cutpoints: &[T],
    y: ArrayView2<T>,
    eta: ArrayView2<T>,
    mask: Option<&[bool]>,
    out_nll: &mut [T],
    out_grad_eta: ArrayViewMut2<T>,
    out_grad_cut: &mut [T],
) -> Result<(), ExpfamError> {
    ordinal::check_cutpoints(cutpoints)?;
    let k = cutpoints.len() + 1;
    if out_grad_cut.len() != cutpoints.len() {
        return Err(shape_err(
            ordinal::NAME,
            "out_grad_cut",
            cutpoints.len(),
            out_grad_cut.len(),
        ));
    }
    let (inputs, outputs) = ((&y, &eta, mask), (&*out_nll, &out_grad_eta));
    check_shapes(ordinal::NAME, (1, 1), inputs, outputs)?;
    let partials = chunked(out_nll, out_grad_eta, |start, nll, mut grad| {
        let mut gc = vec![T::ZERO; k - 1];
        for (i, (n, mut g)) in nll.iter_mut().zip(grad.rows_mut()).enumerate() {
            let row = start + i;
            if mask.is_some_and(|m| !m[row]) {
                *n = T::ZERO;
                g[0] = T::ZERO;
                continue;
            }
            let cls = ordinal::check_obs(k, y[[row, 0]], row)?;
            let e = eta[[row, 0]];
            ordinal::check_eta(e, row)?;
            *n = ordinal::nll_grad(cutpoints, cls, e, &mut g[0], &mut gc);
        }
        Ok(gc)
    })?;
    out_grad_cut.iter_mut().for_each(|v| *v = T::ZERO);
    for part in partials {
        out_grad_cut
            .iter_mut()
            .zip(&part)
            .for_each(|(o, &v)| *o += v);
    }
    Ok(())
}
