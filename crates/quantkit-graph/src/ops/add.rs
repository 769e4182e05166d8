//! `Add`: element-wise add with numpy broadcasting (ONNX opsets 7, 13, 14).

use super::binary::{eval_arith, Arith};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Add`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_arith(Arith::Add, inputs)
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let _ = ctx;
    let (a, b) = (inp.get(0)?, inp.get(1)?);
    Some(vec![(a.0, crate::tensor::broadcast_shapes(&a.1, &b.1)?)])
}

/// Gradient: `g` to both inputs, summed over the axes each was broadcast along.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    use super::grad::{tensor, unbroadcast};
    let _ = ctx;
    let out_shape = &gi.output.shape;
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    for (i, o) in out.iter_mut().enumerate().take(2) {
        if gi.need(i) {
            let s = &super::input(gi.inputs, i)?.shape;
            *o = Some(tensor(s, unbroadcast(gi.grad, out_shape, s))?);
        }
    }
    Ok(out)
}

/// `Add` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Add", 1, eval)
        .backward(backward)
    .infer(infer)
    .facts(super::Facts {
        quant_inputs: super::QuantInputs::All,
        elementwise: true,
        qlinear: Some(super::OpKind::QLinearAdd),
        ..super::Facts::NONE
    })
    .bf16_widen();
