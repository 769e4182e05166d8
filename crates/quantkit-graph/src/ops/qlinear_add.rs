//! `QLinearAdd` (domain `com.microsoft`, ONNX Runtime contrib op; ONNX Runtime's quantizer
//! writes it for `Add` in QOperator form). Inputs `A, A_scale, A_zero_point?, B, B_scale,
//! B_zero_point?, C_scale, C_zero_point?`, per-tensor parameters, u8 or i8 codes, numpy
//! broadcasting of A and B:
//!
//! `C = saturate(round_half_even((a_s·(A − a_zp) + b_s·(B − b_zp)) / c_s) + c_zp)`, in f32
//! (the reference definition: dequantize, add, quantize). ONNX Runtime's kernel (MLAS)
//! folds the scales into ratios `a_s/c_s`, `b_s/c_s` and rounds in its own order, so it can
//! differ from this by one code where the exact value lies within f32 rounding of a half.

use super::qlinear::eval_binary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `QLinearAdd`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_binary(inputs, "QLinearAdd", |a, b| a + b)
}

/// `QLinearAdd` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::microsoft("QLinearAdd", eval);
