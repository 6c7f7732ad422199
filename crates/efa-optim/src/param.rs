//! Parameters addressed by name, as the optimizers take them.

use crate::OptimError;
use efa_num::Real;
use ndarray::ArrayD;

/// One named parameter tensor with its gradient, as a flat row-major slice plus its shape.
#[derive(Debug)]
pub struct Param<'a, T> {
    /// Name (unique within one step call).
    pub name: &'a str,
    /// Logical shape; its product must equal `value.len()`.
    pub shape: Vec<usize>,
    /// The values, updated in place.
    pub value: &'a mut [T],
    /// The gradient, same length; `None` is an error at step time (never silently skipped).
    pub grad: Option<&'a [T]>,
}

impl<'a, T: Real> Param<'a, T> {
    /// A 1-D parameter of shape `[value.len()]`.
    pub fn new(name: &'a str, value: &'a mut [T], grad: Option<&'a [T]>) -> Self {
        let shape = vec![value.len()];
        Param {
            name,
            shape,
            value,
            grad,
        }
    }

    /// A parameter with an explicit shape (checked at step time).
    pub fn with_shape(
        name: &'a str,
        shape: &[usize],
        value: &'a mut [T],
        grad: Option<&'a [T]>,
    ) -> Self {
        Param {
            name,
            shape: shape.to_vec(),
            value,
            grad,
        }
    }

    /// Views an ndarray value and gradient. Both must be contiguous (any memory order; the
    /// update is elementwise, so only matching layouts matter, which is checked).
    pub fn from_array(
        name: &'a str,
        value: &'a mut ArrayD<T>,
        grad: Option<&'a ArrayD<T>>,
    ) -> Result<Self, OptimError> {
        let shape = value.shape().to_vec();
        let grad = match grad {
            Some(g) => {
                if g.shape() != shape.as_slice() {
                    return Err(OptimError::ShapeChanged {
                        name: name.to_string(),
                        expected: shape,
                        got: g.shape().to_vec(),
                    });
                }
                if g.strides() != value.strides() {
                    return Err(OptimError::NotContiguous {
                        name: name.to_string(),
                    });
                }
                Some(
                    g.as_slice_memory_order()
                        .ok_or_else(|| OptimError::NotContiguous {
                            name: name.to_string(),
                        })?,
                )
            }
            None => None,
        };
        let value = value
            .as_slice_memory_order_mut()
            .ok_or_else(|| OptimError::NotContiguous {
                name: name.to_string(),
            })?;
        Ok(Param {
            name,
            shape,
            value,
            grad,
        })
    }
}

/// Checks one call's parameters: unique names, gradients present, lengths consistent.
/// Returns the gradients in order.
pub(crate) fn check_params<'a, T: Real>(
    params: &[Param<'a, T>],
) -> Result<Vec<&'a [T]>, OptimError> {
    let mut seen = std::collections::HashSet::new();
    let mut grads = Vec::with_capacity(params.len());
    for p in params {
        if !seen.insert(p.name) {
            return Err(OptimError::DuplicateParam {
                name: p.name.to_string(),
            });
        }
        let g = p.grad.ok_or_else(|| OptimError::MissingGrad {
            name: p.name.to_string(),
        })?;
        if g.len() != p.value.len() {
            return Err(OptimError::GradLength {
                name: p.name.to_string(),
                value_len: p.value.len(),
                grad_len: g.len(),
            });
        }
        if p.shape.iter().product::<usize>() != p.value.len() {
            return Err(OptimError::ShapeLength {
                name: p.name.to_string(),
                shape: p.shape.clone(),
                len: p.value.len(),
            });
        }
        grads.push(g);
    }
    Ok(grads)
}
