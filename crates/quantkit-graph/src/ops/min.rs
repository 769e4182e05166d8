//! `Min`: element-wise minimum of one or more inputs with numpy broadcasting (opset 8; 12
//! added the integer types). A NaN operand gives NaN. Evaluated by [`super::max::extremum`].

use super::max::extremum;
use super::sum::infer;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Min`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    extremum(inputs, false)
}

/// `Min` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Min", 1, eval)
    .infer(infer)
    .facts(super::Facts::ELEMENTWISE)
    .bf16_widen();
