//! `Identity`: y = x.

use super::{input, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Identity`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    Ok(vec![input(inputs, 0)?.clone()])
}

/// `Identity` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Identity", 1, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        moves_values: true,
        elementwise: true,
        monotone: true,
        ..super::Facts::NONE
    })
    .narrow_types();
