//! `HardSwish`: y = x · max(0, min(1, x/6 + 1/2)) (opset 14).

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `HardSwish`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_unary(
        ctx,
        inputs,
        |x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
        |x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
    )
}

/// Gradient of `x · clamp(x/6 + 1/2, 0, 1)`: 0 below −3, 1 above 3, `x/3 + 1/2` between.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let _ = ctx;
    super::grad::unary(gi, |x, _| {
        let v = x / 6.0 + 0.5;
        if v <= 0.0 {
            0.0
        } else if v >= 1.0 {
            1.0
        } else {
            v + x / 6.0
        }
    })
}

/// `HardSwish` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("HardSwish", 14, eval)
        .backward(backward)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        ..super::Facts::ELEMENTWISE
    });
