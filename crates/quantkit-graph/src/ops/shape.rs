//! `Shape`: the input's dimensions as int64, optionally sliced by `start`/`end` (opset 15).

use super::{input, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Shape`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    Ok(vec![shape_of(&x.shape, ctx)?])
}

/// The output of `Shape` for an input of shape `shape` (also used by constant folding).
pub fn shape_of(shape: &[usize], ctx: &OpCtx) -> Result<Tensor, OpError> {
    let r = shape.len() as i64;
    let clampi = |v: i64| {
        if v < 0 {
            (v + r).clamp(0, r)
        } else {
            v.clamp(0, r)
        }
    };
    let start = clampi(ctx.node.attr_int("start", 0)?);
    let end = match ctx.node.attr("end") {
        Some(_) => clampi(ctx.node.attr_int("end", r)?),
        None => r,
    };
    let dims: Vec<i64> = if end > start {
        shape[start as usize..end as usize]
            .iter()
            .map(|&d| d as i64)
            .collect()
    } else {
        Vec::new()
    };
    Ok(Tensor::from_i64(&[dims.len()], dims))
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let x = inp.get(0)?;
    Some(vec![(
        crate::tensor::DType::I64,
        vec![shape_of(&x.1, ctx).ok()?.len()],
    )])
}

/// `Shape` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Shape", 1, eval).infer(infer)
    .bf16_codes();
