//! `IsNaN`: element-wise NaN test of a float tensor, bool output (opset 9; 13 and 20 only
//! added bfloat16 and float8, which the IR lacks).

use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `IsNaN`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let v: Vec<bool> = match &x.data {
        Data::F32(v) => v.iter().map(|a| a.is_nan()).collect(),
        Data::F64(v) => v.iter().map(|a| a.is_nan()).collect(),
        Data::F16(v) => v.iter().map(|a| a.is_nan()).collect(),
        _ => {
            return Err(OpError::DType {
                index: 0,
                expected: "float, double or float16".into(),
                got: x.dtype.to_string(),
            })
        }
    };
    Ok(vec![make(DType::Bool, x.shape.clone(), Data::Bool(v))?])
}

/// Static shape rule: a bool tensor of the input's shape.
pub fn infer(_ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    Some(vec![(DType::Bool, inp.get(0)?.1.clone())])
}

/// `IsNaN` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("IsNaN", 1, eval)
    .infer(infer)
    .facts(super::Facts::ELEMENTWISE);
