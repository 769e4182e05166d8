//! `Abs`: y = |x| for float and integer types (signed minimum wraps to itself, as in C;
//! unsigned values are unchanged). Opset 6 added the integer types; 13 only bfloat16.

use super::unary::map_float;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// Evaluates `Abs`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let data = match &x.data {
        Data::I8(v) => Data::I8(v.iter().map(|a| a.wrapping_abs()).collect()),
        Data::I16(v) => Data::I16(v.iter().map(|a| a.wrapping_abs()).collect()),
        Data::I32(v) => Data::I32(v.iter().map(|a| a.wrapping_abs()).collect()),
        Data::I64(v) => Data::I64(v.iter().map(|a| a.wrapping_abs()).collect()),
        Data::U8(_) | Data::U16(_) | Data::U32(_) | Data::U64(_) => x.data.clone(),
        _ => return Ok(vec![map_float(x, f64::abs, f32::abs)?]),
    };
    make(x.dtype, x.shape.clone(), data).map(|t| vec![t])
}

/// `Abs` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Abs", 1, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        ..super::Facts::ELEMENTWISE
    })
    .bf16_widen();
