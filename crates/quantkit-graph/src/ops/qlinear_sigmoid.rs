//! `QLinearSigmoid` (domain `com.microsoft`, ONNX Runtime contrib op; ONNX Runtime's
//! quantizer writes it for `Sigmoid` in QOperator form). Inputs `X, X_scale, X_zero_point?,
//! Y_scale, Y_zero_point?`, per-tensor parameters, u8 or i8 codes:
//!
//! `y = saturate(round_half_even(σ(x_s·(x − x_zp)) / y_s) + y_zp)`, `σ(v) = 1 / (1 + e^(−v))`
//! in f32 (as [`super::sigmoid`]), through a 256-entry table. ONNX Runtime builds the same
//! kind of table with its own vectorized logistic function, so it can differ from this by
//! one code where σ lies within f32 rounding of a half step.

use super::qlinear::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `QLinearSigmoid`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_unary(inputs, "QLinearSigmoid", |v| 1.0 / (1.0 + (-v).exp()))
}

/// `QLinearSigmoid` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::microsoft("QLinearSigmoid", eval);
