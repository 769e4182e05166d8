//! `Div`: element-wise div with numpy broadcasting (ONNX opsets 7, 13, 14).

use super::binary::{eval_arith, Arith};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Div`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_arith(Arith::Div, inputs)
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let _ = ctx;
    let (a, b) = (inp.get(0)?, inp.get(1)?);
    Some(vec![(a.0, crate::tensor::broadcast_shapes(&a.1, &b.1)?)])
}

/// `Div` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Div", 1, eval)
    .infer(infer)
    .facts(super::Facts::ELEMENTWISE)
    .bf16_widen();
