//! `HardSigmoid`: y = max(0, min(1, alpha·x + beta)), alpha 0.2 and beta 0.5 by default.

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `HardSigmoid`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let alpha = ctx.node.attr_float("alpha", 0.2)?;
    let beta = ctx.node.attr_float("beta", 0.5)?;
    let (a, b) = (alpha as f64, beta as f64);
    eval_unary(
        ctx,
        inputs,
        move |x| (a * x + b).clamp(0.0, 1.0),
        move |x| (alpha * x + beta).clamp(0.0, 1.0),
    )
}

/// Gradient: `g · α` where `0 < αx + β < 1`, else 0.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let alpha = ctx.node.attr_float("alpha", 0.2)?;
    let beta = ctx.node.attr_float("beta", 0.5)?;
    super::grad::unary(gi, move |x, _| {
        let v = alpha * x + beta;
        if v > 0.0 && v < 1.0 {
            alpha
        } else {
            0.0
        }
    })
}

/// `HardSigmoid` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("HardSigmoid", 1, eval)
        .backward(backward)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        ..super::Facts::ELEMENTWISE
    });
