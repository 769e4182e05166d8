//! `Unsqueeze`: inserts size-1 axes (positions in the output); `axes` is an input from
//! opset 13.

use super::{input, ints_of, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Unsqueeze`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let axes = if ctx.opset >= 13 {
        ints_of(input(inputs, 1)?)
    } else {
        ctx.node
            .attr_ints("axes")?
            .ok_or_else(|| OpError::attr("axes", "required"))?
    };
    let out_rank = x.rank() + axes.len();
    let mut is_new = vec![false; out_rank];
    for a in axes {
        let a = norm_axis(a, out_rank)?;
        if is_new[a] {
            return Err(OpError::attr("axes", "repeated axis"));
        }
        is_new[a] = true;
    }
    let mut it = x.shape.iter();
    let shape: Vec<usize> = is_new
        .iter()
        .map(|&n| if n { 1 } else { *it.next().unwrap_or(&1) })
        .collect();
    Ok(vec![x
        .clone()
        .reshaped(shape)
        .map_err(|e| OpError::Invalid(e.to_string()))?])
}

/// Gradient: the output gradient under the input's shape.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let _ = ctx;
    super::grad::reshape_back(gi)
}

/// `Unsqueeze` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Unsqueeze", 1, eval)
        .backward(backward).facts(super::Facts {
    layout: true,
    monotone: true,
    ..super::Facts::MOVES
})
    .bf16_codes();
