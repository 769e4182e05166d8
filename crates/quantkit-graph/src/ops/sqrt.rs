//! `Sqrt`: y = √x (NaN for negative x).

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Sqrt`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_unary(ctx, inputs, f64::sqrt, f32::sqrt)
}

/// `Sqrt` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Sqrt", 1, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        monotone: true,
        ..super::Facts::ELEMENTWISE
    })
    .bf16_widen();
