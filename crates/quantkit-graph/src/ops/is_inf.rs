//! `IsInf`: element-wise infinity test of a float tensor, bool output (opset 10; 20 only
//! added bfloat16 and float8, which the IR lacks). `detect_negative` and `detect_positive`
//! (default 1) choose which infinities count.

use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `IsInf`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let neg = ctx.node.attr_int("detect_negative", 1)? != 0;
    let pos = ctx.node.attr_int("detect_positive", 1)? != 0;
    let test = |inf: bool, positive: bool| inf && if positive { pos } else { neg };
    let v: Vec<bool> = match &x.data {
        Data::F32(v) => v.iter().map(|a| test(a.is_infinite(), *a > 0.0)).collect(),
        Data::F64(v) => v.iter().map(|a| test(a.is_infinite(), *a > 0.0)).collect(),
        Data::F16(v) => v
            .iter()
            .map(|a| test(a.is_infinite(), a.is_sign_positive()))
            .collect(),
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

/// `IsInf` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("IsInf", 1, eval)
    .infer(super::is_nan::infer)
    .facts(super::Facts::ELEMENTWISE);
