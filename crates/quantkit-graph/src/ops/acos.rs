//! `Acos`: y = arccos x, in [0, π] (NaN outside [−1, 1]); decreasing, so not `monotone`.
//!
//! Float, double and float16 (later opsets only add bfloat16, which the IR does not hold).

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Acos`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_unary(ctx, inputs, f64::acos, f32::acos)
}

/// `Acos` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Acos", 7, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        ..super::Facts::ELEMENTWISE
    });
