//! `Sqrt`: y = √x (NaN for negative x).

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Sqrt`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_unary(ctx, inputs, f64::sqrt, f32::sqrt)
}

/// Gradient: `g / (2·y)` (`y = √x`, the forward's output; infinite at `x = 0`, as the
/// derivative is).
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let _ = ctx;
    super::grad::unary(gi, |_, y| 0.5 / y)
}

/// `Sqrt` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Sqrt", 1, eval)
    .backward(backward)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        monotone: true,
        ..super::Facts::ELEMENTWISE
    })
    .bf16_widen();
