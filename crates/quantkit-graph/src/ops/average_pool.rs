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

/// Gradient: each output's `g / count` added to the inputs of its window (`count` as in
/// `eval`: with or without the padding).
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    use rayon::prelude::*;
    let x = input(gi.inputs, 0)?;
    let g = PoolGeom::new(ctx, &x.shape)?;
    let include = ctx.node.attr_int("count_include_pad", 0)? != 0;
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    if !gi.need(0) {
        return Ok(out);
    }
    let in_len: usize = g.in_sp.iter().product();
    let out_len: usize = g.out_sp.iter().product();
    let klen: usize = g.k.iter().product::<usize>().max(1);
    let taps = g.taps();
    let mut d = vec![0f32; x.len()];
    if in_len > 0 && out_len > 0 {
        d.par_chunks_mut(in_len).enumerate().for_each(|(p, dp)| {
            let gp = &gi.grad[p * out_len..(p + 1) * out_len];
            for (o, &go) in gp.iter().enumerate() {
                let w = &taps[o * klen..(o + 1) * klen];
                let cnt = w
                    .iter()
                    .filter(|&&(t, pad)| (include && pad) || (!include && t.is_some()))
                    .count();
                if cnt == 0 {
                    continue;
                }
                let v = go / cnt as f32;
                for &(t, _) in w {
                    if let Some(i) = t {
                        dp[i] += v;
                    }
                }
            }
        });
    }
    out[0] = Some(super::grad::tensor(&x.shape, d)?);
    Ok(out)
}

/// `AveragePool` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("AveragePool", 1, eval)
        .backward(backward)
    .infer(infer)
    .facts(super::Facts {
        quant_inputs: super::QuantInputs::First,
        monotone: true,
        qlinear: Some(super::OpKind::QLinearAveragePool),
        ..super::Facts::NONE
    });
