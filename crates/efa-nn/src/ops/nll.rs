//! Exponential-family negative log-likelihoods (`efa-expfam`) as fused tape ops.
//!
//! Forward: `nllᵢ = A(ηᵢ) − ⟨t(yᵢ), ηᵢ⟩ − log h(yᵢ)` per row (each family in its own stable
//! form), output `[B]`; masked rows give 0. The per-row gradient `∂nllᵢ/∂ηᵢ = ∇A(ηᵢ) − t(yᵢ)`
//! is computed in the same pass and kept for backward, which scales it by the cotangent:
//! `dηᵢ = d_outᵢ · ∂nllᵢ/∂ηᵢ`. The ordinal cumulative-logit model also takes its cut-points
//! as an input: `d_c = Σᵢ d_outᵢ · ∂nllᵢ/∂c`.

use efa_expfam::batch::{nll_batch, ordinal_nll_batch};
use efa_expfam::Family;
use efa_num::Real;
use efa_tape::{FusedOp, Tape, TapeError, Var};
use ndarray::{Array2, ArrayD, Axis, Ix1, Ix2, IxDyn};

#[derive(Clone)]
struct NllOp<T: Real> {
    family: Family,
    y: Array2<T>,
    mask: Option<Vec<bool>>,
    /// ∂nllᵢ/∂ηᵢ from the forward pass, `[B, eta_dim]`.
    grad: Array2<T>,
}

fn err(family: &Family, e: impl std::fmt::Display) -> TapeError {
    TapeError::new(format!("fused:nll[{}]", family.name()), e.to_string())
}

fn eta2<'a, T: Real>(
    family: &Family,
    x: &'a ArrayD<T>,
) -> Result<ndarray::ArrayView2<'a, T>, TapeError> {
    x.view().into_dimensionality::<Ix2>().map_err(|_| {
        err(
            family,
            format!("η must be [B, {}], got {:?}", family.eta_dim(), x.shape()),
        )
    })
}

/// Per-row nll, per-row ∂nll/∂η, and the (weighted, summed) cut-point gradient.
type Evaluated<T> = (Vec<T>, Array2<T>, Vec<T>);

impl<T: Real> NllOp<T> {
    /// Per-row nll, per-row ∂/∂η and (ordinal) the cut-point gradient of Σᵢ wᵢ·nllᵢ.
    fn eval(
        &self,
        eta: &ArrayD<T>,
        cut: Option<&[T]>,
        w: Option<&[T]>,
    ) -> Result<Evaluated<T>, TapeError> {
        let f = &self.family;
        let eta = eta2(f, eta)?;
        let rows = eta.nrows();
        let mut nll = vec![T::ZERO; rows];
        let mut grad = Array2::zeros((rows, f.eta_dim()));
        let mut gcut = vec![T::ZERO; cut.map_or(0, <[T]>::len)];
        match cut {
            None => nll_batch(
                f,
                self.y.view(),
                eta,
                self.mask.as_deref(),
                &mut nll,
                grad.view_mut(),
            )
            .map_err(|e| err(f, e))?,
            Some(c) => match w {
                // One call gives Σᵢ ∂nllᵢ/∂c; a row-dependent weight needs one call per row.
                None => ordinal_nll_batch(
                    c,
                    self.y.view(),
                    eta,
                    self.mask.as_deref(),
                    &mut nll,
                    grad.view_mut(),
                    &mut gcut,
                )
                .map_err(|e| err(f, e))?,
                Some(w) => {
                    let mut gi = vec![T::ZERO; c.len()];
                    for (i, &wi) in w.iter().enumerate().take(rows) {
                        let r = i..i + 1;
                        let m = self.mask.as_ref().map(|m| &m[r.clone()]);
                        ordinal_nll_batch(
                            c,
                            self.y.slice(ndarray::s![r.clone(), ..]),
                            eta.slice(ndarray::s![r.clone(), ..]),
                            m,
                            &mut nll[r.clone()],
                            grad.slice_mut(ndarray::s![r, ..]),
                            &mut gi,
                        )
                        .map_err(|e| err(f, format!("row {i}: {e}")))?;
                        for (g, x) in gcut.iter_mut().zip(&gi) {
                            *g += wi * *x;
                        }
                    }
                }
            },
        }
        Ok((nll, grad, gcut))
    }
}

impl<T: Real> FusedOp<T> for NllOp<T> {
    fn name(&self) -> &str {
        self.family.name()
    }

    fn forward(&mut self, inputs: &[&ArrayD<T>]) -> Result<Vec<ArrayD<T>>, TapeError> {
        let cut = inputs
            .get(1)
            .map(|c| c.as_slice_memory_order().unwrap_or(&[]).to_vec());
        let (nll, grad, _) = self.eval(inputs[0], cut.as_deref(), None)?;
        self.grad = grad;
        let rows = nll.len();
        Ok(vec![
            ArrayD::from_shape_vec(IxDyn(&[rows]), nll).expect("one nll per row")
        ])
    }

    fn backward(
        &self,
        inputs: &[&ArrayD<T>],
        _outputs: &[&ArrayD<T>],
        d_outputs: &[Option<&ArrayD<T>>],
        needs_grad: &[bool],
    ) -> Result<Vec<Option<ArrayD<T>>>, TapeError> {
        let rows = self.grad.nrows();
        let d = match d_outputs[0] {
            Some(d) => d
                .view()
                .into_dimensionality::<Ix1>()
                .map_err(|_| err(&self.family, "cotangent must be [B]"))?
                .to_vec(),
            None => vec![T::ZERO; rows],
        };
        // forward computed nllᵢ(ηᵢ), so dηᵢ = d_outᵢ·∂nllᵢ/∂ηᵢ.
        let d_eta = &self.grad * &ndarray::ArrayView1::from(&d).insert_axis(Axis(1));
        let mut out = vec![Some(d_eta.into_dyn())];
        if inputs.len() > 1 {
            // forward computed nllᵢ(ηᵢ, c), so d_c = Σᵢ d_outᵢ·∂nllᵢ/∂c.
            let cut = inputs[1].iter().copied().collect::<Vec<T>>();
            let gcut = if needs_grad[1] {
                let (_, _, g) = self.eval(inputs[0], Some(&cut), Some(&d))?;
                Some(ArrayD::from_shape_vec(IxDyn(&[cut.len()]), g).expect("one per cut-point"))
            } else {
                None
            };
            out.push(gcut);
        }
        Ok(out)
    }

    fn saved_bytes(&self) -> usize {
        (self.y.len() + self.grad.len()) * T::BYTES
    }
}

/// Records [`TapeNn::nll`](crate::TapeNn::nll) (documented there).
pub(crate) fn nll<T: Real>(
    tape: &mut Tape<T>,
    family: &Family,
    eta: Var,
    y: &Array2<T>,
    mask: Option<&[bool]>,
) -> Result<Var, TapeError> {
    if matches!(family, Family::OrdinalLogit { .. }) {
        return Err(err(
            family,
            "the ordinal model needs its cut-points: use ordinal_nll",
        ));
    }
    let op = NllOp {
        family: *family,
        y: y.clone(),
        mask: mask.map(<[bool]>::to_vec),
        grad: Array2::zeros((0, 0)),
    };
    Ok(tape.fused(Box::new(op), &[eta])?[0])
}

/// Records [`TapeNn::ordinal_nll`](crate::TapeNn::ordinal_nll) (documented there).
pub(crate) fn ordinal_nll<T: Real>(
    tape: &mut Tape<T>,
    eta: Var,
    cutpoints: Var,
    y: &Array2<T>,
    mask: Option<&[bool]>,
) -> Result<Var, TapeError> {
    let k = tape.shape(cutpoints).iter().product::<usize>() + 1;
    let family = Family::OrdinalLogit { k };
    let op = NllOp {
        family,
        y: y.clone(),
        mask: mask.map(<[bool]>::to_vec),
        grad: Array2::zeros((0, 0)),
    };
    Ok(tape.fused(Box::new(op), &[eta, cutpoints])?[0])
}
