//! `Softplus`: y = ln(1 + eˣ), evaluated as `max(x, 0) + ln(1 + e^(−|x|))` so that large
//! inputs give `x` rather than overflowing to ∞ (float, double, float16).

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// ln(1 + eˣ) without overflow (f64).
pub fn softplus64(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

/// ln(1 + eˣ) without overflow (f32).
pub fn softplus32(x: f32) -> f32 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

/// Evaluates `Softplus`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_unary(ctx, inputs, softplus64, softplus32)
}

/// `Softplus` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Softplus", 1, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        monotone: true,
        ..super::Facts::ELEMENTWISE
    });
