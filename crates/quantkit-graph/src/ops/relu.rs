//! `Relu`: y = max(x, 0).

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Relu`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let _ = ctx;
    eval_unary(ctx, inputs, |x| x.max(0.0), |x| x.max(0.0))
}

/// Gradient: `g · [x > 0]`.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let _ = ctx;
    super::grad::unary(gi, |x, _| if x > 0.0 { 1.0 } else { 0.0 })
}

/// `Relu` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Relu", 1, eval)
        .backward(backward)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        quant_inputs: super::QuantInputs::First,
        elementwise: true,
        monotone: true,
        clamp: true,
        ..super::Facts::NONE
    })
    .bf16_widen();
