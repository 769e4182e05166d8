//! `Cast`: element type conversion (opsets 6, 13, 19, 21). `saturate` only concerns float8.

use super::{input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Tensor};

/// Evaluates `Cast`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let to = ctx.node.attr_int("to", 0)? as i32;
    let dt = DType::from_onnx(to)
        .ok_or_else(|| OpError::Unsupported(format!("Cast to {}", DType::onnx_name(to))))?;
    Ok(vec![input(inputs, 0)?.cast(dt)])
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let x = inp.get(0)?;
    Some(vec![(
        crate::tensor::DType::from_onnx(ctx.node.attr_int("to", 0).ok()? as i32)?,
        x.1.clone(),
    )])
}

/// `Cast` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Cast", 1, eval)
    .infer(infer)
    .facts(super::Facts::ELEMENTWISE);
