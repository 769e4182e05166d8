//! `Xor`: element-wise logical exclusive or of two bool tensors with numpy broadcasting (opset 7).
//! Evaluated by [`super::and::logic`].

use super::and::logic;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Xor`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    logic(inputs, |p, q| p ^ q)
}

/// `Xor` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Xor", 1, eval)
    .infer(super::equal::infer)
    .facts(super::Facts::ELEMENTWISE);
