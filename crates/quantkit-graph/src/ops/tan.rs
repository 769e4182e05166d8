//! `Tan`: y = tan x (radians).
//!
//! Float, double and float16 (later opsets only add bfloat16, which the IR does not hold).

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Tan`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_unary(ctx, inputs, f64::tan, f32::tan)
}

/// `Tan` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Tan", 7, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        ..super::Facts::ELEMENTWISE
    });
