//! `Div`: element-wise div with numpy broadcasting (ONNX opsets 7, 13, 14).

use super::binary::{eval_arith, Arith};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Div`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_arith(Arith::Div, inputs)
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let _ = ctx;
    let (a, b) = (inp.get(0)?, inp.get(1)?);
    Some(vec![(a.0, crate::tensor::broadcast_shapes(&a.1, &b.1)?)])
}

/// Gradient: `∂a = g / b`, `∂b = −g · y / b` (`y = a / b`, the forward's output), each
/// summed over the axes it was broadcast along.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    use super::grad::{broadcast_to, f32s, tensor, unbroadcast};
    let _ = ctx;
    let out_shape = &gi.output.shape;
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    let bs = &super::input(gi.inputs, 1)?.shape;
    let b = broadcast_to(&f32s(gi.inputs, 1)?, bs, out_shape);
    if gi.need(0) {
        let s = &super::input(gi.inputs, 0)?.shape;
        let d: Vec<f32> = gi.grad.iter().zip(&b).map(|(g, v)| g / v).collect();
        out[0] = Some(tensor(s, unbroadcast(&d, out_shape, s))?);
    }
    if gi.need(1) {
        let y = gi.output.to_f32_vec();
        let d: Vec<f32> = gi
            .grad
            .iter()
            .zip(&y)
            .zip(&b)
            .map(|((g, y), v)| -g * y / v)
            .collect();
        out[1] = Some(tensor(bs, unbroadcast(&d, out_shape, bs))?);
    }
    Ok(out)
}

/// `Div` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Div", 1, eval)
    .backward(backward)
    .infer(infer)
    .facts(super::Facts::ELEMENTWISE)
    .bf16_widen();
