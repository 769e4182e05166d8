//! `BitCast` (opset 26): the input's bits, little endian, read as another type of the same
//! bit width (`to`). The bytes are the ONNX raw-data layout of the input (sub-byte types
//! packed), so 4-bit and 2-bit types reinterpret as ONNX stores them. A byte other than 0
//! or 1 cast to bool is refused (the IR's bool holds only those).

use super::{input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Tensor};

fn target(ctx: &OpCtx) -> Result<DType, OpError> {
    let to = i32::try_from(ctx.node.attr_int("to", 0)?)
        .map_err(|_| OpError::attr("to", "not a data type code"))?;
    DType::from_onnx(to)
        .ok_or_else(|| OpError::Unsupported(format!("BitCast to {}", DType::onnx_name(to))))
}

/// Evaluates `BitCast`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let to = target(ctx)?;
    if to.bits() != x.dtype.bits() {
        return Err(OpError::attr(
            "to",
            format!(
                "{to} is {} bits wide, the input {} is {}",
                to.bits(),
                x.dtype,
                x.dtype.bits()
            ),
        ));
    }
    let raw = crate::onnx::tensor_to_proto("", x)
        .raw_data
        .unwrap_or_default();
    if to == DType::Bool {
        if let Some(b) = raw.iter().find(|&&b| b > 1) {
            return Err(OpError::Invalid(format!(
                "BitCast to bool of byte value {b} (bool holds 0 or 1)"
            )));
        }
    }
    let data = crate::onnx::decode_raw(&raw, to, x.len()).map_err(OpError::Invalid)?;
    super::make(to, x.shape.clone(), data).map(|t| vec![t])
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let x = inp.get(0)?;
    Some(vec![(target(ctx).ok()?, x.1.clone())])
}

/// `BitCast` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("BitCast", 26, eval)
    .infer(infer)
    .facts(super::Facts::ELEMENTWISE)
    .narrow_types();
