//! `Softsign`: y = x / (1 + |x|).
//!
//! Float, double and float16 (later opsets only add bfloat16, which the IR does not hold).

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Softsign`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_unary(ctx, inputs, |x| x / (1.0 + x.abs()), |x| x / (1.0 + x.abs()))
}

/// `Softsign` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Softsign", 1, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        monotone: true,
        ..super::Facts::ELEMENTWISE
    });
