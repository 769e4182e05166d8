//! `Mul`: element-wise mul with numpy broadcasting (ONNX opsets 7, 13, 14).

use super::binary::{eval_arith, Arith};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Mul`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_arith(Arith::Mul, inputs)
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let _ = ctx;
    let (a, b) = (inp.get(0)?, inp.get(1)?);
    Some(vec![(a.0, crate::tensor::broadcast_shapes(&a.1, &b.1)?)])
}

/// Gradient: `∂a = g · b`, `∂b = g · a`, each summed over the axes it was broadcast along.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    use super::grad::{broadcast_to, f32s, tensor, unbroadcast};
    let _ = ctx;
    let out_shape = &gi.output.shape;
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    for i in 0..2 {
        if gi.need(i) {
            let s = &super::input(gi.inputs, i)?.shape;
            let o = &super::input(gi.inputs, 1 - i)?.shape;
            let other = broadcast_to(&f32s(gi.inputs, 1 - i)?, o, out_shape);
            let d: Vec<f32> = gi.grad.iter().zip(&other).map(|(g, v)| g * v).collect();
            out[i] = Some(tensor(s, unbroadcast(&d, out_shape, s))?);
        }
    }
    Ok(out)
}

/// `Mul` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Mul", 1, eval)
        .backward(backward)
    .infer(infer)
    .facts(super::Facts {
        quant_inputs: super::QuantInputs::All,
        elementwise: true,
        qlinear: Some(super::OpKind::QLinearMul),
        ..super::Facts::NONE
    })
    .bf16_widen();
