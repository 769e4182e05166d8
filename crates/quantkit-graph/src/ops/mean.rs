//! `Mean`: element-wise mean of one or more float inputs with numpy broadcasting (opset 8;
//! earlier opsets required equal shapes, which broadcasting covers): the [`super::sum`] of
//! the inputs divided by their count.

use super::sum::infer;
use super::unary::map_float;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Mean`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let sum = super::sum::eval(ctx, inputs)?.remove(0);
    let n = inputs.len();
    Ok(vec![map_float(&sum, |v| v / n as f64, |v| v / n as f32)?])
}

/// `Mean` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Mean", 1, eval)
    .infer(infer)
    .facts(super::Facts::ELEMENTWISE);
