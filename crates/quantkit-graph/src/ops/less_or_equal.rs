//! `LessOrEqual`: element-wise `a <= b` with numpy broadcasting, bool output, for every numeric
//! type (opset 12; 16 added bfloat16, which the IR lacks). A NaN operand gives false. Evaluated by
//! [`super::equal::compare`].

use super::equal::{compare, infer, Cmp};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `LessOrEqual`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    compare(Cmp::Le, inputs)
}

/// `LessOrEqual` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("LessOrEqual", 1, eval)
    .infer(infer)
    .facts(super::Facts::ELEMENTWISE)
    .bf16_widen();
