//! `LeakyRelu`: y = x for x ≥ 0, alpha·x otherwise (alpha defaults to 0.01).

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `LeakyRelu`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let alpha = ctx.node.attr_float("alpha", 0.01)?;
    let a64 = alpha as f64;
    eval_unary(
        ctx,
        inputs,
        move |x| if x >= 0.0 { x } else { a64 * x },
        move |x| if x >= 0.0 { x } else { alpha * x },
    )
}

/// `LeakyRelu` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("LeakyRelu", 1, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        quant_inputs: super::QuantInputs::First,
        elementwise: true,
        qlinear: Some(super::OpKind::QLinearLeakyRelu),
        ..super::Facts::NONE
    });
