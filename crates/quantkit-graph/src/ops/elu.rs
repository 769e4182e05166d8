//! `Elu` (opset 6; opset 1's `consumed_inputs` is ignored): y = x for x > 0,
//! alpha · (eˣ − 1) otherwise, `alpha` defaulting to 1. Not declared `monotone`: a negative
//! `alpha` makes it decreasing below zero.

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Elu`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let alpha = ctx.node.attr_float("alpha", 1.0)?;
    let a64 = alpha as f64;
    eval_unary(
        ctx,
        inputs,
        move |x| if x > 0.0 { x } else { a64 * x.exp_m1() },
        move |x| if x > 0.0 { x } else { alpha * x.exp_m1() },
    )
}

/// `Elu` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Elu", 6, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        ..super::Facts::ELEMENTWISE
    });
