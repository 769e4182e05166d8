//! `Mish` (opset 18): y = x · tanh(softplus(x)) (float, double, float16). It has a minimum
//! near x ≈ −1.19, so it is not `monotone`.

use super::softplus::{softplus32, softplus64};
use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Mish`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_unary(
        ctx,
        inputs,
        |x| x * softplus64(x).tanh(),
        |x| x * softplus32(x).tanh(),
    )
}

/// `Mish` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Mish", 18, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        ..super::Facts::ELEMENTWISE
    });
