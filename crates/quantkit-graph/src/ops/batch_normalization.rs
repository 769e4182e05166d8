//! `BatchNormalization`: y = scale·(x − mean)/√(var + ε) + B per channel (axis 1).
//! With `training_mode` = 1 (opset 14+) the batch statistics are used and the running
//! statistics are returned as `momentum·running + (1 − momentum)·batch` (population var).

use super::{f32_input, input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `BatchNormalization`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let xv = x.to_f32_vec();
    let (scale, bias) = (f32_input(inputs, 1)?, f32_input(inputs, 2)?);
    let (rmean, rvar) = (f32_input(inputs, 3)?, f32_input(inputs, 4)?);
    let eps = ctx.node.attr_float("epsilon", 1e-5)?;
    let momentum = ctx.node.attr_float("momentum", 0.9)?;
    let training = ctx.node.attr_int("training_mode", 0)? != 0;
    if x.rank() < 2 {
        return Err(OpError::shape("input of rank ≥ 2", &x.shape));
    }
    let (n, c) = (x.shape[0], x.shape[1]);
    let plane: usize = x.shape[2..].iter().product();
    for (i, t) in [scale, bias, rmean, rvar].iter().enumerate() {
        if t.len() != c {
            return Err(OpError::shape(
                format!("input {} with {c} elements", i + 1),
                t.len(),
            ));
        }
    }
    let (mean, var): (Vec<f32>, Vec<f32>) = if training {
        let cnt = (n * plane) as f64;
        (0..c)
            .map(|ci| {
                let it = (0..n)
                    .flat_map(|ni| xv[(ni * c + ci) * plane..(ni * c + ci + 1) * plane].iter());
                let m = it.clone().map(|&v| v as f64).sum::<f64>() / cnt;
                let v = it.map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / cnt;
                (m as f32, v as f32)
            })
            .unzip()
    } else {
        (rmean.to_vec(), rvar.to_vec())
    };
    let mut y = xv;
    for ni in 0..n {
        for ci in 0..c {
            let k = scale[ci] / (var[ci] + eps).sqrt();
            let b = bias[ci] - mean[ci] * k;
            y[(ni * c + ci) * plane..(ni * c + ci + 1) * plane]
                .iter_mut()
                .for_each(|v| *v = *v * k + b);
        }
    }
    let mut out = vec![make(DType::F32, x.shape.clone(), Data::F32(y))?.cast(x.dtype)];
    if training {
        let rm: Vec<f32> = (0..c)
            .map(|i| momentum * rmean[i] + (1.0 - momentum) * mean[i])
            .collect();
        let rv: Vec<f32> = (0..c)
            .map(|i| momentum * rvar[i] + (1.0 - momentum) * var[i])
            .collect();
        out.push(Tensor::from_f32(&[c], rm));
        out.push(Tensor::from_f32(&[c], rv));
    }
    Ok(out)
}

/// Gradient of output 0. Inference mode (`training_mode = 0`, the running statistics are
/// constants): `∂x = g·γ/σ`, `∂γ = Σ g·(x − μ)/σ`, `∂β = Σ g` with `σ = √(var + ε)`.
/// Training mode (batch statistics, biased variance): `∂x = γ/(σ·M) · (M·g − Σg − x̂·Σ g·x̂)`
/// over the `M = N·H·W` values of a channel. The running statistics get no gradient.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let x = input(gi.inputs, 0)?;
    let xv = super::grad::f32s(gi.inputs, 0)?;
    let (scale, rmean, rvar) = (
        f32_input(gi.inputs, 1)?,
        f32_input(gi.inputs, 3)?,
        f32_input(gi.inputs, 4)?,
    );
    let eps = ctx.node.attr_float("epsilon", 1e-5)?;
    let training = ctx.node.attr_int("training_mode", 0)? != 0;
    if x.rank() < 2 || scale.len() != x.shape[1] {
        return Err(OpError::shape("input [N, C, ...] and C scales", &x.shape));
    }
    let (n, c) = (x.shape[0], x.shape[1]);
    let plane: usize = x.shape[2..].iter().product();
    let g = gi.grad;
    let idx = |ci: usize| (0..n).flat_map(move |ni| (ni * c + ci) * plane..(ni * c + ci + 1) * plane);
    let m = (n * plane) as f64;
    let (mut dx, mut dg, mut db) = (vec![0f32; x.len()], vec![0f32; c], vec![0f32; c]);
    for ci in 0..c {
        let (mean, var) = if training {
            let mu = idx(ci).map(|i| xv[i] as f64).sum::<f64>() / m;
            let v = idx(ci).map(|i| (xv[i] as f64 - mu).powi(2)).sum::<f64>() / m;
            (mu, v)
        } else {
            (rmean[ci] as f64, rvar[ci] as f64)
        };
        let sigma = (var + eps as f64).sqrt();
        let (mut sg, mut sgx) = (0f64, 0f64);
        for i in idx(ci) {
            let xh = (xv[i] as f64 - mean) / sigma;
            sg += g[i] as f64;
            sgx += g[i] as f64 * xh;
        }
        dg[ci] = sgx as f32;
        db[ci] = sg as f32;
        let k = scale[ci] as f64 / sigma;
        for i in idx(ci) {
            dx[i] = if training {
                let xh = (xv[i] as f64 - mean) / sigma;
                (k / m * (m * g[i] as f64 - sg - xh * sgx)) as f32
            } else {
                (g[i] as f64 * k) as f32
            };
        }
    }
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    if gi.need(0) {
        out[0] = Some(super::grad::tensor(&x.shape, dx)?);
    }
    if gi.need(1) {
        out[1] = Some(super::grad::tensor(&[c], dg)?);
    }
    if gi.need(2) {
        out[2] = Some(super::grad::tensor(&[c], db)?);
    }
    Ok(out)
}

/// `BatchNormalization` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("BatchNormalization", 1, eval)
        .backward(backward).infer(super::registry::same_as_first);
