//! Batched log-partition and its derivatives over rows of natural parameters.
//!
//! Row i of `eta` (rows × `eta_dim`) is one natural parameter; the results are
//! A(ηᵢ) (`Array1`, rows), ∇A(ηᵢ) (`Array2`, rows × d) and ∇²A(ηᵢ) (`Array3`, rows × d × d),
//! each row computed by the same per-row routine as [`Family::log_partition`],
//! [`Family::mean`] and [`Family::hessian`] (so results equal the scalar calls bit for bit).
//! Every row is domain-checked and an error names the family, the value and the row (the
//! lowest invalid row when there are several). Batches of at least [`PAR_MIN_ROWS`] rows run
//! in parallel over fixed chunks with rayon. Not defined for the ordinal model (no A).

use crate::{ExpfamError, Family, PAR_MIN_ROWS};
use efa_num::Real;
use ndarray::{Array1, Array2, Array3, ArrayView2};
use rayon::prelude::*;

/// Rows per parallel chunk.
const CHUNK_ROWS: usize = 4096;

/// Checks the family and the shape of `eta`, then fills `out` (rows × `width`, row-major) with
/// `f(eta_row, out_row)` for every row, after the row's domain check.
fn map_rows<T, F>(
    family: &Family,
    eta: &ArrayView2<T>,
    width: usize,
    what: &'static str,
    f: F,
) -> Result<Array2<T>, ExpfamError>
where
    T: Real,
    F: Fn(&[T], &mut [T]) + Sync,
{
    family.validate()?;
    if let Family::OrdinalLogit { .. } = family {
        return Err(ExpfamError::Unsupported {
            family: family.name(),
            what,
        });
    }
    let d = family.eta_dim();
    if eta.ncols() != d {
        return Err(ExpfamError::Shape {
            family: family.name(),
            what: "eta columns (eta_dim)",
            expected: d,
            got: eta.ncols(),
        });
    }
    let rows = eta.nrows();
    let mut out = Array2::zeros((rows, width));
    if width == 0 || rows == 0 {
        return Ok(out);
    }
    // Contiguous row-major η is read in place; any other layout is copied row by row.
    let es = eta.as_slice();
    let run = |start: usize, chunk: &mut [T]| -> Result<(), ExpfamError> {
        let mut buf = vec![T::ZERO; d];
        for (i, o) in chunk.chunks_exact_mut(width).enumerate() {
            let row = start + i;
            let er: &[T] = match es {
                Some(s) => &s[row * d..(row + 1) * d],
                None => {
                    buf.iter_mut().zip(eta.row(row)).for_each(|(b, &v)| *b = v);
                    &buf
                }
            };
            family.check_eta_values(er, row)?;
            f(er, o);
        }
        Ok(())
    };
    let flat = out.as_slice_mut().expect("fresh arrays are row-major");
    if rows < PAR_MIN_ROWS {
        run(0, flat)?;
    } else {
        let results: Vec<Result<(), ExpfamError>> = flat
            .par_chunks_mut(CHUNK_ROWS * width)
            .enumerate()
            .map(|(c, chunk)| run(c * CHUNK_ROWS, chunk))
            .collect();
        // Chunks are in row order, so the first error is the lowest invalid row.
        results.into_iter().collect::<Result<Vec<()>, _>>()?;
    }
    Ok(out)
}

/// Batched log-partition: `out[i] = A(eta[i, ..])` for `eta` rows × `eta_dim`.
///
/// ```
/// use efa_expfam::{log_partition_batch, Family};
/// use ndarray::array;
/// // Poisson: A(η) = e^η.
/// let a = log_partition_batch(&Family::Poisson, array![[0.0], [1.0]].view()).unwrap();
/// assert_eq!(a, array![1.0, 1f64.exp()]);
/// // Row 1 has η = NaN: the error names it.
/// let err = log_partition_batch(&Family::Poisson, array![[0.0], [f64::NAN]].view());
/// assert!(err.unwrap_err().to_string().contains("row 1"));
/// ```
pub fn log_partition_batch<T: Real>(
    family: &Family,
    eta: ArrayView2<T>,
) -> Result<Array1<T>, ExpfamError> {
    let out = map_rows(family, &eta, 1, "A(eta)", |e, o| {
        o[0] = family.log_partition_checked(e)
    })?;
    Ok(out.remove_axis(ndarray::Axis(1)))
}

/// Batched mean: `out[i, ..] = ∇A(eta[i, ..]) = E t(y)` (rows × `eta_dim`).
pub fn mean_batch<T: Real>(family: &Family, eta: ArrayView2<T>) -> Result<Array2<T>, ExpfamError> {
    map_rows(family, &eta, family.eta_dim(), "grad A(eta)", |e, o| {
        family.mean_checked(e, o)
    })
}

/// Batched Hessian: `out[i, .., ..] = ∇²A(eta[i, ..])` (rows × `eta_dim` × `eta_dim`, the
/// covariance of t(y) under row i).
pub fn hessian_batch<T: Real>(
    family: &Family,
    eta: ArrayView2<T>,
) -> Result<Array3<T>, ExpfamError> {
    let d = family.eta_dim();
    let rows = eta.nrows();
    let flat = map_rows(family, &eta, d * d, "hessian of A(eta)", |e, o| {
        family.hessian_checked(e, o)
    })?;
    Ok(flat
        .into_shape_with_order((rows, d, d))
        .expect("rows × d² row-major reshapes to rows × d × d"))
}
