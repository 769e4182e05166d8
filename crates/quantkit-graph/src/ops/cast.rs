//! `Cast`: element type conversion (opsets 6, 13, 19 `saturate`, 21, 23, 24 `round_mode`,
//! 25). `saturate` (default 1) concerns the float8 and E8M0 targets, `round_mode` (default
//! `up`) E8M0 only; the conversions themselves are [`Tensor::cast_with`]'s (bit-exact
//! float8/float4/bfloat16 codes from `quantkit_core::formats`, wrapping int4/int2).

use super::{input, OpCtx};
use crate::error::OpError;
use crate::ir::Node;
use crate::tensor::{CastOptions, DType, Tensor};

/// `saturate` and `round_mode` of a `Cast` or `CastLike` node.
pub fn cast_options(node: &Node) -> Result<CastOptions, OpError> {
    let saturate = match node.attr_int("saturate", 1)? {
        0 => false,
        1 => true,
        v => return Err(OpError::attr("saturate", format!("expected 0 or 1, got {v}"))),
    };
    let round_mode = node
        .attr_string("round_mode", "up")?
        .parse()
        .map_err(|e: String| OpError::attr("round_mode", e))?;
    Ok(CastOptions {
        saturate,
        round_mode,
    })
}

/// The `to` attribute as a dtype the IR holds.
fn target(node: &Node) -> Result<DType, OpError> {
    let to = i32::try_from(node.attr_int("to", 0)?)
        .map_err(|_| OpError::attr("to", "not a data type code"))?;
    DType::from_onnx(to)
        .ok_or_else(|| OpError::Unsupported(format!("Cast to {}", DType::onnx_name(to))))
}

/// Evaluates `Cast`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let dt = target(ctx.node)?;
    let opts = cast_options(ctx.node)?;
    Ok(vec![input(inputs, 0)?.cast_with(dt, opts)])
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let x = inp.get(0)?;
    Some(vec![(target(ctx.node).ok()?, x.1.clone())])
}

/// Gradient of a cast between float types: `g`, as f32 in the input's shape. A cast to
/// an integer or boolean type has no gradient (its output is piecewise constant); a caller
/// that asks for one gets an error.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    if gi.need(0) {
        let x = input(gi.inputs, 0)?;
        let to = target(ctx.node)?;
        if !(to.is_float() && x.dtype.is_float()) {
            return Err(OpError::Unsupported(format!(
                "the gradient of a Cast from {} to {to}",
                x.dtype
            )));
        }
        out[0] = Some(super::grad::tensor(&x.shape, gi.grad.to_vec())?);
    }
    Ok(out)
}

/// `Cast` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Cast", 1, eval)
    .backward(backward)
    .infer(infer)
    .facts(super::Facts::ELEMENTWISE)
    .narrow_types();
