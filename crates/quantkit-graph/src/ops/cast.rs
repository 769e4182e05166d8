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
