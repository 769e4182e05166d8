//! `ThresholdedRelu` (opset 10): y = x for x > alpha, 0 otherwise, with `alpha` 1 by
//! default. Not declared `monotone`: with a negative `alpha` the output jumps from 0 down
//! to `alpha`.

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `ThresholdedRelu`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let alpha = ctx.node.attr_float("alpha", 1.0)?;
    let a64 = alpha as f64;
    eval_unary(
        ctx,
        inputs,
        move |x| if x > a64 { x } else { 0.0 },
        move |x| if x > alpha { x } else { 0.0 },
    )
}

/// `ThresholdedRelu` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("ThresholdedRelu", 10, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        ..super::Facts::ELEMENTWISE
    });
