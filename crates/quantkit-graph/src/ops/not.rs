//! `Not`: element-wise logical negation of a bool tensor (opset 1).

use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `Not`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    match &x.data {
        Data::Bool(v) => Ok(vec![make(
            DType::Bool,
            x.shape.clone(),
            Data::Bool(v.iter().map(|&b| !b).collect()),
        )?]),
        _ => Err(OpError::DType {
            index: 0,
            expected: "bool".into(),
            got: x.dtype.to_string(),
        }),
    }
}

/// `Not` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Not", 1, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts::ELEMENTWISE);
