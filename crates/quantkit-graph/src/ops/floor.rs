//! `Floor`: y = ⌊x⌋ (float types; later opsets only add bfloat16).

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Floor`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_unary(ctx, inputs, f64::floor, f32::floor)
}

/// `Floor` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Floor", 1, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        monotone: true,
        unary: true,
        ..super::Facts::ELEMENTWISE
    });
