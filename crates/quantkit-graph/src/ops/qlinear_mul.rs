//! `QLinearMul` (domain `com.microsoft`, ONNX Runtime contrib op; ONNX Runtime's quantizer
//! writes it for `Mul` in QOperator form). Inputs `A, A_scale, A_zero_point?, B, B_scale,
//! B_zero_point?, C_scale, C_zero_point?`, per-tensor parameters, u8 or i8 codes, numpy
//! broadcasting of A and B:
//!
//! `C = saturate(round_half_even((a_s·(A − a_zp))·(b_s·(B − b_zp)) / c_s) + c_zp)`, in f32
//! (the reference definition: dequantize, multiply, quantize). ONNX Runtime's kernel
//! (MLAS) multiplies the integer differences by `a_s·b_s/c_s` instead, so it can differ
//! from this by one code where the exact value lies within f32 rounding of a half.

use super::qlinear::eval_binary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `QLinearMul`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_binary(inputs, "QLinearMul", |a, b| a * b)
}

/// `QLinearMul` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::microsoft("QLinearMul", eval);
