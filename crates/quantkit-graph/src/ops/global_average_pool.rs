//! `GlobalAveragePool`: the mean over all spatial axes of an `[N, C, D...]` input, keeping them as 1s.

use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// Evaluates `GlobalAveragePool`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    if x.rank() < 3 {
        return Err(OpError::shape("input [N, C, D...]", &x.shape));
    }
    let plane: usize = x.shape[2..].iter().product();
    let v = x.to_f64_vec();
    let y: Vec<f64> = v.chunks(plane.max(1)).map(reduce).collect();
    let mut shape = x.shape[..2].to_vec();
    shape.extend(std::iter::repeat_n(1, x.rank() - 2));
    Ok(vec![
        make(crate::DType::F64, shape, Data::F64(y))?.cast(x.dtype)
    ])
}

fn reduce(c: &[f64]) -> f64 {
    c.iter().sum::<f64>() / c.len() as f64
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let _ = ctx;
    let x = inp.get(0)?;
    let mut s = x.1.clone();
    s.get_mut(2..)?.iter_mut().for_each(|d| *d = 1);
    Some(vec![(x.0, s)])
}

/// Gradient: `g / (H·W)` spread over each plane.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let _ = ctx;
    let x = input(gi.inputs, 0)?;
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    if gi.need(0) {
        let plane: usize = x.shape[2..].iter().product::<usize>().max(1);
        let d: Vec<f32> = gi
            .grad
            .iter()
            .flat_map(|&g| std::iter::repeat_n(g / plane as f32, plane))
            .collect();
        out[0] = Some(super::grad::tensor(&x.shape, d)?);
    }
    Ok(out)
}

/// `GlobalAveragePool` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("GlobalAveragePool", 1, eval)
        .backward(backward)
    .infer(infer)
    .facts(super::Facts {
        quant_inputs: super::QuantInputs::First,
        monotone: true,
        qlinear: Some(super::OpKind::QLinearGlobalAveragePool),
        ..super::Facts::NONE
    });
