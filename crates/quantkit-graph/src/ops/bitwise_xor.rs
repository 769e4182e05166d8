//! `BitwiseXor` (opset 18): element-wise `a ^ b` of two integer tensors of the same type
//! with numpy broadcasting, evaluated by [`super::bitwise_and::bitwise`].

use super::bitwise_and::{bitwise, BitOp};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `BitwiseXor`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    bitwise(BitOp::Xor, inputs)
}

/// `BitwiseXor` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("BitwiseXor", 18, eval)
    .infer(super::add::infer)
    .facts(super::Facts::ELEMENTWISE);
