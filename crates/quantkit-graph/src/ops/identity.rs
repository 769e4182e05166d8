//! `Identity`: y = x.

use super::{input, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Identity`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    Ok(vec![input(inputs, 0)?.clone()])
}

/// Gradient: the output gradient under the input's shape.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let _ = ctx;
    super::grad::reshape_back(gi)
}

/// `Identity` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Identity", 1, eval)
        .backward(backward)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        moves_values: true,
        elementwise: true,
        monotone: true,
        ..super::Facts::NONE
    })
    .narrow_types();
