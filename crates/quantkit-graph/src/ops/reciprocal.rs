//! `Reciprocal`: y = 1/x (±∞ at ±0) (float types; later opsets only add bfloat16).

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Reciprocal`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_unary(ctx, inputs, |x| 1.0 / x, |x| 1.0 / x)
}

/// `Reciprocal` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Reciprocal", 1, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        monotone: false,
        unary: true,
        ..super::Facts::ELEMENTWISE
    });
