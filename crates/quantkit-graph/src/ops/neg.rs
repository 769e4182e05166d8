//! `Neg`: y = −x for float and signed integer types (the signed minimum wraps to itself, as
//! in C). Opset 6 added the integer types; 13 only bfloat16.

use super::unary::map_float;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// Evaluates `Neg`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let data = match &x.data {
        Data::I8(v) => Data::I8(v.iter().map(|a| a.wrapping_neg()).collect()),
        Data::I16(v) => Data::I16(v.iter().map(|a| a.wrapping_neg()).collect()),
        Data::I32(v) => Data::I32(v.iter().map(|a| a.wrapping_neg()).collect()),
        Data::I64(v) => Data::I64(v.iter().map(|a| a.wrapping_neg()).collect()),
        _ => return Ok(vec![map_float(x, |v| -v, |v| -v)?]),
    };
    make(x.dtype, x.shape.clone(), data).map(|t| vec![t])
}

/// `Neg` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Neg", 1, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        ..super::Facts::ELEMENTWISE
    })
    .bf16_widen();
