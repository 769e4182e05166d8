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

/// `BatchNormalization` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("BatchNormalization", 1, eval).infer(super::registry::same_as_first);
