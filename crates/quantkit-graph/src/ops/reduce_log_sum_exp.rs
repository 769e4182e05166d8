//! `ReduceLogSumExp`: `ln(Σ exp(x))` over `axes` (the attribute before opset 18, the optional int64 input from
//! 18), with `keepdims` and `noop_with_empty_axes` as in the other `Reduce*` operators
//! ([`super::reduce_mean::reduce`]). Accumulates as a running log-add-exp, so large inputs do not overflow; a reduction over an empty set gives -inf. Folds in f64.

use super::reduce_mean::{reduce, reduce_infer};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Opset from which `axes` is an input.
const AXES_INPUT_SINCE: i64 = 18;

/// Evaluates `ReduceLogSumExp`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    reduce(ctx, inputs, AXES_INPUT_SINCE, f64::NEG_INFINITY, log_add_exp, |s, _| s)
}

/// Static shape rule (known when the axes are an attribute or a constant).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    reduce_infer(ctx, inp, AXES_INPUT_SINCE)
}

/// `ReduceLogSumExp` in the operator registry (non-decreasing in its input, no integer form).
pub const DEF: super::OpDef = super::OpDef::onnx("ReduceLogSumExp", 1, eval)
    .infer(infer)
    .facts(super::Facts { monotone: true, ..super::Facts::NONE });

/// `ln(exp(a) + exp(b))` without overflow (-inf is the identity; NaN propagates).
fn log_add_exp(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if lo == f64::NEG_INFINITY {
        hi
    } else {
        hi + (lo - hi).exp().ln_1p()
    }
}
