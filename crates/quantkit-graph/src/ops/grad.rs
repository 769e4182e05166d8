//! Reverse-mode gradients of operators (not an operator itself): the signature every
//! operator's `backward` has, and the helpers they share (numpy broadcasting undone by
//! summation, f32 views).
//!
//! An operator's gradient lives in its own file beside its `eval` and is registered with
//! [`super::OpDef::backward`]; `quantkit-train` runs a graph forward with the registry's
//! `eval` and backward with these functions, so there is one f32 forward per operator.
//! Every gradient is checked against central finite differences in
//! `tests/op_gradients.rs`.

use super::OpCtx;
use crate::error::OpError;
use crate::tensor::{broadcast_index, Tensor};

/// What a gradient sees: the node's inputs (`None` for an omitted optional input), its
/// first output as `eval` produced it, the gradient of the loss with respect to that
/// output (f32, the output's shape), and which inputs need a gradient.
pub struct GradIn<'a> {
    /// The node's inputs.
    pub inputs: &'a [Option<&'a Tensor>],
    /// Output 0 of the forward pass.
    pub output: &'a Tensor,
    /// `∂L/∂output`.
    pub grad: &'a [f32],
    /// `needs[i]`: input `i` wants a gradient (others may be returned as `None`).
    pub needs: &'a [bool],
}

impl GradIn<'_> {
    /// Whether input `i` needs a gradient.
    pub fn need(&self, i: usize) -> bool {
        self.needs.get(i).copied().unwrap_or(false)
    }
}

/// Signature of an operator's gradient: one entry per input, `Some` (same shape as the
/// input, f32) where [`GradIn::need`] is true; inputs that are not differentiable (shapes,
/// axes, Clip bounds, BatchNormalization's running statistics) get `None`.
pub type BackwardFn = fn(&OpCtx, &GradIn) -> Result<Vec<Option<Tensor>>, OpError>;

/// The f32 values of input `i` (borrowed when f32).
pub fn f32s<'a>(
    inputs: &[Option<&'a Tensor>],
    i: usize,
) -> Result<std::borrow::Cow<'a, [f32]>, OpError> {
    let t = super::input(inputs, i)?;
    Ok(match t.as_f32() {
        Some(v) => std::borrow::Cow::Borrowed(v),
        None if t.dtype.is_float() => std::borrow::Cow::Owned(t.to_f32_vec()),
        None => {
            return Err(OpError::DType {
                index: i,
                expected: "float (a differentiable input)".into(),
                got: t.dtype.to_string(),
            })
        }
    })
}

/// An f32 tensor of `shape` (sizes are the caller's invariant).
pub fn tensor(shape: &[usize], data: Vec<f32>) -> Result<Tensor, OpError> {
    super::make(
        crate::tensor::DType::F32,
        shape.to_vec(),
        crate::tensor::Data::F32(data),
    )
}

/// The gradient of an input of shape `shape` that was broadcast to `out_shape`: `g` summed
/// over the broadcast axes (numpy broadcasting run backwards).
pub fn unbroadcast(g: &[f32], out_shape: &[usize], shape: &[usize]) -> Vec<f32> {
    if shape == out_shape {
        return g.to_vec();
    }
    let n: usize = shape.iter().product();
    let mut acc = vec![0f64; n];
    for (gi, &j) in g.iter().zip(&broadcast_index(shape, out_shape)) {
        acc[j] += *gi as f64;
    }
    acc.into_iter().map(|v| v as f32).collect()
}

/// `x` (of shape `shape`) broadcast to `out_shape`.
pub fn broadcast_to(x: &[f32], shape: &[usize], out_shape: &[usize]) -> Vec<f32> {
    if shape == out_shape {
        return x.to_vec();
    }
    broadcast_index(shape, out_shape)
        .into_iter()
        .map(|j| x[j])
        .collect()
}

/// Element-wise gradient of a unary operator: `∂L/∂x = g · f'(x, y)`.
pub fn unary(
    gi: &GradIn,
    dydx: impl Fn(f32, f32) -> f32 + Sync,
) -> Result<Vec<Option<Tensor>>, OpError> {
    use rayon::prelude::*;
    let mut out: Vec<Option<Tensor>> = gi.inputs.iter().map(|_| None).collect();
    if gi.need(0) {
        let x = f32s(gi.inputs, 0)?;
        let y = match gi.output.as_f32() {
            Some(v) => std::borrow::Cow::Borrowed(v),
            None => std::borrow::Cow::Owned(gi.output.to_f32_vec()),
        };
        if y.len() != x.len() || gi.grad.len() != x.len() {
            return Err(OpError::shape(
                format!("output and gradient of {} elements", x.len()),
                (y.len(), gi.grad.len()),
            ));
        }
        // Collected straight into the result, in parallel blocks large enough that
        // scheduling costs nothing next to the pass over memory.
        let d: Vec<f32> = gi
            .grad
            .par_iter()
            .with_min_len(1 << 14)
            .zip(x.par_iter().zip(y.par_iter()))
            .map(|(g, (&x, &y))| g * dydx(x, y))
            .collect();
        out[0] = Some(tensor(&super::input(gi.inputs, 0)?.shape, d)?);
    }
    Ok(out)
}

/// The gradient of an operator that only reshapes input 0 (Reshape, Flatten, Squeeze...):
/// the output gradient under the input's shape.
pub fn reshape_back(gi: &GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let mut out: Vec<Option<Tensor>> = gi.inputs.iter().map(|_| None).collect();
    if gi.need(0) {
        out[0] = Some(tensor(
            &super::input(gi.inputs, 0)?.shape,
            gi.grad.to_vec(),
        )?);
    }
    Ok(out)
}
