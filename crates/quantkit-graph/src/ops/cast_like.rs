//! `CastLike` (opsets 15, 19 `saturate`, 21, 23, 24, 25): `Cast` of input 0 to the element
//! type of input 1 (whose values are not read), with `Cast`'s `saturate` and `round_mode`.

use super::cast::cast_options;
use super::{input, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `CastLike`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let like = input(inputs, 1)?;
    let opts = cast_options(ctx.node)?;
    Ok(vec![input(inputs, 0)?.cast_with(like.dtype, opts)])
}

/// Static shape rule (see [`super::registry::InferFn`]): the shape of input 0, the type
/// of input 1.
pub fn infer(_: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (x, like) = (inp.get(0)?, inp.get(1)?);
    Some(vec![(like.0, x.1.clone())])
}

/// `CastLike` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("CastLike", 15, eval)
    .infer(infer)
    .narrow_types();
