//! `Sub`: element-wise sub with numpy broadcasting (ONNX opsets 7, 13, 14).

use super::binary::{eval_arith, Arith};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Sub`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_arith(Arith::Sub, inputs)
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let _ = ctx;
    let (a, b) = (inp.get(0)?, inp.get(1)?);
    Some(vec![(a.0, crate::tensor::broadcast_shapes(&a.1, &b.1)?)])
}

/// Gradient: `∂a = g`, `∂b = −g`, each summed over the axes it was broadcast along.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    use super::grad::{tensor, unbroadcast};
    let _ = ctx;
    let out_shape = &gi.output.shape;
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    if gi.need(0) {
        let s = &super::input(gi.inputs, 0)?.shape;
        out[0] = Some(tensor(s, unbroadcast(gi.grad, out_shape, s))?);
    }
    if gi.need(1) {
        let s = &super::input(gi.inputs, 1)?.shape;
        let neg: Vec<f32> = gi.grad.iter().map(|g| -g).collect();
        out[1] = Some(tensor(s, unbroadcast(&neg, out_shape, s))?);
    }
    Ok(out)
}

/// `Sub` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Sub", 1, eval)
    .backward(backward)
    .infer(infer)
    .facts(super::Facts::ELEMENTWISE)
    .bf16_widen();
