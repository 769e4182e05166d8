//! `Log`: y = ln x (NaN for x < 0, −∞ at 0) (float types; later opsets only add bfloat16).

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Log`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_unary(ctx, inputs, f64::ln, f32::ln)
}

/// `Log` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Log", 1, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        monotone: true,
        unary: true,
        ..super::Facts::ELEMENTWISE
    });
