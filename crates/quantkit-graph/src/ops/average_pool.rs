//! `AveragePool` (N-D, pads / auto_pad, strides, dilations (opset 19), ceil_mode,
//! count_include_pad). With count_include_pad the divisor counts taps inside the padded
//! input; otherwise only taps inside the input itself.

use super::pool::PoolGeom;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// Evaluates `AveragePool`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let g = PoolGeom::new(ctx, &x.shape)?;
    let include = ctx.node.attr_int("count_include_pad", 0)? != 0;
    let v = x.to_f64_vec();
    let y = g.map_windows(&v, |xp, taps| {
        let mut s = 0.0;
        let mut cnt = 0usize;
        for &(t, in_padded) in taps {
            if let Some(i) = t {
                s += xp[i];
            }
            if (include && in_padded) || (!include && t.is_some()) {
                cnt += 1;
            }
        }
        if cnt == 0 {
            f64::NAN
        } else {
            s / cnt as f64
        }
    });
    let mut shape = x.shape[..2].to_vec();
    shape.extend_from_slice(&g.out_sp);
    Ok(vec![
        make(crate::DType::F64, shape, Data::F64(y))?.cast(x.dtype)
    ])
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let x = inp.get(0)?;
    let g = super::pool::PoolGeom::new(ctx, &x.1).ok()?;
    let mut s = x.1[..2].to_vec();
    s.extend(g.out_sp);
    let mut v = vec![(x.0, s.clone())];
    if ctx.node.outputs.len() > 1 {
        v.push((crate::tensor::DType::I64, s));
    }
    Some(v)
}

/// `AveragePool` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("AveragePool", 1, eval)
    .infer(infer)
    .facts(super::Facts {
        quant_inputs: super::QuantInputs::First,
        monotone: true,
        qlinear: Some(super::OpKind::QLinearAveragePool),
        ..super::Facts::NONE
    });
