//! `Flatten`: reshapes to 2-D, `[prod(d[..axis]), prod(d[axis..])]`; axis may be negative.

use super::{input, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Flatten`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let r = x.rank() as i64;
    let mut axis = ctx.node.attr_int("axis", 1)?;
    if axis < 0 {
        axis += r;
    }
    if axis < 0 || axis > r {
        return Err(OpError::attr(
            "axis",
            format!("{axis} out of range for rank {r}"),
        ));
    }
    let a = axis as usize;
    let outer: usize = x.shape[..a].iter().product();
    let inner: usize = x.shape[a..].iter().product();
    Ok(vec![x
        .clone()
        .reshaped(vec![outer, inner])
        .map_err(|e| OpError::Invalid(e.to_string()))?])
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let x = inp.get(0)?;
    let r = x.1.len() as i64;
    let mut a = ctx.node.attr_int("axis", 1).ok()?;
    if a < 0 {
        a += r;
    }
    let a = a.clamp(0, r) as usize;
    Some(vec![(
        x.0,
        vec![x.1[..a].iter().product(), x.1[a..].iter().product()],
    )])
}

/// Gradient: the output gradient under the input's shape.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let _ = ctx;
    super::grad::reshape_back(gi)
}

/// `Flatten` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("Flatten", 1, eval)
        .backward(backward)
        .infer(infer)
        .facts(super::Facts {
            layout: true,
            monotone: true,
            ..super::Facts::MOVES
        })
    .bf16_codes();
