//! `Swish` (opset 24): y = x · sigmoid(alpha · x), `alpha` defaulting to 1 (float, double,
//! float16). Not `monotone`: it dips below zero for negative x.

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Swish`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let alpha = ctx.node.attr_float("alpha", 1.0)?;
    let a64 = alpha as f64;
    eval_unary(
        ctx,
        inputs,
        move |x| x / (1.0 + (-a64 * x).exp()),
        move |x| x / (1.0 + (-alpha * x).exp()),
    )
}

/// `Swish` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Swish", 24, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        ..super::Facts::ELEMENTWISE
    });
