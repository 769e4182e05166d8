//! `ReduceProd`: the product of the elements over `axes` (the attribute before opset 18, the optional int64 input from
//! 18), with `keepdims` and `noop_with_empty_axes` as in the other `Reduce*` operators
//! ([`super::reduce_mean::reduce`]). A reduction over an empty set gives 1. Folds in f64.

use super::reduce_mean::{reduce, reduce_infer};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Opset from which `axes` is an input.
const AXES_INPUT_SINCE: i64 = 18;

/// Evaluates `ReduceProd`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    reduce(ctx, inputs, AXES_INPUT_SINCE, 1.0, |s, v| s * v, |s, _| s)
}

/// Static shape rule (known when the axes are an attribute or a constant).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    reduce_infer(ctx, inp, AXES_INPUT_SINCE)
}

/// `ReduceProd` in the operator registry (no integer form).
pub const DEF: super::OpDef = super::OpDef::onnx("ReduceProd", 1, eval)
    .infer(infer)
    .facts(super::Facts::NONE);
