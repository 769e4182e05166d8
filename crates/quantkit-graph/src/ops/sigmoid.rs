//! `Sigmoid`: y = 1 / (1 + e^(−x)).

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Sigmoid`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_unary(
        ctx,
        inputs,
        |x| 1.0 / (1.0 + (-x).exp()),
        |x| 1.0 / (1.0 + (-x).exp()),
    )
}

/// Gradient: `g · y · (1 − y)`.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let _ = ctx;
    super::grad::unary(gi, |_, y| y * (1.0 - y))
}

/// `Sigmoid` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Sigmoid", 1, eval)
        .backward(backward)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        quant_inputs: super::QuantInputs::First,
        elementwise: true,
        monotone: true,
        qlinear: Some(super::OpKind::QLinearSigmoid),
        ..super::Facts::NONE
    });
